"""DDP probe: every `DistributedDataParallel` wrapper's settings, and from DDP's own runtime
statistics how long each synchronised backward computed and communicated.

DDP times its backward itself (`_get_ddp_logging_data`: compute start/end, first all-reduce
start, last all-reduce end, on the host clock, or CUDA events on a GPU) when runtime logging
samples that iteration; the probe sets the sample rate to every iteration. DDP publishes an
iteration's timings at the next synchronised forward, so the probe reads them there (and
once more after the script, for the last one). Communication that ends after the last
gradient was ready is *exposed*: backward could not hide it.

It also counts what each optimizer step all-reduced: a forward run with grad enabled while
`require_backward_grad_sync` is true makes the following backward all-reduce (`no_sync()`
clears the flag for forwards inside it, which is why `no_sync()` around `backward()` alone
changes nothing). Where the first such backward is called, and every `no_sync()` call site,
are kept for the report.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from torchdoctor.model.units import MIB
from torchdoctor.model.distributed_record import DdpBackward, DdpModel, DdpStep, DistributedInfo, NoSyncUse, RankIdentity
from torchdoctor.model.record import ProbeNote, RunRecord, StepSample
from torchdoctor.run.probes.frames import caller_location, frame_line, location_of, own_caller_location, user_frame
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.comm import slow_link
from torchdoctor.run.session import DONE, RunSession

NS = 1e-9
TIMESTAMPS = ("backward_compute_time_start", "backward_compute_time_end", "backward_comm_time_start",
              "backward_comm_time_end")


class _Tracked:
    """One DDP wrapper and what the probe learned about it."""

    def __init__(self, ddp: DistributedDataParallel, info: DdpModel) -> None:
        self.ddp = ddp
        self.info = info
        self.synced_forwards = 0  # forwards that will all-reduce in their backward
        self.step_of_forward: dict[int, int] = {}  # synced forward ordinal -> step index it ran in
        self.seen_iteration = 0
        self.buffer_sum: float | None = None
        self.hook_checked = False


class DdpProbe:
    name = "ddp"
    polls_steps = True  # on_step reads the buffers at the first measured step: the session polls then

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.patches = PatchSet()
        self.tracked: list[_Tracked] = []
        self.steps: dict[int, DdpStep] = {}
        self.no_sync_sites: dict[tuple[str, int], NoSyncUse] = {}
        self._active_no_sync: list[NoSyncUse] = []
        self._want_backward_location: _Tracked | None = None
        self._notes: list[str] = []
        self.simulated = slow_link.simulated_gbps()

    # ---- install -------------------------------------------------------------------------------
    def install(self) -> None:
        self.patches.wrap(DistributedDataParallel, "__init__", self._wrap_init)
        self.patches.wrap(DistributedDataParallel, "forward", self._wrap_forward)
        self.patches.wrap(DistributedDataParallel, "no_sync", self._wrap_no_sync)
        self.patches.wrap(DistributedDataParallel, "_post_forward", functools.partial(self._timed, "post_forward_s"))
        self.patches.wrap(DistributedDataParallel, "_sync_buffers", functools.partial(self._timed, "buffer_sync_s"))
        self._backward_patched = False  # torch.autograd.backward is wrapped once a DDP model exists

    def uninstall(self) -> None:
        self.patches.restore()

    def on_step(self, step: StepSample):
        if step.index == self.session.config.warmup + 1:
            for tracked in self.tracked:  # the buffers' state when measuring starts
                tracked.buffer_sum = _buffer_sum(tracked.ddp)
        return DONE if step.index > self.session.config.warmup else None

    # ---- DDP construction and forward ----------------------------------------------------------
    def _wrap_init(self, original):
        probe = self

        @functools.wraps(original)
        def __init__(ddp, *args, **kwargs):
            original(ddp, *args, **kwargs)
            if not probe._backward_patched:  # every backward() of a run without DDP stays unwrapped
                probe._backward_patched = True
                probe.patches.wrap(torch.autograd, "backward", probe._wrap_backward)
            try:
                probe._track(ddp, own_caller_location())
            except Exception as exc:  # never break the user's DDP for a measurement
                probe._notes.append(f"could not read a DDP wrapper's settings: {type(exc).__name__}: {exc}")

        return __init__

    def _track(self, ddp: DistributedDataParallel, created_at) -> None:
        buffers = [b for b in ddp.module.buffers()]
        params = [p for p in ddp.module.parameters() if p.requires_grad]
        group = ddp.process_group
        info = DdpModel(
            created_at=created_at, module=type(ddp.module).__name__,
            backend=_backend(group), world_size=group.size() if hasattr(group, "size") else 1,
            param_tensors=len(params), grad_bytes=sum(p.numel() * p.element_size() for p in params),
            bucket_cap_mb=round(ddp.bucket_bytes_cap / MIB, 3),
            gradient_as_bucket_view=bool(ddp.gradient_as_bucket_view), static_graph=bool(ddp.static_graph),
            find_unused_parameters=bool(ddp.find_unused_parameters), broadcast_buffers=bool(ddp.broadcast_buffers),
            buffers=len(buffers), buffer_bytes=sum(b.numel() * b.element_size() for b in buffers),
            simulated_link_gbps=self.simulated,
        )
        ddp._set_ddp_runtime_logging_sample_rate(1)
        self.tracked.append(_Tracked(ddp, info))

    def _find(self, ddp) -> _Tracked | None:
        for tracked in self.tracked:
            if tracked.ddp is ddp:
                return tracked
        return None

    def _wrap_forward(self, original):
        probe = self

        def forward(ddp, *args, **kwargs):  # no functools.wraps: nn.Module.__call__ calls it every step
            tracked = probe._find(ddp)
            if tracked is None:
                return original(ddp, *args, **kwargs)
            if not tracked.hook_checked:
                probe._first_forward(tracked)
            grad = torch.is_grad_enabled()
            synced = grad and ddp.require_backward_grad_sync
            result = original(ddp, *args, **kwargs)
            if grad:
                probe._count_forward(tracked, synced)
            return result

        return forward

    def _first_forward(self, tracked: _Tracked) -> None:
        tracked.hook_checked = True
        tracked.info.forward_location = caller_location(2)
        ddp = tracked.ddp
        if self.simulated is not None and not ddp._comm_hooks:
            # DDP's default hook all-reduces through torch.distributed.all_reduce, where the
            # simulated link applies; it behaves as DDP's built-in all-reduce does.
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            ddp.register_comm_hook(ddp.process_group, allreduce_hook)
        hooks = [getattr(hook, "__qualname__", getattr(hook, "__name__", repr(hook))) for hook, _ in ddp._comm_hooks]
        if self.simulated is not None:
            hooks = [h for h in hooks if h != "allreduce_hook"] or hooks[:0]
        tracked.info.comm_hook = ", ".join(hooks) or None

    def _count_forward(self, tracked: _Tracked, synced: bool) -> None:
        session = self.session
        index = session.step_count + 1
        step = self.steps.get(index) or self._new_step(index)
        if self._active_no_sync:
            self._active_no_sync[-1].forwards_inside += 1
        if not synced:
            step.skipped_backwards += 1
            return
        step.synced_backwards += 1
        tracked.step_of_forward[tracked.synced_forwards] = index
        tracked.synced_forwards += 1
        if tracked.info.backward_location is None:
            self._want_backward_location = tracked
        if index > session.config.warmup and session.stop_reason is None:
            self._read_timings(tracked)

    def _read_timings(self, tracked: _Tracked) -> None:
        """DDP's timings of the last synchronised backward, published by this forward."""
        try:
            ints = tracked.ddp.logger._get_ddp_logging_data().ints_map
        except Exception:
            return
        iteration = ints.get("iteration", 0)
        if iteration <= tracked.seen_iteration or any(k not in ints for k in TIMESTAMPS):
            return
        tracked.seen_iteration = iteration
        index = tracked.step_of_forward.pop(iteration - 1, None)  # the backward after forward #iteration-1
        if index is None:
            return
        step = self.steps.get(index) or self._new_step(index)
        step.backwards.append(DdpBackward(*(ints[k] * NS for k in TIMESTAMPS)))
        step.forward_compute_s += ints.get("forward_compute_time", 0) * NS

    def _new_step(self, index: int) -> DdpStep:
        """Step `index`'s DdpStep, on first use: `self.steps.get(index) or self._new_step(index)`
        (a DdpStep is always true; the lookup stays inline, it runs on every forward)."""
        step = self.steps[index] = DdpStep(step=index)
        return step

    def _timed(self, attribute: str, original):
        """Time one of DDP's own methods into the open step's DdpStep."""
        probe = self

        def timed(ddp, *args, **kwargs):
            started = time.perf_counter()
            try:
                return original(ddp, *args, **kwargs)
            finally:
                index = probe.session.step_count + 1
                step = probe.steps.get(index) or probe._new_step(index)
                setattr(step, attribute, getattr(step, attribute) + time.perf_counter() - started)

        return timed

    # ---- backward and no_sync ---------------------------------------------------------------------
    def _wrap_backward(self, original):
        probe = self

        def backward(*args, **kwargs):
            wanted = probe._want_backward_location
            if wanted is not None:
                probe._want_backward_location = None
                frame, _ = user_frame(sys._getframe(1))
                if frame is not None:
                    wanted.info.backward_location = location_of(frame)
            return original(*args, **kwargs)

        return backward

    def _wrap_no_sync(self, original):
        probe = self

        @functools.wraps(original)
        def no_sync(ddp):
            frame, _ = user_frame(sys._getframe(1))
            where = (frame.f_code.co_filename, frame_line(frame), location_of(frame)) if frame is not None else None
            return probe._no_sync_context(original(ddp), where)

        return no_sync

    @contextlib.contextmanager
    def _no_sync_context(self, inner, where):
        """`where`: (file, line, Location) of the no_sync() call, taken when it was called."""
        site = None
        if where is not None:
            site = self.no_sync_sites.get(where[:2])
            if site is None:
                site = self.no_sync_sites[where[:2]] = NoSyncUse(location=where[2])
            site.entries += 1
            self._active_no_sync.append(site)
        backwards_before = self.session.backward_calls
        try:
            with inner:
                yield
        finally:
            if site is not None:
                self._active_no_sync.remove(site)
                site.backwards_inside += self.session.backward_calls - backwards_before

    # ---- after the run ---------------------------------------------------------------------------
    def contribute(self, record: RunRecord) -> None:
        if not self.tracked and not self.no_sync_sites:
            return
        info = record.distributed
        if info is None:
            info = record.distributed = DistributedInfo(identity=RankIdentity(rank=0, world_size=1))
        measured = {s.index for s in record.measured_steps}
        counted = [d for d in self.steps.values() if d.step in measured]
        for tracked in self.tracked:
            self._read_last(tracked)
            model = tracked.info
            data = _logging_data(tracked.ddp)
            sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
            model.bucket_sizes = [int(x) for x in str(sizes).replace(" ", "").split(",") if x.isdigit()]
            unused = data.get("unused_parameter_size")
            model.unused_parameter_bytes = int(unused) if isinstance(unused, int) else None
            model.static_graph = bool(tracked.ddp.static_graph)
            if tracked.buffer_sum is not None and model.buffers:
                model.buffers_changed = _buffer_sum(tracked.ddp) != tracked.buffer_sum
            if counted:  # DDP's own forward work per measured step (all wrappers together: one is usual)
                model.unused_search_s = sum(d.post_forward_s for d in counted) / len(counted)
                model.buffer_sync_s = sum(d.buffer_sync_s for d in counted) / len(counted)
            info.ddp.append(model)
        info.ddp_steps = [self.steps[k] for k in sorted(self.steps)]
        info.no_sync = list(self.no_sync_sites.values())
        record.probe_notes += [ProbeNote(self.name, n) for n in self._notes]

    def _read_last(self, tracked: _Tracked) -> None:
        """DDP publishes a backward's timings at the next forward; the last one has none."""
        try:
            tracked.ddp.logger.set_runtime_stats_and_log()
        except Exception:
            return
        self._read_timings(tracked)


def _logging_data(ddp) -> dict[str, Any]:
    try:
        return ddp._get_ddp_logging_data()
    except Exception:
        return {}


def _backend(group) -> str:
    try:
        return str(group.name())
    except Exception:
        return ""


def _buffer_sum(ddp) -> float:
    """A cheap fingerprint of every buffer (BatchNorm running stats change every training step)."""
    with torch.no_grad():
        return float(sum(b.detach().double().sum().item() for b in ddp.module.buffers() if b.numel()))
