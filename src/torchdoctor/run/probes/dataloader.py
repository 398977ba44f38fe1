"""DataLoader probe: wait per `next()`, iterator start-up per epoch, the loader's
configuration and where it was created and iterated. Stops worker processes at the end."""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter, _MultiProcessingDataLoaderIter

from torchdoctor.run.probes.contention import thread_schedstat
from torchdoctor.run.probes.frames import library_of, location_of, user_frame
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.model.record import LoaderStats, RunRecord
from torchdoctor.run.session import RunSession

_BATCH_SEARCH_DEPTH = 3  # how deep into (list, tuple, dict) batches we look for a tensor
# The training thread's CPU time in next() is read on one batch in this many (and on every batch
# of a step left out of timings): a read is a system call, which on a virtual machine costs the
# next microseconds of the user's loop too (measured: ~3 µs a batch at one in 4)
CPU_EVERY = 16


_Tensor = torch.Tensor


def first_tensor(batch: Any, depth: int = 0) -> torch.Tensor | None:
    """The batch's first tensor with a dimension (its inputs, usually)."""
    kind = type(batch)
    if kind is _Tensor:  # exact types first: `isinstance(x, torch.Tensor)` costs ~0.3 µs a call
        return batch if batch.dim() > 0 else None
    if (kind is list or kind is tuple) and batch and type(batch[0]) is _Tensor and batch[0].dim() > 0:
        return batch[0]  # (inputs, targets): the usual batch, once per step
    if isinstance(batch, torch.Tensor):
        return batch if batch.dim() > 0 else None
    if depth >= _BATCH_SEARCH_DEPTH:
        return None
    if isinstance(batch, dict):
        items = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        return None
    for item in items:
        found = first_tensor(item, depth + 1)
        if found is not None:
            return found
    return None


def batch_rows(batch: Any) -> int | None:
    """Rows in a batch: the first dimension of its first tensor."""
    tensor = first_tensor(batch)
    return int(tensor.shape[0]) if tensor is not None else None


def _dataset_len(loader: DataLoader) -> int | None:
    try:
        return len(loader.dataset)  # type: ignore[arg-type]
    except Exception:  # IterableDataset and friends: length unknown
        return None


def _sampler_len(loader: DataLoader) -> tuple[int | None, str | None]:
    """Rows one epoch of this loader can give (a DistributedSampler: this rank's shard)."""
    sampler = getattr(loader, "sampler", None)
    try:
        return int(len(sampler)), type(sampler).__name__  # type: ignore[arg-type]
    except Exception:  # an iterable dataset's infinite sampler, a sampler without a length
        return None, type(sampler).__name__ if sampler is not None else None


def _sampler_batch_size(loader: DataLoader) -> int | None:
    size = getattr(loader.batch_sampler, "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def describe_loader(loader: DataLoader, loader_id: int, created_at) -> LoaderStats:
    return LoaderStats(
        loader_id=loader_id,
        created_at=created_at,
        iterated_at=None,
        # a loader built around a batch sampler (accelerate's, a distributed wrapper) has no
        # batch_size of its own; the sampler's is the batch it yields
        batch_size=loader.batch_size if loader.batch_size is not None else _sampler_batch_size(loader),
        num_workers=loader.num_workers,
        pin_memory=bool(loader.pin_memory),
        prefetch_factor=loader.prefetch_factor if loader.num_workers > 0 else None,
        persistent_workers=bool(loader.persistent_workers),
        drop_last=bool(loader.drop_last),
        dataset_len=_dataset_len(loader),
        wait_cpu_s=0.0,
        cpu_timed_wait_s=0.0,
        dataset_type=f"{type(loader.dataset).__module__}.{type(loader.dataset).__qualname__}",
        sampler_len=_sampler_len(loader)[0], sampler_type=_sampler_len(loader)[1],
    )


class DataLoaderProbe:
    name = "dataloader"

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.patches = PatchSet()
        self.stats: list[LoaderStats] = []
        self._by_loader: "weakref.WeakKeyDictionary[DataLoader, LoaderStats]" = (
            weakref.WeakKeyDictionary()
        )
        self._live_worker_iters: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._dataset_sites: dict[int, tuple[Any, Any]] = {}  # id(dataset) -> (weakref, user DataLoader line)
        self.end_workers = True  # False: the code goes on iterating after the probes come out

    def install(self) -> None:
        self.patches.wrap(DataLoader, "__init__", self._wrap_init)
        self.patches.wrap(DataLoader, "__iter__", self._wrap_iter)
        self.patches.wrap(_BaseDataLoaderIter, "__next__", self._wrap_next)

    def uninstall(self) -> None:
        self.patches.restore()
        if self.end_workers:
            self.shutdown_workers()

    def shutdown_workers(self) -> None:
        """End worker processes of iterators the script left open (it was stopped mid-epoch)."""
        for it in list(self._live_worker_iters):
            try:
                it._shutdown_workers()
            except Exception:  # already shut down, or interpreter state odd: nothing to do
                pass

    def contribute(self, record: RunRecord) -> None:
        record.loaders = list(self.stats)

    def _stats_for(self, loader: DataLoader, created_at=None) -> LoaderStats:
        stats = self._by_loader.get(loader)
        if stats is None:
            stats = describe_loader(loader, len(self.stats), created_at)
            self._by_loader[loader] = stats
            self.stats.append(stats)
        return stats

    def _wrap_init(self, original):
        probe = self

        @functools.wraps(original)
        def __init__(loader, *args, **kwargs):
            original(loader, *args, **kwargs)
            frame, _ = user_frame(sys._getframe(1))
            site = location_of(frame) if frame is not None else None
            if frame is not None and library_of(frame.f_code.co_filename) is not None:
                # A framework rebuilding the user's loader (Lightning adding a DistributedSampler,
                # accelerate's prepare()) around the same dataset: the user's DataLoader(...) line
                # is the one to change.
                site = probe._user_site_of(loader.dataset) or site
            elif site is not None:
                probe._remember_site(loader.dataset, site)
            probe._stats_for(loader, site)

        return __init__

    def _remember_site(self, dataset, site) -> None:
        try:
            self._dataset_sites[id(dataset)] = (weakref.ref(dataset), site)
        except TypeError:  # a dataset that takes no weak reference: not followed
            pass

    def _user_site_of(self, dataset):
        ref, site = self._dataset_sites.get(id(dataset), (None, None))
        return site if ref is not None and ref() is dataset else None

    def _wrap_iter(self, original):
        probe = self

        @functools.wraps(original)
        def __iter__(loader):
            session = probe.session
            session.note_training_activity()
            started = session.clock()
            it = original(loader)
            seconds = session.clock() - started
            stats = probe._stats_for(loader)
            stats.iterator_starts_s.append(seconds)
            stats.epoch_start_steps.append(session.step_count)
            if stats.iterated_at is None:
                frame, _ = user_frame(sys._getframe(1))
                stats.iterated_at = location_of(frame) if frame is not None else None
            _mark(it, stats)
            if isinstance(it, _MultiProcessingDataLoaderIter):
                probe._live_worker_iters.add(it)
            session.add_time("data_wait", seconds)
            return it

        return __iter__

    def _wrap_next(self, original):
        session = self.session
        clock, cpu_clock = session.clock, session.cpu_clock
        listeners = session._listeners

        @functools.wraps(original)
        def __next__(it):
            # Every batch of the run passes here: each line below costs the user's loop (README,
            # "The doctor's own cost"); what only some steps need is read in those steps alone.
            # an attribute: a weak dictionary costs a microsecond a batch; none before the iterator's first
            # batch, which takes the full path
            stats = getattr(it, _STATS, None)
            if session.lean and stats is not None and stats.batches % CPU_EVERY:
                # The lean path: a training batch outside every window, in a step left to time alone (no
                # stop asked, no evaluation, no listener of batches: session.lean). No sampler runs here,
                # so none reads loading_depth: it is not kept.
                started = clock()
                try:
                    batch = original(it)
                finally:
                    ended = clock()
                    seconds = ended - started
                    ledger = session.ledger
                    ledger.seconds["data_wait"] += seconds
                    stats.wait_total_s += seconds
                    session.last_batch_at = ended
                stats.batches += 1
                kind = type(batch)
                if (kind is list or kind is tuple) and batch and type(batch[0]) is _Tensor and (shape := batch[0].shape):
                    # first_tensor's usual case, inline: (inputs, targets), the inputs' shape read once
                    ledger.samples = (ledger.samples or 0) + shape[0]
                    ledger.batch_shape = shape
                else:
                    tensor = first_tensor(batch)
                    if tensor is not None:
                        ledger.samples = (ledger.samples or 0) + tensor.shape[0]
                        ledger.batch_shape = tensor
                if ended > session._deadline:
                    session.check_time()
                ledger.doctor_s += clock() - ended  # the three lines before `started`: not worth a clock
                return batch
            entered = clock()
            if session.stop_reason is not None:
                session.raise_if_stopping()
            ledger = session.ledger
            first = stats is None and _first_batch_of(it)
            if first:
                stats = first
            if session._open:
                session.checkpoint()  # before the batch: outside every torch mode
            heavy = ledger.heavy_probe_ran
            # The training thread's CPU time inside next() tells loading that computes from loading
            # that waits: read on one batch in CPU_EVERY, and on every batch of a step already left out
            # of timings (LoaderStats.cpu_timed_wait_s is the wall time of the batches read). The
            # run-queue reading costs tens of µs: only in those steps.
            timed_cpu = stats is not None and (heavy or stats.batches % CPU_EVERY == 0)
            sched = thread_schedstat() if heavy and stats is not None else None
            cpu_started = cpu_clock() if timed_cpu else 0.0
            session.loading_depth += 1
            started = clock()
            try:
                batch = original(it)
            finally:
                ended = clock()
                session.loading_depth -= 1
                session.last_batch_at = ended
                seconds = ended - started
                in_eval = session.eval_started is not None
                if not in_eval:  # inside an evaluation its loading is evaluation's time
                    ledger.seconds["data_wait"] += seconds
                if stats is not None:
                    stats.wait_total_s += seconds
                    if timed_cpu:
                        stats.wait_cpu_s += cpu_clock() - cpu_started
                        stats.cpu_timed_wait_s += seconds
                    if sched is not None:
                        _add_runqueue(stats, sched, seconds)
                    if first:
                        stats.first_batch_waits_s.append(seconds)
            if stats is not None:
                stats.batches += 1
                if in_eval:
                    stats.batches_in_eval += 1
            if not in_eval:
                tensor = first_tensor(batch)
                if tensor is not None:
                    ledger.samples = (ledger.samples or 0) + tensor.shape[0]
                    ledger.batch_shape = tensor  # its shape is read at the step's end: a batch or sequence that grows
            sampler = session.sampler
            if sampler is not None and sampler.active:
                sampler.on_batch(in_eval)
            if listeners["on_batch"]:
                session.notify("on_batch", in_eval)
            if ended > session._deadline:
                session.check_time()
            ledger.doctor_s += (started - entered) + (clock() - ended)
            return batch

        return __next__


# The iterator's attributes: its loader's stats under _FIRST until its first batch is asked for,
# under _STATS from then on (so the lean path needs no first-batch test)
_STATS, _FIRST = "_torchdoctor_stats", "_torchdoctor_first_batch"


def _mark(it, stats: LoaderStats) -> None:
    """The iterator carries its loader's stats, its first batch still to come."""
    try:
        setattr(it, _FIRST, stats)
    except AttributeError:  # an iterator class with __slots__: measured without its stats
        pass


def _first_batch_of(it) -> LoaderStats | None:
    """The stats of an iterator whose first batch is asked for now (kept as its stats from here), else None."""
    stats = getattr(it, _FIRST, None)
    if stats is not None:
        setattr(it, _FIRST, None)
        setattr(it, _STATS, stats)
    return stats


def _add_runqueue(stats: LoaderStats, before: tuple[float, float], seconds: float) -> None:
    after = thread_schedstat()
    if after is None:
        return
    stats.sampled_wait_s += seconds
    stats.sampled_runqueue_s = (stats.sampled_runqueue_s or 0.0) + max(0.0, after[1] - before[1])
