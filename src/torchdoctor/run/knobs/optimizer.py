"""Optimizer knobs: foreach or fused update kernels, and gradients set to None.

They sit over the step probe, so the probe (and rule TD303) sees `zero_grad` as the knob
rewrote it.
"""

from __future__ import annotations

import functools
import weakref

import torch
from torch.optim.optimizer import Optimizer, register_optimizer_step_pre_hook

from torchdoctor.run.knobs.base import KnobGroup

# Optimizers whose param groups take `fused` (torch ≥ 2.4 on CPU and CUDA).
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")


class OptimizerKnobs(KnobGroup):
    names = ("foreach", "fused", "zero_grad")
    layer = "outer"

    def __init__(self, settings, ctx) -> None:
        super().__init__(settings, ctx)
        self._configured: "weakref.WeakSet[Optimizer]" = weakref.WeakSet()

    def install(self) -> None:
        if "foreach" in self.settings or "fused" in self.settings:
            # Before the first step builds optimizer state, so fused state (a device `step`
            # tensor) is created the way the fused kernel expects.
            self.handles.append(register_optimizer_step_pre_hook(self._configure))
        if "zero_grad" in self.settings:
            self.patches.wrap(Optimizer, "zero_grad", self._wrap_zero_grad)
            self.patches.wrap(torch.nn.Module, "zero_grad", self._wrap_zero_grad)

    def _configure(self, optimizer: Optimizer, args, kwargs) -> None:
        if optimizer in self._configured:
            return
        self._configured.add(optimizer)
        name = type(optimizer).__name__
        groups = optimizer.param_groups
        if "foreach" in self.settings:
            if all("foreach" in g for g in groups):
                for group in groups:
                    group["foreach"] = self.settings["foreach"]
                    if self.settings["foreach"] and group.get("fused"):
                        group["fused"] = False
                self.applied("foreach", f"{name} foreach={self.settings['foreach']}")
            else:
                self.refuse("foreach", f"{name} has no foreach implementation")
        if self.settings.get("fused"):
            why = _fused_unsupported(optimizer)
            if why:
                self.refuse("fused", why)
                return
            for group in groups:
                group["fused"], group["foreach"] = True, False
            optimizer._step_supports_amp_scaling = True  # as the constructor sets for fused=True
            self.applied("fused", f"{name} fused=True")

    def _wrap_zero_grad(self, original):
        group = self

        @functools.wraps(original)
        def zero_grad(obj, set_to_none: bool = True, *args, **kwargs):
            if not set_to_none:
                group.applied("zero_grad", f"{type(obj).__name__}.zero_grad(set_to_none=False) → True")
            return original(obj, True, *args, **kwargs)

        return zero_grad


def _fused_unsupported(optimizer: Optimizer) -> str | None:
    name = type(optimizer).__name__
    if name not in FUSED_OPTIMIZERS or not all("fused" in g for g in optimizer.param_groups):
        return f"{name} has no fused implementation in this torch"
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not torch.is_floating_point(p) or p.device.type not in ("cpu", "cuda"):
                return f"{name} fused kernels need floating-point CPU or CUDA parameters"
            if group.get("differentiable"):
                return f"{name} with differentiable=True cannot use fused kernels"
    return None
