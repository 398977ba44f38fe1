"""DataLoader knobs: constructor settings, cached replay, loader-only timing, eval cut short.

All sit under the DataLoader probe, so the probe measures the loader as the knob changed it.
"""

from __future__ import annotations

import functools
import inspect
import sys
import time
import weakref
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from torchdoctor.run.knobs.base import KnobGroup
from torchdoctor.run.probes.dataloader import batch_rows
from torchdoctor.run.probes.frames import caller_location, location_of, user_frame
from torchdoctor.model.record import LoaderOnlyStats
from torchdoctor.run.session import StopRun

# knob name → DataLoader argument it sets
_INIT_ARGUMENTS = {"workers": "num_workers", "pin_memory": "pin_memory",
                   "persistent_workers": "persistent_workers", "prefetch_factor": "prefetch_factor",
                   "batch_size": "batch_size"}
LOADER_ONLY_MIN_BATCHES = 20
EVAL_CUT = "evaluation loaders cut to one sample of their first batch, replayed from memory"
REPLAYED = ("training batches replayed from memory (each loader's first batches): from the next epoch on the loader "
            "itself is not driven (no sampler, workers or dataset reads)")


class _IterState:
    def __init__(self, loader: DataLoader, in_eval: bool) -> None:
        self.loader = loader
        self.in_eval = in_eval
        self.served = 0  # batches handed out by this iterator


def _first_sample(batch: Any) -> Any:
    """The batch cut to its first sample: every tensor with the batch's rows keeps one row;
    anything else (strings, ids, nested structure) is left as it is."""
    rows = batch_rows(batch)

    def cut(item: Any, depth: int = 0) -> Any:
        if isinstance(item, torch.Tensor):
            return item[:1] if item.dim() > 0 and item.shape[0] == rows else item
        if depth >= 3:
            return item
        # plain containers only: a namedtuple or a custom batch class may not rebuild this way
        if type(item) is dict:
            return {k: cut(v, depth + 1) for k, v in item.items()}
        if type(item) in (list, tuple):
            return type(item)(cut(v, depth + 1) for v in item)
        return item

    return cut(batch) if rows else batch


class _FirstEvalBatch:
    """An evaluation loader's iterator under eval=off after its first pass: one sample of that
    pass's first batch, once, from memory. The script's evaluation code still runs, on real
    data, while almost no evaluation work is left: no batch fetched, no worker started again,
    one sample through the model."""

    def __init__(self, batch: Any) -> None:
        self._batch: Any = batch
        self._served = False

    def __iter__(self) -> "_FirstEvalBatch":
        return self

    def __next__(self) -> Any:
        if self._served:
            raise StopIteration
        self._served = True
        return self._batch


class _ReplayIter(_BaseDataLoaderIter):
    """A training loader's iterator under data=cached once its first batches are in memory: the
    epoch's batches come from that cache, and the loader itself is never driven again (no
    sampler, no worker started or respawned, no dataset read). A subclass of DataLoader's own
    iterator so the DataLoader probe measures it like any other; its __init__ is deliberately
    not the base's, which would start the real pipeline."""

    def __init__(self, batches: list, length: int) -> None:  # super().__init__ is not called, on purpose
        self._replayed, self._length, self._served = batches, length, 0

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> "_ReplayIter":
        return self

    def replay(self) -> Any:
        if self._served >= self._length:
            raise StopIteration
        batch = self._replayed[self._served % len(self._replayed)]
        self._served += 1
        return batch

    def __del__(self) -> None:  # the base's would shut down workers this iterator never had
        pass


def _draw_like_an_iterator(loader: DataLoader) -> None:
    """Take from the global RNG what a real iterator and its first batch would (the iterator's
    base seed, a shuffling sampler's seed), so training after a skipped evaluation shuffles
    and initializes exactly as it would have: the knob changes timings, not numerics."""
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    next(iter(loader._index_sampler), None)


class LoaderKnobs(KnobGroup):
    names = ("workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size", "data", "eval")
    layer = "inner"

    def __init__(self, settings, ctx) -> None:
        super().__init__(settings, ctx)
        self._iters: "weakref.WeakKeyDictionary[Any, _IterState]" = weakref.WeakKeyDictionary()
        self._cache: "weakref.WeakKeyDictionary[DataLoader, list]" = weakref.WeakKeyDictionary()
        self._eval_batch: "weakref.WeakKeyDictionary[DataLoader, Any]" = weakref.WeakKeyDictionary()
        self.loader_only: LoaderOnlyStats | None = None
        self.replay_batches = max(1, ctx.warmup)  # cache what warmup loads; measured steps replay it

    def install(self) -> None:
        if not self.settings:
            return
        if any(name in self.settings for name in _INIT_ARGUMENTS):
            self.patches.wrap(DataLoader, "__init__", self._wrap_init)
        if "data" in self.settings or "eval" in self.settings:
            self.patches.wrap(DataLoader, "__iter__", self._wrap_iter)
            self.patches.wrap(_BaseDataLoaderIter, "__next__", self._wrap_next)

    # ---- constructor settings -----------------------------------------------------
    def _wrap_init(self, original):
        group = self
        signature = inspect.signature(original)

        @functools.wraps(original)
        def __init__(loader, *args, **kwargs):
            try:
                bound = signature.bind(loader, *args, **kwargs)
            except TypeError:  # let DataLoader raise its own, clearer error
                return original(loader, *args, **kwargs)
            group._rewrite(bound.arguments, caller_location())
            return original(*bound.args, **bound.kwargs)

        return __init__

    def _rewrite(self, arguments: dict[str, Any], where) -> None:
        site = f"{where.path}:{where.line}" if where else "a DataLoader"
        if "workers" in self.settings:
            before = arguments.get("num_workers", 0)
            arguments["num_workers"] = self.settings["workers"]
            self.applied("workers", f"{site} num_workers {before} → {self.settings['workers']}")
        workers = arguments.get("num_workers", 0)
        if "pin_memory" in self.settings:
            if self.ctx.cuda_available():
                arguments["pin_memory"] = self.settings["pin_memory"]
                self.applied("pin_memory", f"{site} pin_memory={self.settings['pin_memory']}")
            else:
                self.refuse("pin_memory", "no CUDA device: pinned memory only speeds host→GPU copies")
        for name in ("persistent_workers", "prefetch_factor"):
            if name not in self.settings:
                continue
            if workers > 0:
                arguments[name] = self.settings[name]
                self.applied(name, f"{site} {name}={self.settings[name]}")
            else:
                self.refuse(name, f"the DataLoader at {site} has num_workers=0, so {name} does not apply")
        if "batch_size" in self.settings:
            inherited = getattr(arguments.get("batch_sampler"), "batch_size", None)
            if inherited == self.settings["batch_size"]:
                # a loader rebuilt from one the knob already changed (accelerate's prepare(),
                # Lightning's distributed sampler): it keeps that loader's batch sampler
                self.applied("batch_size", f"{site} keeps batch_size {inherited} from the batch sampler it was given")
            elif arguments.get("batch_sampler") is not None or arguments.get("batch_size", 1) is None:
                self.refuse("batch_size", f"the DataLoader at {site} batches with its own sampler")
            else:
                before = arguments.get("batch_size", 1)
                arguments["batch_size"] = self.settings["batch_size"]
                self.applied("batch_size", f"{site} batch_size {before} → {self.settings['batch_size']} "
                                           "(scale the learning rate if you keep it)")

    # ---- iteration: cached replay, loader-only, eval cut short ----------------------
    def _wrap_iter(self, original):
        group = self

        @functools.wraps(original)
        def __iter__(loader):
            in_eval = group.ctx.in_eval()
            if in_eval and group.settings.get("eval") == "off" and loader in group._eval_batch:
                group.applied("eval", EVAL_CUT)
                _draw_like_an_iterator(loader)
                return _FirstEvalBatch(group._eval_batch[loader])
            cache = group._cache.get(loader)
            if group.settings.get("data") == "cached" and not in_eval and cache is not None \
                    and len(cache) >= group.replay_batches:
                try:
                    length = len(loader)
                except TypeError:
                    length = None
                if length is not None:
                    group.applied("data", REPLAYED)
                    return _ReplayIter(cache, length)
            it = original(loader)
            group._iters[it] = _IterState(loader, in_eval)
            return it

        return __iter__

    def _wrap_next(self, original):
        group = self

        @functools.wraps(original)
        def __next__(it):
            if isinstance(it, _ReplayIter):
                return it.replay()
            state = group._iters.get(it)
            if state is None:
                return original(it)
            if state.in_eval and group.settings.get("eval") == "off":
                if state.served >= 1:
                    group.applied("eval", EVAL_CUT)
                    raise StopIteration
                batch = _first_sample(original(it))
                group._eval_batch[state.loader] = batch
                state.served += 1
                return batch
            mode = group.settings.get("data")
            if mode == "loader-only" and not state.in_eval:
                group._time_loader_alone(it, original, state)
            batch = group._replay(it, original, state) if mode == "cached" else original(it)
            state.served += 1
            return batch

        return __next__

    def _replay(self, it, original, state: _IterState):
        try:
            epoch_len = len(state.loader)
        except TypeError:
            self.refuse("data", "the DataLoader has no length (IterableDataset), so a replay cannot end epochs")
            return original(it)
        if state.served >= epoch_len:
            raise StopIteration
        cache = self._cache.setdefault(state.loader, [])
        if len(cache) < self.replay_batches:
            batch = original(it)
            cache.append(batch)
            return batch
        self.applied("data", REPLAYED)
        return cache[state.served % len(cache)]

    def _time_loader_alone(self, it, original, state: _IterState) -> None:
        """Pull batches as fast as the loader gives them, without the model, then stop the run."""
        frame, _ = user_frame(sys._getframe(2))
        wanted = max(LOADER_ONLY_MIN_BATCHES, self.ctx.warmup * 2)
        batches = samples = 0
        started = time.perf_counter()
        try:
            while batches < wanted:
                rows = batch_rows(original(it))
                batches += 1
                samples = samples + rows if rows is not None and samples is not None else None
        except StopIteration:
            pass
        seconds = time.perf_counter() - started
        self.loader_only = LoaderOnlyStats(batches=batches, seconds=seconds, samples=samples,
                                           location=location_of(frame) if frame is not None else None)
        self.applied("data", f"training DataLoader iterated alone for {batches} batches")
        raise StopRun("loader-only")

    def contribute(self, record) -> None:
        record.loader_only = self.loader_only
