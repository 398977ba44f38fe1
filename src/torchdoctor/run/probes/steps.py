"""Step probe: an optimizer step is one `Optimizer.step()` of the first optimizer that
steps (the primary); micro-batches are `backward()` calls (with no optimizer at all, each
`backward()` is a step: see session.py). Also times the optimizer step, backward and
`zero_grad`, and records how each optimizer was configured.

`optimizer.step(closure)` (LBFGS, Lightning's automatic optimization) runs forward and
backward inside the step: the closure is timed, and its time is not the optimizer's."""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any

import torch
from torch.overrides import has_torch_function_unary
from torch.optim.optimizer import (
    Optimizer,
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from torchdoctor.model.location import Location
from torchdoctor.run.probes.frames import caller_location, display_path, location_of, user_frame
from torchdoctor.run.probes.loops import loops_around
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.model.record import LossTrace, OptimizerInfo, RunRecord
from torchdoctor.run.process import current_pid
from torchdoctor.run.session import OPTIMIZER, RunSession


MAX_LOSSES = 2000  # backward calls whose value the numerics guard keeps


class StepProbe:
    name = "steps"

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.patches = PatchSet()
        self.handles: list[Any] = []
        self.infos: "weakref.WeakKeyDictionary[Optimizer, OptimizerInfo]" = (
            weakref.WeakKeyDictionary()
        )
        self.all_infos: list[OptimizerInfo] = []
        self.primary: "weakref.ref[Optimizer] | None" = None
        self._step_started: dict[int, float] = {}
        self._closure_s: dict[int, float] = {}  # closure time inside the running step, by optimizer
        self._in_tensor_backward = 0  # inside Tensor.backward: it closes the step when it returns
        self._last_optimizer: Optimizer | None = None  # a strong reference for the run only: uninstall drops it
        self._last_info: OptimizerInfo | None = None
        # the primary optimizer once a plain `step()` of it closed a step, and its info: its step hooks'
        # lean path (outside every window); _lean_started: when its step entered the lean path
        self._lean_optimizer: Optimizer | None = None
        self._lean_info: OptimizerInfo | None = None
        self._lean_started: float | None = None
        self._autograd_backward = torch.autograd.backward  # what it was before install (_wrap_backward)
        self._autograd_wrapper: Any = None  # ours, that replaced it
        self._losses: list[tuple[int, torch.Tensor]] = []  # (step, the value passed to backward)
        self._losses_dropped = 0

    # ---- install / uninstall ------------------------------------------------------
    def install(self) -> None:
        self.handles.append(register_optimizer_step_pre_hook(self._pre_step))
        self.handles.append(register_optimizer_step_post_hook(self._post_step))
        self.patches.wrap(Optimizer, "__init__", self._wrap_init)
        self.patches.wrap(Optimizer, "zero_grad", self._wrap_zero_grad)
        self.patches.wrap(torch.nn.Module, "zero_grad", self._wrap_zero_grad)
        self.patches.wrap(torch.autograd, "backward", self._wrap_backward)
        self.patches.wrap(torch.Tensor, "backward", self._wrap_tensor_backward)

    def uninstall(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.patches.restore()
        self._last_optimizer = self._last_info = self._lean_optimizer = self._lean_info = None

    def contribute(self, record: RunRecord) -> None:
        record.optimizers = list(self.all_infos)
        record.losses = self._loss_trace()

    def _keep_loss(self, tensors) -> None:
        """Keep (a detached view of) the one-element tensor passed to backward(): its value is
        read when the run ends, so the steps carry no sync and no new op."""
        tensor = tensors[0] if type(tensors) in (list, tuple) and len(tensors) == 1 else tensors
        if len(self._losses) >= MAX_LOSSES or not (type(tensor) is torch.Tensor or isinstance(tensor, torch.Tensor)) \
                or tensor.numel() != 1:
            self._losses_dropped += 1
            return
        self._losses.append((self.session.step_count + 1, tensor.detach()))

    def _loss_trace(self) -> LossTrace | None:
        if not self._losses:
            return None
        trace = LossTrace(dtype=str(self._losses[0][1].dtype).removeprefix("torch."), dropped=self._losses_dropped)
        try:
            for step, value in self._losses:
                trace.steps.append(step)
                trace.values.append(float(value.float().item()).hex())
        except Exception:  # fake tensors (memory --estimate), a freed device: no values to compare
            return None
        finally:
            self._losses.clear()
        return trace

    # ---- optimizer bookkeeping ----------------------------------------------------
    def _info(self, optimizer: Optimizer) -> OptimizerInfo:
        if optimizer is self._last_optimizer:  # the loop's optimizer, three times a step
            return self._last_info
        info = self._lookup(optimizer)
        self._last_optimizer, self._last_info = optimizer, info
        return info

    def _lookup(self, optimizer: Optimizer) -> OptimizerInfo:
        info = self.infos.get(optimizer)
        if info is None:  # created before the probe was installed
            info = _describe(optimizer, None)
            self.infos[optimizer] = info
            self.all_infos.append(info)
        return info

    def _wrap_init(self, original):
        probe = self

        @functools.wraps(original)
        def __init__(opt, *args, **kwargs):
            original(opt, *args, **kwargs)
            probe.session.optimizers_created += 1
            probe.session.notify("on_optimizer_created")
            if opt not in probe.infos:
                info = _describe(opt, caller_location())
                probe.infos[opt] = info
                probe.all_infos.append(info)

        return __init__

    def _pre_step(self, optimizer: Optimizer, args, kwargs):
        session = self.session
        if session.bare and optimizer is self._lean_optimizer and len(args) < 2 and not kwargs:
            # a step whose split goes untimed (session.SPLIT_EVERY): _post_step counts and closes it. Another
            # optimizer's step (a GAN's second, a closure step) takes its own path: its closure is timed
            return None
        entered = session.clock()
        if optimizer is self._lean_optimizer and session.lean and len(args) < 2 and not kwargs:
            # the lean path: the primary optimizer's plain `opt.step()` (torch passes (opt,), {}) outside
            # every window; _post_step closes the step from here
            self._lean_started = entered
            if self._closure_s:  # a closure step that raised left its entry
                self._closure_s.pop(id(optimizer), None)
            session.ledger.doctor_s += session.clock() - entered
            return None
        self._lean_started = None  # a lean step that raised left its start: this step is timed the full way
        self._step_started[id(optimizer)] = entered
        if optimizer is self._last_optimizer and len(args) < 2 and not kwargs \
                and self._last_info.step_location is not None:
            # `opt.step()` of the loop's optimizer (torch passes (opt,), {}): no closure, nothing to learn
            if self._closure_s:  # a closure step that raised left its entry
                self._closure_s.pop(id(optimizer), None)
            session.ledger.doctor_s += session.clock() - entered
            return None
        info = self._last_info if optimizer is self._last_optimizer else self._info(optimizer)
        if info.step_location is None:
            frame, _ = user_frame(sys._getframe(1))
            info.step_location = location_of(frame) if frame is not None else None
        # torch passes the hook the step's own arguments, the optimizer first: (opt, closure)
        position = 1 if args and args[0] is optimizer else 0
        closure = args[position] if len(args) > position else (kwargs.get("closure") if kwargs else None)
        if closure is None or not callable(closure):
            session.ledger.doctor_s += session.clock() - entered
            return None
        code = getattr(closure, "__code__", None)
        if info.closure is None and code is not None:
            info.closure = Location(display_path(code.co_filename), code.co_firstlineno,
                                    getattr(code, "co_qualname", code.co_name))
        self._closure_s[id(optimizer)] = 0.0
        timed = self._timed_closure(closure, id(optimizer))
        session.ledger.doctor_s += session.clock() - entered
        # The hook may hand the step new arguments: the same closure, timed.
        if len(args) > position:
            return (*args[:position], timed, *args[position + 1:]), kwargs
        return args, {**kwargs, "closure": timed}

    def _timed_closure(self, closure, key: int):
        session, spent = self.session, self._closure_s

        def timed(*args, **kwargs):  # no functools.wraps: made every step, and only torch calls it
            started = session.clock()
            try:
                return closure(*args, **kwargs)
            finally:
                ended = session.clock()
                spent[key] = spent.get(key, 0.0) + ended - started
                session.ledger.closure_calls += 1
                # a closure evaluation is a whole forward and backward: a safe point to stop a
                # window that has spent its budget in this long step
                session.checkpoint(closure_s=ended - started)
                session.ledger.doctor_s += session.clock() - ended

        return timed

    def _post_step(self, optimizer: Optimizer, args, kwargs) -> None:
        session = self.session
        if session.bare and optimizer is self._lean_optimizer and len(args) < 2 and not kwargs:
            # a bare step (session.bare): its count and its close
            self._lean_info.step_calls += 1
            if session.pid == current_pid():
                session._close_step()
            return
        started = self._lean_started
        entered = session.clock()
        if started is not None and optimizer is self._lean_optimizer:
            # the lean path (see _pre_step): the optimizer's time, its count, the step's close
            self._lean_started = None
            ledger = session.ledger
            if session.eval_started is None:
                ledger.seconds["optimizer"] += entered - started
            self._lean_info.step_calls += 1
            ledger.doctor_s += session.clock() - entered
            if session.pid == current_pid():
                session._close_step()
            return
        started = self._step_started.pop(id(optimizer), None)
        closures = self._closure_s
        inside_closure = closures.pop(id(optimizer), 0.0) if closures else 0.0
        ledger = session.ledger
        if started is not None and session.eval_started is None:  # session.add_time, inline: every step
            ledger.seconds["optimizer"] += max(0.0, entered - started - inside_closure)
        info = self._last_info if optimizer is self._last_optimizer else self._info(optimizer)
        info.step_calls += 1
        if info.step_calls == 1:
            self._first_step(optimizer, info)
        if self.primary is None:
            self.primary = weakref.ref(optimizer)
        ledger.doctor_s += session.clock() - entered  # the step's close times itself
        if self.primary() is optimizer:
            if session.loop_location is None:
                session.loop_location = info.step_location
            if session.step_source == OPTIMIZER and session.pid == current_pid():
                if self._lean_optimizer is None and len(args) < 2 and not kwargs and info.step_location is not None:
                    self._lean_optimizer, self._lean_info = optimizer, info  # its plain steps: the lean path
                session._close_step()  # session.on_optimizer_step, inline: every step
            else:
                session.on_optimizer_step()

    def _first_step(self, optimizer: Optimizer, info: OptimizerInfo) -> None:
        # the loops around any optimizer's step() are training loops (an actor's too)
        self.session.training_loops += [t for t in loops_around(sys._getframe(2))
                                        if t not in self.session.training_loops]
        if optimizer.param_groups:
            # What the step ran with: a param group can differ from the constructor's defaults
            # (set by the script, or by a `--set foreach=...` knob just before this step).
            group = optimizer.param_groups[0]
            info.foreach, info.fused = group.get("foreach", info.foreach), group.get("fused", info.fused)
            info.implementation, info.fused_available, info.param_devices = update_path(optimizer)

    # ---- zero_grad and backward ---------------------------------------------------
    def _wrap_zero_grad(self, original):
        probe = self
        session = self.session

        clock = session.clock

        @functools.wraps(original)
        def zero_grad(obj, set_to_none: bool = True, *args, **kwargs):
            if session.bare:  # the split untimed in this step (session.bare)
                return original(obj, set_to_none, *args, **kwargs)
            if session.lean and obj is probe._last_optimizer and probe._last_info.zero_grad_location is not None:
                # the lean path: the loop's optimizer, training, outside every window (session.lean)
                started = clock()
                try:
                    return original(obj, set_to_none, *args, **kwargs)
                finally:
                    ended = clock()
                    seconds = ended - started
                    ledger = session.ledger
                    ledger.seconds["zero_grad"] += seconds
                    info = probe._last_info
                    info.zero_grad_calls += 1
                    info.zero_grad_total_s += seconds
                    info.zero_grad_set_to_none = bool(set_to_none)
                    ledger.doctor_s += clock() - ended
            entered = session.clock()
            if session.training_started is None:
                session.note_training_activity()
            if session._open:
                session.checkpoint()
            started = session.clock()
            try:
                return original(obj, set_to_none, *args, **kwargs)
            finally:
                ended = session.clock()
                seconds = ended - started
                if session.eval_started is None:  # session.add_time, inline: every step
                    session.ledger.seconds["zero_grad"] += seconds
                if isinstance(obj, Optimizer):
                    info = probe._last_info if obj is probe._last_optimizer else probe._info(obj)
                    info.zero_grad_calls += 1
                    info.zero_grad_total_s += seconds
                    info.zero_grad_set_to_none = bool(set_to_none)
                    if info.zero_grad_location is None:
                        info.zero_grad_location = caller_location()
                session.ledger.doctor_s += (started - entered) + (session.clock() - ended)

        return zero_grad

    def _wrap_backward(self, original):
        """`torch.autograd.backward(...)` called directly; from `loss.backward()` the method's
        wrapper below has done the work already."""
        probe = self

        probe._autograd_backward = original  # the bare path of Tensor.backward calls it

        @functools.wraps(original)
        def backward(*args, **kwargs):
            if probe._in_tensor_backward:
                return original(*args, **kwargs)
            tensors = args[0] if args else kwargs.get("tensors")
            return probe._timed_backward(original, tensors, args, kwargs)

        probe._autograd_wrapper = backward
        return backward

    def _wrap_tensor_backward(self, original):
        """`loss.backward()`. With a TorchFunctionMode active (the op sampler's) the method runs
        again inside torch's handling of the mode: a step closed in there would switch the
        sampler's modes while torch is between pushing and popping them, so the outermost call
        does the work and closes the step once the method has returned."""
        probe = self
        session = self.session
        clock = session.clock
        losses = self._losses
        Tensor = torch.Tensor

        @functools.wraps(original)
        def backward(tensor, *args, **kwargs):
            if session.bare and not args and not kwargs and not probe._in_tensor_backward \
                    and not has_torch_function_unary(tensor) and torch.autograd.backward is probe._autograd_wrapper:
                # the split untimed in this step (session.bare): counted, not timed, no loss value kept. What
                # `loss.backward()` runs, called here: two frames less a step (Tensor.backward's and the
                # wrapper of torch.autograd.backward; only while that wrapper is ours alone: the DDP probe's,
                # put over it when a DDP model is made, is not skipped)
                probe._autograd_backward(tensor, None, None, False, inputs=None)
                session.backward_calls += 1
                session.ledger.micro_batches += 1
                return None
            if not session.lean or probe._in_tensor_backward or not session.backward_loops_seen \
                    or session.step_source != OPTIMIZER:
                if probe._in_tensor_backward:
                    return original(tensor, *args, **kwargs)
                return probe._timed_backward(original, tensor, (tensor, *args), kwargs)
            # The lean path of an optimizer's loop outside every window: _timed_backward, _keep_loss
            # and on_backward_done inline (a call is a microsecond on a busy machine, every step). The
            # op sampler wants the parameters at the run's first backward (the full path: no loop seen
            # yet) and in its window: never here.
            entered = clock()
            # `loss.backward()` with no gradient given succeeds on a one-element tensor only: kept after
            # the call without asking its size (a torch call a step); any other call as _keep_loss says
            plain_call = not args and not kwargs and type(tensor) is Tensor
            if not plain_call:
                probe._keep_loss(tensor)
            probe._in_tensor_backward += 1
            started = clock()
            try:
                result = original(tensor, *args, **kwargs)
            finally:
                ended = clock()
                probe._in_tensor_backward -= 1
                ledger = session.ledger
                ledger.seconds["backward"] += ended - started
            if plain_call:
                if len(losses) < MAX_LOSSES:
                    losses.append((session.step_count + 1, tensor.detach()))
                else:
                    probe._losses_dropped += 1
            if session._open:  # a window opened inside backward(): a safe point to stop it
                session.checkpoint()
            if session.pid == current_pid():  # on_backward_done (the step closes at the optimizer's)
                session.backward_calls += 1
                ledger.micro_batches += 1
            ledger.doctor_s += (started - entered) + (clock() - ended)
            return result

        return backward

    def _timed_backward(self, original, tensors, args, kwargs):
        session = self.session
        entered = session.clock()
        if session.eval_started is not None:
            session.exit_eval()  # training resumed: an eval region left open ends here
        if not session.backward_loops_seen:
            self._first_backward()
        self._keep_loss(tensors)
        sampler = session.sampler
        if sampler is not None and getattr(sampler, "wants_parameters", False):
            sampler.note_backward(tensors)
        self._in_tensor_backward += 1
        started = session.clock()
        try:
            result = original(*args, **kwargs)
        finally:
            ended = session.clock()
            self._in_tensor_backward -= 1
            if session.eval_started is None:
                session.ledger.seconds["backward"] += ended - started
        # outside every torch mode's handler: a safe point, then the step may close
        if session._open:
            session.checkpoint()
        session.ledger.doctor_s += (started - entered) + (session.clock() - ended)
        session.on_backward_done()  # after the call: a failed backward is no step
        return result

    def _first_backward(self) -> None:
        session = self.session
        session.note_training_activity("backward")
        if session.loop_location is None and session.optimizers_created == 0:
            session.loop_location = caller_location()  # the loop, should backward() define the step
        session.backward_loops_seen = True  # a micro-batch loop around backward() is the step's own
        session.training_loops += [t for t in loops_around(sys._getframe()) if t not in session.training_loops]


def _describe(optimizer: Optimizer, created_at) -> OptimizerInfo:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    defaults = optimizer.defaults
    return OptimizerInfo(
        class_name=type(optimizer).__name__,
        param_tensors=len(params),
        params=sum(p.numel() for p in params),
        foreach=defaults.get("foreach"),
        fused=defaults.get("fused"),
        created_at=created_at,
    )


def update_path(optimizer: Optimizer) -> tuple[str | None, bool | None, list[str]]:
    """(implementation, fused available, parameter device types) of a torch.optim optimizer, from
    torch's own rules: `foreach=None, fused=None` resolves through
    `torch.optim.optimizer._default_to_fused_or_foreach` (foreach only where every parameter sits on
    a foreach device: CUDA, not the CPU), fused needs a `fused` argument and floating-point parameters
    on `_get_fused_kernels_supported_devices()`. (None, None, devices) for an optimizer outside
    torch.optim's family or a torch without these helpers: never a guess."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    devices = sorted({p.device.type for p in params})
    try:
        import inspect

        from torch.optim import optimizer as optim_module
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        base = next((c for c in type(optimizer).__mro__ if c.__module__.startswith("torch.optim.")
                     and c is not Optimizer), None)
        if base is None or "foreach" not in inspect.signature(base.__init__).parameters:
            return None, None, devices
        groups = optimizer.param_groups
        differentiable = any(g.get("differentiable") for g in groups)
        fused_devices = set(_get_fused_kernels_supported_devices())
        fused_available = ("fused" in inspect.signature(base.__init__).parameters and not differentiable
                           and all(torch.is_floating_point(p) and p.device.type in fused_devices for p in params))
        if any(g.get("fused") for g in groups):
            return "fused", fused_available, devices
        foreach = {g.get("foreach") for g in groups}
        if foreach == {True}:
            return "foreach", fused_available, devices
        if foreach == {False}:
            return "for-loop", fused_available, devices
        if foreach == {None}:
            _, chosen = optim_module._default_to_fused_or_foreach(params, differentiable, use_fused=False)
            return ("foreach" if chosen else "for-loop"), fused_available, devices
        return None, fused_available, devices  # groups that differ: no one path
    except Exception:  # noqa: BLE001 - a torch without these helpers: not measurable
        return None, None, devices
