"""FSDP probe: every FSDP unit's settings (FSDP2 `fully_shard` parameter groups, FSDP1
`FullyShardedDataParallel` wrappers) and, per optimizer step, the all-gathers and
reduce-scatters FSDP ran: how many, how many bytes, and the host time spent issuing and waiting
for them.

FSDP2 does its communication in two module-level functions of `_fsdp_param_group`
(`foreach_all_gather`, `foreach_reduce`) and waits in `FSDPParamGroup.wait_for_unshard` and
`_wait_for_post_backward`; the probe wraps those (one timer and a few additions per call, per
unit, not per op). FSDP1 gathers in `_runtime_utils._unshard` and reduces in
`_runtime_utils._reduce_grad`. On a CPU (gloo) a collective blocks the host, so the host time is
the time the step waited: exposed communication. On a GPU the host only issues them on FSDP's
streams; the step's exposed part is then the profiler window's to tell.

`torch.distributed.fsdp` costs a second to import: the probe hooks it only once the script has
imported it (checked when the script sets up its process group, and at each step until then).
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

import torch

from torchdoctor.model.distributed_record import DistributedInfo, FsdpStep, FsdpUnit, RankIdentity
from torchdoctor.model.record import ProbeNote, RunRecord, StepSample
from torchdoctor.run.probes.frames import caller_location, keyword_in_call, own_caller_location, project_frames
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.run.session import RunSession

FSDP2 = "torch.distributed.fsdp._fully_shard._fsdp_param_group"
FSDP1 = "torch.distributed.fsdp._runtime_utils"


def _dtype(value) -> str | None:
    return str(value).replace("torch.", "") if value is not None else None


class FsdpProbe:
    name = "fsdp"
    polls_steps = True  # on_step only looks for a process group made without init_process_group: a poll

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.patches = PatchSet()
        self.hooked = False
        self.groups: dict[int, tuple[Any, Any]] = {}  # id -> (FSDPParamGroup or FSDP1 wrapper, created_at)
        self.use_orig_params_at: dict[int, Any] = {}  # id of an FSDP1 wrapper -> the use_orig_params= line of its call
        self.steps: dict[int, FsdpStep] = {}
        self.cuda = False
        self.backward_location = None
        self._notes: list[str] = []

    # ---- install ---------------------------------------------------------------------------
    def install(self) -> None:
        if not torch.distributed.is_available():
            return
        self.patches.wrap(torch.distributed, "init_process_group", self._wrap_setup)
        self._maybe_hook()

    def uninstall(self) -> None:
        self.patches.restore()

    def _wrap_setup(self, original):
        probe = self

        @functools.wraps(original)
        def init_process_group(*args, **kwargs):
            result = original(*args, **kwargs)
            probe._maybe_hook()
            return result

        return init_process_group

    def _maybe_hook(self) -> None:
        # torch imports torch.distributed.fsdp with Dynamo (an optimizer's first use does): only a
        # process group says FSDP may run. Without one no unit exists yet, and the hooks (imports,
        # a walk over every object for units made before them) would cost every run's first step.
        if self.hooked or "torch.distributed.fsdp" not in sys.modules or not _process_group_exists():
            return
        self.hooked = True
        try:
            self._hook_fsdp2()
        except Exception as exc:  # noqa: BLE001 - a torch whose FSDP2 is shaped otherwise
            self._notes.append(f"FSDP2 (fully_shard) not measurable: {type(exc).__name__}: {exc}")
        try:
            self._hook_fsdp1()
        except Exception as exc:  # noqa: BLE001
            self._notes.append(f"FSDP1 (FullyShardedDataParallel) not measurable: {type(exc).__name__}: {exc}")
        self._find_existing()

    def _hook_fsdp2(self) -> None:
        import importlib

        module = importlib.import_module(FSDP2)
        group = module.FSDPParamGroup
        self.patches.wrap(group, "__init__", self._wrap_group_init)
        self.patches.wrap(module, "foreach_all_gather", functools.partial(self._timed, "all_gather"))
        self.patches.wrap(module, "foreach_reduce", functools.partial(self._timed, "reduce_scatter"))
        self.patches.wrap(group, "wait_for_unshard", functools.partial(self._timed_method, "all_gather_s"))
        self.patches.wrap(group, "_wait_for_post_backward", functools.partial(self._timed_method, "reduce_scatter_s"))
        self.patches.wrap(group, "post_backward", self._wrap_post_backward)

    def _hook_fsdp1(self) -> None:
        import importlib

        from torch.distributed.fsdp import FullyShardedDataParallel

        runtime = importlib.import_module(FSDP1)
        self.patches.wrap(FullyShardedDataParallel, "__init__", self._wrap_fsdp1_init)
        self.patches.wrap(runtime, "_unshard", functools.partial(self._timed_fsdp1, "all_gather"))
        self.patches.wrap(runtime, "_reduce_grad", functools.partial(self._timed_fsdp1, "reduce_scatter"))

    def _find_existing(self) -> None:
        """Units made before the hooks went in (FSDP imported inside a function)."""
        import gc

        try:
            from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        except Exception:  # noqa: BLE001
            return
        for obj in gc.get_objects():
            if type(obj) is FSDPParamGroup and id(obj) not in self.groups:
                self.groups[id(obj)] = (obj, None)

    # ---- units -------------------------------------------------------------------------------
    def _wrap_group_init(self, original):
        probe = self

        @functools.wraps(original)
        def __init__(group, *args, **kwargs):
            original(group, *args, **kwargs)
            probe.groups[id(group)] = (group, own_caller_location())

        return __init__

    def _wrap_fsdp1_init(self, original):
        probe = self

        @functools.wraps(original)
        def __init__(wrapper, *args, **kwargs):
            original(wrapper, *args, **kwargs)
            probe.groups[id(wrapper)] = (wrapper, own_caller_location())
            own = project_frames(sys._getframe(1), limit=1)
            written = keyword_in_call(own[0], "use_orig_params") if own else None
            if written is not None:
                probe.use_orig_params_at[id(wrapper)] = written

        return __init__

    # ---- communication -------------------------------------------------------------------------
    def _step(self) -> FsdpStep:
        index = self.session.step_count + 1
        step = self.steps.get(index)
        if step is None:
            step = self.steps[index] = FsdpStep(step=index)
        return step

    def _timed(self, kind: str, original):
        """foreach_all_gather(fsdp_params, ...) / foreach_reduce(fsdp_params, grads, ...)."""
        probe = self

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                step = probe._step()
                params = args[0] if args else kwargs.get("fsdp_params", ())
                if kind == "all_gather":
                    step.all_gathers += 1
                    step.all_gather_bytes += _gathered_bytes(params)
                    step.all_gather_s += time.perf_counter() - started
                else:
                    step.reduce_scatters += 1
                    step.reduce_scatter_bytes += _reduced_bytes(params)
                    step.reduce_scatter_s += time.perf_counter() - started
                    step.synced_backwards += 0  # counted per backward pass in post_backward

        return timed

    def _timed_method(self, attribute: str, original):
        probe = self

        def timed(group, *args, **kwargs):
            started = time.perf_counter()
            try:
                return original(group, *args, **kwargs)
            finally:
                step = probe._step()
                setattr(step, attribute, getattr(step, attribute) + time.perf_counter() - started)

        return timed

    def _wrap_post_backward(self, original):
        probe = self

        def post_backward(group, *args, **kwargs):
            first = not probe._seen_backward(group)
            if first:
                step = probe._step()
                step.backward_passes += 1
                if getattr(group, "reduce_grads", True):
                    step.synced_backwards += 1
                    if probe.backward_location is None:  # autograd runs a CPU backward in the caller's thread
                        probe.backward_location = caller_location()
            return original(group, *args, **kwargs)

        return post_backward

    def _seen_backward(self, group) -> bool:
        """Whether another group's post-backward of this backward pass came first: one pass,
        one count (the root group's post-backward is the last; the first one seen opens it)."""
        session = self.session
        marker = (session.step_count, session.backward_calls)
        if getattr(self, "_pass", None) == marker:
            return True
        self._pass = marker
        return False

    def _timed_fsdp1(self, kind: str, original):
        probe = self

        def timed(state, handle, *args, **kwargs):
            started = time.perf_counter()
            try:
                return original(state, handle, *args, **kwargs)
            finally:
                step = probe._step()
                flat = getattr(handle, "flat_param", None)
                numel = int(getattr(flat, "_unpadded_unsharded_size", torch.Size([0])).numel()) if flat is not None else 0
                size = flat.element_size() if flat is not None else 0
                if kind == "all_gather":
                    step.all_gathers += 1
                    step.all_gather_bytes += numel * size
                    step.all_gather_s += time.perf_counter() - started
                else:
                    step.reduce_scatters += 1
                    step.reduce_scatter_bytes += numel * size
                    step.reduce_scatter_s += time.perf_counter() - started
                    if not probe._seen_backward(handle):
                        step.backward_passes += 1
                        step.synced_backwards += 1
                        if probe.backward_location is None:
                            probe.backward_location = caller_location()

        return timed

    def on_step(self, step: StepSample) -> None:
        if not self.hooked:
            self._maybe_hook()

    # ---- after the run ---------------------------------------------------------------------------
    def contribute(self, record: RunRecord) -> None:
        if self._notes:
            record.probe_notes += [ProbeNote(self.name, n) for n in self._notes]
        if not self.groups:
            return
        info = record.distributed
        if info is None:
            info = record.distributed = DistributedInfo(identity=RankIdentity(rank=0, world_size=1))
        self.cuda = record.environment.cuda_used
        names = _fsdp1_names([obj for obj, _ in self.groups.values() if hasattr(obj, "_handle")])
        for obj, created_at in self.groups.values():
            unit = (_fsdp1_unit(obj, created_at, names, self.use_orig_params_at.get(id(obj))) if hasattr(obj, "_handle")
                    else _fsdp2_unit(obj, created_at))
            if unit is not None:
                info.fsdp.append(unit)
        for step in self.steps.values():
            step.host_blocking = not self.cuda
        info.fsdp_steps = [self.steps[k] for k in sorted(self.steps)]
        info.fsdp_backward_location = self.backward_location


def _gathered_bytes(params) -> int:
    total = 0
    for p in params:
        size = getattr(p, "_orig_size", None)
        dtype = getattr(p, "param_dtype", None) or getattr(p, "orig_dtype", None)
        if size is not None and dtype is not None:
            total += size.numel() * dtype.itemsize
    return total


def _reduced_bytes(params) -> int:
    total = 0
    for p in params:
        size = getattr(p, "_orig_size", None)
        dtype = getattr(p, "reduce_dtype", None) or getattr(p, "param_dtype", None) or getattr(p, "orig_dtype", None)
        if size is not None and dtype is not None:
            total += size.numel() * dtype.itemsize
    return total


def _prefetch(states) -> str:
    names = [getattr(getattr(s, "_fsdp_param_group", None), "_module_fqn", "") or "?" for s in states or ()]
    return "explicit: " + ", ".join(names) if names else ""


def _fsdp2_unit(group, created_at) -> FsdpUnit | None:
    modules = getattr(group, "modules", ())
    module = modules[0] if modules else None
    params = list(getattr(group, "fsdp_params", ()))
    unsharded = sharded = 0
    for p in params:
        size = getattr(p, "_orig_size", None)
        dtype = getattr(p, "orig_dtype", None) or getattr(getattr(p, "sharded_param", None), "dtype", None)
        if size is None or dtype is None:
            continue
        unsharded += size.numel() * dtype.itemsize
        local = getattr(p, "_sharded_param_data", None)
        sharded += local.numel() * dtype.itemsize if local is not None else 0
    mp = getattr(group, "mp_policy", None)
    offload = type(getattr(group, "offload_policy", None)).__name__
    state = None
    if module is not None and hasattr(module, "_get_fsdp_state"):
        try:
            state = module._get_fsdp_state()
        except Exception:  # noqa: BLE001
            state = None
    fqn = getattr(group, "_module_fqn", None) or ""
    mesh = getattr(group, "mesh_info", None)
    return FsdpUnit(
        module=fqn, kind=type(module).__name__.removeprefix("FSDP") if module is not None else "?", version=2,
        created_at=created_at, param_tensors=len(params), unsharded_bytes=unsharded, sharded_bytes=sharded,
        sharding="hybrid" if getattr(mesh, "replicate_mesh_dim", None) is not None else "full",
        reshard_after_forward=getattr(group, "post_forward_mesh_info", None) is not None,
        param_dtype=_dtype(getattr(mp, "param_dtype", None)), reduce_dtype=_dtype(getattr(mp, "reduce_dtype", None)),
        offload="cpu" if offload == "CPUOffloadPolicy" else None,
        forward_prefetch=_prefetch(getattr(state, "_states_to_forward_prefetch", None)) or "off",
        backward_prefetch=_prefetch(getattr(state, "_states_to_backward_prefetch", None)) or "implicit",
        unshard_async=bool(getattr(group, "unshard_async_op", False)),
        leaf=module is not None and next(iter(module.children()), None) is None,
    )


def _fsdp1_names(wrappers: list) -> dict[int, str]:
    """Each FSDP1 wrapper's name in its root's model, without FSDP's own `_fsdp_wrapped_module`."""
    names: dict[int, str] = {}
    inner = {id(m) for w in wrappers for m in w.modules() if m is not w}
    for root in (w for w in wrappers if id(w) not in inner):
        for name, module in root.named_modules():
            if id(module) in {id(w) for w in wrappers}:
                names[id(module)] = ".".join(p for p in name.split(".") if p != "_fsdp_wrapped_module")
    return names


def _fsdp1_unit(wrapper, created_at, names: dict[int, str], use_orig_params_at=None) -> FsdpUnit | None:
    handle = getattr(wrapper, "_handle", None)
    flat = getattr(handle, "flat_param", None) if handle is not None else None
    numel = int(flat._unpadded_unsharded_size.numel()) if flat is not None and hasattr(flat, "_unpadded_unsharded_size") else 0
    size = flat.element_size() if flat is not None else 0
    strategy = str(getattr(wrapper, "sharding_strategy", "")).rsplit(".", 1)[-1]
    mp = getattr(wrapper, "mixed_precision", None)
    prefetch = getattr(wrapper, "backward_prefetch", None)
    return FsdpUnit(
        module=names.get(id(wrapper), ""), kind=type(wrapper.module).__name__, version=1, created_at=created_at,
        param_tensors=len(getattr(flat, "_params", None) or ()) if flat is not None else 0,
        unsharded_bytes=numel * size, sharded_bytes=(flat.numel() * size) if flat is not None else 0,
        sharding={"FULL_SHARD": "full", "SHARD_GRAD_OP": "grad-op", "NO_SHARD": "none"}.get(strategy, strategy.lower()),
        reshard_after_forward=strategy in ("FULL_SHARD", "HYBRID_SHARD"),
        param_dtype=_dtype(getattr(mp, "param_dtype", None)), reduce_dtype=_dtype(getattr(mp, "reduce_dtype", None)),
        offload="cpu" if getattr(getattr(wrapper, "cpu_offload", None), "offload_params", False) else None,
        forward_prefetch="implicit" if getattr(wrapper, "forward_prefetch", False) else "off",
        backward_prefetch="off" if prefetch is None else str(prefetch).rsplit(".", 1)[-1].lower(),
        leaf=next(iter(wrapper.module.children()), None) is None,
        use_orig_params=_flag(getattr(wrapper, "_use_orig_params", None)), use_orig_params_at=use_orig_params_at,
    )


def _flag(value) -> bool | None:
    return None if value is None else bool(value)


def _process_group_exists() -> bool:
    """FSDP (1 and 2) shards over a process group: none exists before init_process_group."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized()
