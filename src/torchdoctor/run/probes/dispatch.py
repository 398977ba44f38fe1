"""Dispatch sampler: for a few sampled step intervals, count every aten op by the user
source line that issued it, and catch host-sync, data-dependent and transfer calls at the
API the user wrote (`.item()`, `.cpu()`, `x[mask]`, `.to(device)`).

Two PyTorch modes do the work: a TorchFunctionMode sees the user-level call, a
TorchDispatchMode sees each aten op (≈ each kernel launch on a GPU). Both are active only
inside sampled windows; those steps are excluded from timing statistics.
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from torchdoctor.run.probes.compile import compiled_code_in_use
from torchdoctor.run.probes.calls import (DATA_DEPENDENT_APIS, DEVICE_TO_HOST_APIS, HOST_SYNC_APIS, MATMUL_OPS,
                                          TRANSFER_APIS, classify_call, first_tensor, matmul_flops)
from torchdoctor.run.probes.frames import display_path, frame_line, library_of, source_text, user_frame
from torchdoctor.run.probes.loops import enclosing_loop, loop_of
from torchdoctor.run.probes.placement import on_device, parameter_storages, propagate
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.run.process import current_pid
from torchdoctor.model.record import ApiCall, Location, LoopSite, OpSite, RunRecord

EVAL_BATCHES_SAMPLED = 4  # enough to see a per-batch habit, cheap enough not to matter
MIN_WHOLE_EVAL_BATCHES = 2  # the time bound does not cut the sample before this many whole batches
# An evaluation without DataLoader batches (a generation loop) is sampled for this long at most,
# or one baseline step when that is longer: the rest of it runs at plain speed
EVAL_SAMPLE_MIN_S = 0.05
# ...and, with neither a DataLoader nor a module hook to end it (a script that compiles), until one of its
# calls has come round MIN_WHOLE_EVAL_BATCHES times, or this long at most
EVAL_SAMPLE_MAX_S = 1.0
MAX_GAP_S = 1e-3  # Python time before an op longer than this is not the op's loop overhead
CALIBRATION_OPS = 200
CALIBRATION_REPEATS = 5
_AUTOGRAD_LOCATION = ("<autograd engine>", 0, "backward")
# A device's name, asked per sampled op: `str(tensor.device)` formats it anew each time
_DEVICE_NAMES: dict[torch.device, str] = {}


def _device_name(device: torch.device) -> str:
    return _DEVICE_NAMES.get(device) or _DEVICE_NAMES.setdefault(device, str(device))


@dataclass
class _SiteAcc:
    ops: int = 0
    internal_ops: int = 0
    param_updates: int = 0  # in-place ops on a parameter (a hand-written optimizer)
    entries: int = 0  # times the ops moved here from another line: how often the line ran
    time_s: float = 0.0
    op_counts: Counter = field(default_factory=Counter)
    devices: set = field(default_factory=set)
    numels: list = field(default_factory=list)
    fp32_matmul_cuda: int = 0


@dataclass
class _LoopAcc:
    ops: int = 0
    internal_ops: int = 0
    time_s: float = 0.0
    iterations: int = 0
    runs: int = 0
    param_uses: int = 0
    params: set = field(default_factory=set)
    writes: int = 0
    written: set = field(default_factory=set)
    windows: set = field(default_factory=set)  # sampled steps it ran in: a module-level loop keeps one frame
    body: Counter = field(default_factory=Counter)  # line of the loop's frame -> ops
    lines: Counter = field(default_factory=Counter)  # op site -> ops
    op_counts: Counter = field(default_factory=Counter)
    numels: list = field(default_factory=list)
    last: tuple[int, int, str] | None = None  # (frame, offset, first op at that offset): see _record_loop


class _ApiWatcher(TorchFunctionMode):
    torchdoctor_probe_mode = True  # lifted off the mode stack inside compiled code (probes/compile.py)

    def __init__(self, sampler: "DispatchSampler") -> None:
        super().__init__()
        self.sampler = sampler

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sampler = self.sampler
        if sampler.passing or (sampler.phase == "eval" and sampler._eval_hook is None and sampler._eval_past_bound()):
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in _WATCHED and args and current_pid() == sampler.pid:
            sampler._record_api(name, args, kwargs, sys._getframe(1))
        sampler.handling += 1  # inside a handler: no safe point for taking the modes out
        try:
            out = func(*args, **kwargs)
        finally:
            sampler.handling -= 1
        propagate(name, args, kwargs, out)
        return out


_WATCHED = HOST_SYNC_APIS | DEVICE_TO_HOST_APIS | DATA_DEPENDENT_APIS | TRANSFER_APIS | {
    "__getitem__", "where", "repeat_interleave"}


class _OpCounter(TorchDispatchMode):
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Off while torch.compile traces, on while compiled code runs: Dynamo compiles as it would
        without the doctor (without this it would skip the frame, for good)."""
        return True

    def __init__(self, sampler: "DispatchSampler") -> None:
        super().__init__()
        self.sampler = sampler

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        sampler = self.sampler
        if sampler.passing:
            return func(*args, **(kwargs or {}))
        if sampler.outside_step():  # data loading (a batch's many small ops) or an evaluation: not timed
            sampler.last_end = None  # ...nor the next op's loop overhead
            return func(*args, **(kwargs or {}))
        started = sampler.clock()
        out = func(*args, **(kwargs or {}))
        if current_pid() == sampler.pid:
            sampler._record_op(func, args, out, started, sampler.clock(), sys._getframe(1))
        return out


class DispatchSampler:
    name = "dispatch"
    # not a session listener for batches: the loader probe calls on_batch while the sampler is active
    listens_to_batches = False

    def __init__(self, clock: Callable[[], float], on_activate: Callable[[], None] = lambda: None,
                 outside_step: Callable[[], bool] = lambda: False, on_deactivate: Callable[[], None] = lambda: None,
                 baseline: Callable[[], float | None] = lambda: None,
                 script_compiles: Callable[[], bool] = compiled_code_in_use,
                 compiling: Callable[[], bool] = lambda: False):
        self.clock = clock
        # the script called torch.compile or ran compiled code: a global module hook of the doctor's
        # would be traced into its graphs (at step 0, an evaluation can run before the first compile)
        self.script_compiles = script_compiles
        self.compiling = compiling  # torch.compile is compiling a graph now: the script's time, no bound runs
        self.on_activate = on_activate
        self.on_deactivate = on_deactivate
        self.baseline = baseline  # the median unmeasured step so far (the eval sample's time bound)
        self.outside_step = outside_step  # evaluation or data loading: not the step's ops
        self.pid = current_pid()
        self.handling = 0  # inside the function mode's handler now (depth)
        self.eval_sampled_s = 0.0  # wall time evaluation code ran under the sampler
        self.eval_cut = False  # the evaluation's sample stopped at its time bound
        self._eval_started: float | None = None
        self._eval_bound_from: float | None = None  # the first module call (or torch call) of the sampled evaluation
        # past the evaluation's bound with no safe point to take the modes out (the script compiles,
        # so no module hook, and no DataLoader batch): they hand every call on unrecorded until it ends
        self.passing = False
        self.eval_passed = False
        self._eval_rounds = 0  # how often the hook-free evaluation's busiest call has run: its batches, near enough
        self._eval_hook = None
        self._paused = False  # the training window stepped aside for an evaluation
        self.patches = PatchSet()
        self.phase: str | None = None
        self.train_windows = 0
        self.eval_windows = 0
        self.eval_batches = 0  # DataLoader batches that arrived in the sampled evaluation
        self.eval_batch_cut = False  # the sample ended inside its last batch: that one is not whole
        self.last_end: float | None = None
        self.sites: dict[tuple, _SiteAcc] = {}
        self.loops: dict[tuple, _LoopAcc] = {}
        self.api: dict[tuple, ApiCall] = {}
        self.flops: list[float] = []
        self.fp32_matmul_cuda = 0
        self.autocast_seen = False
        self.overhead_per_op_s = 0.0
        self.param_ptrs: set[int] = set()  # storages of the parameters backward() reached
        self._last_key: tuple | None = None  # the site of the previous op
        self._params_learned = 0
        self._modes: list[Any] = []
        self._calibrated = False

    # ---- lifecycle ---------------------------------------------------------------------
    def install(self) -> None:
        if hasattr(torch, "cuda"):
            self.patches.wrap(torch.cuda, "synchronize", self._wrap_synchronize)

    def uninstall(self) -> None:
        self.deactivate()
        self.patches.restore()

    @property
    def active(self) -> bool:
        return bool(self._modes)

    def activate(self, phase: str) -> None:
        """Start (or, in a run of consecutive sampled steps, continue) a sampled window."""
        if self._modes:
            if phase == "train" and self.phase == "train":
                self.train_windows += 1
            return
        self.phase = phase
        self.last_end = None
        watcher = _ApiWatcher(self)
        watcher.__enter__()
        self._modes.append(watcher)
        if phase == "train":
            self.train_windows += 1
            counter = _OpCounter(self)
            counter.__enter__()
            self._modes.append(counter)
        else:
            self.eval_windows += 1
            self._eval_started = self.clock()
            self._eval_bound_from = None
            self._eval_rounds = 0
            # a generation loop may take no batch: each module call is a safe point to end the sample;
            # not in a script that compiles, where Dynamo would trace the hook into the graphs
            # (a graph break, other numerics): its batches alone bound the sample there
            if not self.script_compiles():
                self._eval_hook = torch.nn.modules.module.register_module_forward_pre_hook(self._eval_module_called)
        self.on_activate()

    def deactivate(self) -> None:
        self._paused = False
        self.passing = False
        if not self._modes:
            return
        while self._modes:
            self._modes.pop().__exit__(None, None, None)
        if self._eval_started is not None:
            self.eval_sampled_s += self.clock() - self._eval_started
            self._eval_started = None
        if self._eval_hook is not None:
            self._eval_hook.remove()
            self._eval_hook = None
        self.phase = None
        self.on_deactivate()

    def can_stop_now(self) -> bool:
        """At a safe point: outside the handler, and the modes on top of their stacks (a
        user's own mode entered after ours must leave first)."""
        if self.handling or not self._modes:
            return False
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        top = torch._C._len_torch_function_stack()
        if top == 0 or torch._C._get_function_stack_at(top - 1) is not self._modes[0]:
            return False
        return len(self._modes) < 2 or _get_current_dispatch_mode() is self._modes[1]

    @property
    def sampling_evaluation(self) -> bool:
        """The first evaluation's sample is running: bounded by its own batches and time, so a
        training window's spent budget does not cut it (the training modes stepped aside)."""
        return self.phase == "eval"

    def on_batch(self, in_eval: bool) -> None:
        """A DataLoader batch arrived (the loader probe calls this while the sampler is active):
        sample the first few batches of the first eval."""
        self.last_end = None  # data-loading time is not loop overhead of the next op
        if in_eval and self.phase == "eval":
            self.eval_batches += 1
            if self.eval_batches > EVAL_BATCHES_SAMPLED:
                self.deactivate()
            else:
                self._eval_module_called(None, None)

    def _eval_bound_reached(self) -> float | None:
        """Seconds since the sampled evaluation's bound started, once past it; None before. The bound
        starts at the evaluation's first module call (or torch call, without a hook): what ran before
        it (building a loader, a tokenizer: nanochat's first evaluation spent 77 ms there) is no
        batch's work; and it never ends a sample before its least whole batches."""
        now = self.clock()
        if self._eval_bound_from is None:
            self._eval_bound_from = now
            return None
        elapsed = now - self._eval_bound_from
        if 0 < self.eval_batches <= MIN_WHOLE_EVAL_BATCHES or elapsed <= max(EVAL_SAMPLE_MIN_S, self.baseline() or 0.0):
            return None
        return elapsed

    def _eval_past_bound(self) -> bool:
        """The hook-free evaluation's bound, checked at its torch calls."""
        elapsed = self._eval_bound_reached()
        if elapsed is None or self.compiling():
            return False
        if self._eval_rounds < MIN_WHOLE_EVAL_BATCHES and elapsed <= EVAL_SAMPLE_MAX_S:
            return False  # no DataLoader to count batches by: until a call of the loop has come round twice
        self.passing = self.eval_passed = self.eval_cut = True
        self.eval_batch_cut = self.eval_batches > 0
        return True

    def exclude_script_time(self, seconds: float, now: float) -> None:
        """torch.compile compiled for `seconds` inside the evaluation's sample: the script's time, not
        the sample's (nanochat's first evaluation compiled for 1.8 s and its sample ended before the
        evaluation's own per-batch read)."""
        if self._eval_bound_from is not None and seconds > 0:
            self._eval_bound_from = min(now, self._eval_bound_from + seconds)

    def _eval_module_called(self, module, args) -> None:
        """A module is called in the sampled evaluation: past its time bound, the sample ends
        here and the rest of the evaluation runs at plain speed."""
        if self._eval_started is None or current_pid() != self.pid:
            return
        if self._eval_bound_reached() is not None and self.can_stop_now():
            self.eval_cut = True
            # cut in a batch, or as one arrived: the last batch counted was not sampled whole
            self.eval_batch_cut = self.eval_batches > 0
            self.deactivate()

    @property
    def wants_parameters(self) -> bool:
        """At the first backward of the run, and again in the first sampled step (a model
        moved in between), the sampler learns which storages are parameters."""
        return not self._params_learned or (self._params_learned < 2 and self.phase == "train")

    def note_backward(self, roots) -> None:
        """backward(roots) is about to run: learn the parameters it reaches."""
        self.param_ptrs = parameter_storages(roots)
        self._params_learned += 1

    def on_eval_enter(self) -> None:
        """An evaluation begins (`model.eval()`, a safe point). In a sampled training step the
        training modes step aside, so the evaluation runs at plain speed (its ops are not the
        step's anyway) except the first evaluation's bounded sample."""
        if self.phase == "train" and self.can_stop_now():
            while self._modes:
                self._modes.pop().__exit__(None, None, None)
            self.phase, self._paused = None, True
        if not self._modes and self.eval_windows == 0:
            self.activate("eval")

    def on_eval_exit(self) -> None:
        if self.phase == "eval":
            self.deactivate()
        if self._paused and not self._modes:  # back to the training step it stepped aside in
            self._paused = False
            self.phase, self.last_end = "train", None
            for mode in (_ApiWatcher(self), _OpCounter(self)):
                mode.__enter__()
                self._modes.append(mode)

    def _calibrate(self) -> None:
        """Measure how much time the two modes add to a site, per op.

        The calibration loop is an element-wise indexing loop (select, copy_): the
        pattern TD301 looks for (views and copies).
        """
        self._calibrated = True
        src, dst = torch.ones(CALIBRATION_OPS // 4, 2), torch.zeros(CALIBRATION_OPS // 4, 2)

        def loop():
            for i in range(src.shape[0]):
                dst[i] = src[i]

        saved = self.sites, self.api
        plain, counted, ops = [], [], 0
        for _ in range(CALIBRATION_REPEATS):  # minimum of repeats: robust to a busy CPU
            started = self.clock()
            loop()
            plain.append(self.clock() - started)
            self.sites, self.last_end = {}, None
            with _ApiWatcher(self), _OpCounter(self):  # both modes, as in a sampled step
                loop()
            counted.append(sum(s.time_s for s in self.sites.values()))
            ops = sum(s.ops for s in self.sites.values())
        self.sites, self.api = saved
        self.overhead_per_op_s = max(0.0, (min(counted) - min(plain)) / max(1, ops))

    # ---- recording -----------------------------------------------------------------------
    def _key(self, frame) -> tuple[tuple, bool]:
        return self._where(frame)[:2]

    def _where(self, frame):
        """(site key, issued inside torch, the innermost user frame or None)."""
        user, internal = user_frame(frame)
        if user is None:
            return _AUTOGRAD_LOCATION, internal, None
        code = user.f_code
        return (code.co_filename, frame_line(user), getattr(code, "co_qualname", code.co_name)), internal, user

    def _record_op(self, func, args, out, started: float, ended: float, frame) -> None:
        """One op of the step (the dispatch mode has left out those outside it)."""
        key, internal, user = self._where(frame)
        site = self.sites.get(key)
        if site is None:
            site = self.sites[key] = _SiteAcc()
        if key != self._last_key:
            site.entries += 1
            self._last_key = key
        gap = 0.0
        if self.last_end is not None:
            gap = min(max(started - self.last_end, 0.0), MAX_GAP_S)
        name = func._schema.name if hasattr(func, "_schema") else str(func)
        site.ops += 1
        site.internal_ops += internal
        if name.endswith("_") and self.param_ptrs and not internal:  # not torch.optim's own updates
            target = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if target is not None and target.data_ptr() in self.param_ptrs:
                site.param_updates += 1
        site.time_s += (ended - started) + gap
        site.op_counts[name] += 1
        tensor = first_tensor(args)
        if tensor is not None:
            site.devices.add(_device_name(tensor.device))
            if len(site.numels) < 256:
                site.numels.append(tensor.numel())
        if name in MATMUL_OPS:
            self.flops.append(matmul_flops(name, args, out))
            if tensor is not None and tensor.is_cuda:
                if tensor.dtype == torch.float32:
                    self.fp32_matmul_cuda += 1
                    site.fp32_matmul_cuda += 1
                else:
                    self.autocast_seen = True
        if user is not None:
            self._record_loop(user, key, name, internal, (ended - started) + gap, args, tensor)
        self.last_end = self.clock()

    def _record_loop(self, user, key: tuple, name: str, internal: bool, seconds: float, args, tensor) -> None:
        """`tensor`: the op's first tensor argument (None without one)."""
        anchor = loop_of(user)
        if anchor is None:
            return
        loop = self.loops.get((anchor.filename, anchor.function, anchor.header))
        if loop is None:
            loop = self.loops[(anchor.filename, anchor.function, anchor.header)] = _LoopAcc()
        # A new turn: a new frame (a new run of the loop), a jump back to an earlier instruction,
        # or the same statement of the loop's own starting its ops over (a one-statement body,
        # `x[i] = 0`). Ops from a call (a module) repeat their names within one call: not turns.
        last = loop.last
        direct = anchor.frame_id == id(user) and not internal
        loop.windows.add(self.train_windows)
        if last is None or last[0] != anchor.frame_id:
            loop.runs += 1
            loop.iterations += 1
            loop.last = (anchor.frame_id, anchor.lasti, name)
        elif anchor.lasti < last[1] or (direct and anchor.lasti == last[1] and name == last[2]):
            loop.iterations += 1
            loop.last = (anchor.frame_id, anchor.lasti, name)
        elif anchor.lasti != last[1]:
            loop.last = (anchor.frame_id, anchor.lasti, name)
        loop.ops += 1
        loop.internal_ops += internal
        loop.time_s += seconds
        loop.body[anchor.body_line] += 1
        loop.lines[key] += 1
        loop.op_counts[name] += 1
        if name.endswith("_") and not internal and args and isinstance(args[0], torch.Tensor):
            loop.writes += 1
            if len(loop.written) < 4096:  # by storage: writing rows of one tensor is one tensor written
                loop.written.add(args[0].untyped_storage().data_ptr())
        if self.param_ptrs:
            for ptr in _tensor_ptrs(args):
                if ptr in self.param_ptrs:
                    loop.param_uses += 1
                    if len(loop.params) < 4096:
                        loop.params.add(ptr)
        if tensor is not None and len(loop.numels) < 256:
            loop.numels.append(tensor.numel())

    def _record_api(self, name: str, args, kwargs, frame) -> None:
        if self.phase == "train" and self.outside_step():
            return  # an eval inside a sampled step is sampled as eval, separately
        tensor = args[0] if isinstance(args[0], torch.Tensor) else first_tensor(args)
        if tensor is None:
            return
        kind, detail = classify_call(name, tensor, args, kwargs)
        if kind is None:
            return
        key, internal, user = self._where(frame)
        if internal and kind in ("host-sync", "transfer-d2h") and not tensor.is_cuda:
            return  # torch's own scalar reads on CPU tensors (optimizer step counters)
        # `.numpy()` raises on a CUDA tensor: code that calls it on a tensor as it is runs on the
        # CPU in a GPU run too (the tensor is the host's), so it is never a sync
        placement = "device" if kind.startswith("transfer-h2d") or (on_device(tensor) and name != "numpy") else "host"
        call = self._count(key, f".{name}()" if not name.startswith("__") else name, kind, _device_name(tensor.device), detail,
                           placement)
        if self.phase == "eval":  # a call seen again: the evaluation's loop came round (its batches); the
            self._eval_rounds = max(self._eval_rounds, call.count)  # first evaluation's calls: only it is sampled
        if call.loop_line is None and user is not None:
            span = enclosing_loop(user)
            call.loop_line = span.line if span is not None else None

    def _count(self, key: tuple, api: str, kind: str, device: str, detail: dict, placement: str = "device") -> ApiCall:
        phase = self.phase or "train"
        full = (key, api, kind, phase, device, placement)
        call = self.api.get(full)
        if call is None:
            location = Location(display_path(key[0]), key[1], key[2])
            call = self.api[full] = ApiCall(location, api, kind, phase, 0, device, {}, placement=placement,
                                            library=library_of(key[0]), text=source_text(key[0], key[1]))
        call.count += 1
        for k, v in detail.items():  # sum bytes; count how many were pinned / non_blocking
            call.detail[k] = call.detail.get(k, 0) + int(v)
        return call

    def _wrap_synchronize(self, original):
        sampler = self

        def synchronize(*args, **kwargs):
            if sampler.active and current_pid() == sampler.pid:
                key, _ = sampler._key(sys._getframe(1))
                sampler._count(key, "torch.cuda.synchronize", "explicit-sync", "cuda", {})
            return original(*args, **kwargs)

        return synchronize

    def busiest_lines(self, min_ops_per_step: int = 50, limit: int = 5) -> set[tuple[str, int]]:
        """User lines issuing the most ops per sampled step (for the backward timer)."""
        windows = max(1, self.train_windows)
        ranked = sorted(((acc.ops - acc.internal_ops, key) for key, acc in self.sites.items()
                         if key is not _AUTOGRAD_LOCATION and acc.ops / windows >= min_ops_per_step),
                        reverse=True)
        return {(key[0], key[1]) for _, key in ranked[:limit]}

    # ---- result ----------------------------------------------------------------------------
    def contribute(self, record: RunRecord) -> None:
        if self.train_windows and not self._calibrated:
            self._calibrate()  # after the script: the modes' cost per op, measured on no step of it
        sample = record.dispatch
        sampled = [s for s in record.steps if s.sampled and not s.warmup]
        clean = [s.duration_s for s in record.measured_steps]
        sample.sampled_steps = self.train_windows
        sample.sampled_step_s = [s.duration_s for s in sampled][: self.train_windows]
        sample.unsampled_median_step_s = statistics.median(clean) if clean else None
        sample.eval_batches_sampled = min(self.eval_batches - self.eval_batch_cut, EVAL_BATCHES_SAMPLED)
        sample.eval_sample_cut = self.eval_cut
        sample.total_ops = sum(s.ops for s in self.sites.values())
        if sample.sampled_step_s and clean and sample.total_ops:
            extra = statistics.fmean(sample.sampled_step_s) - statistics.median(clean)
            sample.probe_cost_per_op_s = max(0.0, extra / (sample.total_ops / len(sample.sampled_step_s)))
        sample.sites = [self._site(key, acc) for key, acc in self.sites.items()]
        sample.loops = sorted((self._loop(key, acc) for key, acc in self.loops.items()), key=lambda s: -s.ops)
        sample.sites.sort(key=lambda s: -s.time_s)
        _bound_by_step_time(sample)
        sample.api_calls = sorted(self.api.values(), key=lambda c: (-c.count, c.location.line))
        if self.flops:
            sample.matmul_flops_per_op = statistics.fmean(self.flops)
        sample.fp32_matmul_ops_cuda = self.fp32_matmul_cuda
        sample.autocast_seen = self.autocast_seen

    def _site(self, key: tuple, acc: _SiteAcc) -> OpSite:  # noqa: D401
        path = key[0] if key is _AUTOGRAD_LOCATION else display_path(key[0])
        return OpSite(
            location=Location(path, key[1], key[2]),
            ops=acc.ops,
            internal_ops=acc.internal_ops,
            param_updates=acc.param_updates,
            entries=acc.entries,
            library=None if key is _AUTOGRAD_LOCATION else library_of(key[0]),
            text="" if key is _AUTOGRAD_LOCATION else source_text(key[0], key[1]),
            time_s=max(0.0, acc.time_s - acc.ops * self.overhead_per_op_s),
            op_counts=dict(acc.op_counts.most_common(8)),
            devices=sorted(acc.devices),
            median_numel=int(statistics.median(acc.numels)) if acc.numels else 0,
            fp32_matmul_ops_cuda=acc.fp32_matmul_cuda,
        )


    def _loop(self, key: tuple, acc: _LoopAcc) -> LoopSite:
        filename, function, header = key
        body_line = acc.body.most_common(1)[0][0]
        return LoopSite(
            location=Location(display_path(filename), body_line, function), header_line=header, ops=acc.ops,
            internal_ops=acc.internal_ops, time_s=max(0.0, acc.time_s - acc.ops * self.overhead_per_op_s),
            iterations=acc.iterations, runs=max(acc.runs, len(acc.windows)), param_uses=acc.param_uses,
            params=len(acc.params),
            inplace_writes=acc.writes, written_tensors=len(acc.written),
            op_counts=dict(acc.op_counts.most_common(8)),
            median_numel=int(statistics.median(acc.numels)) if acc.numels else 0,
            lines=[Location(display_path(f), line, fn) for (f, line, fn), _ in acc.lines.most_common(16)
                   if (f, line, fn) is not _AUTOGRAD_LOCATION],
            library=library_of(filename),
        )


def _tensor_ptrs(args) -> list[int]:
    """Storages of the tensors among an op's arguments (and in its list arguments)."""
    out = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            out.append(arg.data_ptr())
        elif isinstance(arg, (list, tuple)):
            out += [a.data_ptr() for a in arg if isinstance(a, torch.Tensor)]
    return out


def _bound_by_step_time(sample) -> None:
    """Sampled lines cannot take longer, together, than an unsampled step: if the
    calibrated sampler cost left more, scale every line down by the same factor."""
    if not sample.sampled_steps or not sample.unsampled_median_step_s:
        return
    per_step = sum(s.time_s for s in sample.sites) / sample.sampled_steps
    if per_step > sample.unsampled_median_step_s:
        factor = sample.unsampled_median_step_s / per_step
        for site in sample.sites:
            site.time_s *= factor
