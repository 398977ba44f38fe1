"""Find the model being trained: the outermost module, called from the script, whose
parameters make up most of what an optimizer updates. Knobs that change the model
(autocast, compile, channels_last) act on it and nothing else."""

from __future__ import annotations

import functools
import weakref
from typing import Callable

import torch
from torch.optim.optimizer import Optimizer

from torchdoctor.run.probes.patching import PatchSet

# A module owning at least this share of the optimized parameter elements is "the model";
# a head or an embedding called on its own is not.
MODEL_SHARE = 0.5
MAX_CALLS_EXAMINED = 10_000  # give up looking after this many module calls


class TrainedModelFinder:
    def __init__(self, on_found: Callable[[torch.nn.Module], None]) -> None:
        self.on_found = on_found
        self.model: "weakref.ref[torch.nn.Module] | None" = None
        self._optimizers: "weakref.WeakSet[Optimizer]" = weakref.WeakSet()
        self._patches = PatchSet()
        self._hook = None
        self._examined = 0

    def install(self) -> None:
        self._patches.wrap(Optimizer, "__init__", self._wrap_optimizer_init)
        self._hook = torch.nn.modules.module.register_module_forward_pre_hook(self._pre_forward)

    def uninstall(self) -> None:
        self._stop_looking()
        self._patches.restore()

    def _stop_looking(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _wrap_optimizer_init(self, original):
        finder = self

        @functools.wraps(original)
        def __init__(opt, *args, **kwargs):
            original(opt, *args, **kwargs)
            finder._optimizers.add(opt)

        return __init__

    def _optimized(self) -> dict[int, int]:
        return {id(p): p.numel() for opt in self._optimizers for g in opt.param_groups for p in g["params"]}

    def _pre_forward(self, module: torch.nn.Module, args) -> None:
        self._examined += 1
        if self._examined > MAX_CALLS_EXAMINED:
            self._stop_looking()
            return
        optimized = self._optimized()
        if not optimized:
            return  # no optimizer yet: this forward is not a training step's
        owned = sum(optimized.get(id(p), 0) for p in module.parameters())
        if owned >= MODEL_SHARE * sum(optimized.values()):
            self.model = weakref.ref(module)
            self._stop_looking()
            self.on_found(module)
