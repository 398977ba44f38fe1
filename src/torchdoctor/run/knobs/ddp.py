"""DDP knobs: DistributedDataParallel's constructor settings, a compressing comm hook, and
`no_sync` for gradient accumulation, applied without editing the script.

They sit over the probes ("outer"), so the DDP probe records the settings and the
synchronisation as the knobs left them.
"""

from __future__ import annotations

import functools
import inspect

from torch.nn.parallel import DistributedDataParallel

from torchdoctor.run.knobs.base import KnobGroup

CONSTRUCTOR = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "find_unused_parameters",
               "broadcast_buffers")
# PyTorch versions with `forward_sync_buffers` deprecate `broadcast_buffers` for the per-forward sync
_FORWARD_SYNC = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters


class DdpKnobs(KnobGroup):
    names = (*CONSTRUCTOR, "comm_hook", "no_sync")
    layer = "outer"

    def install(self) -> None:
        if any(name in self.settings for name in (*CONSTRUCTOR, "comm_hook")):
            self.patches.wrap(DistributedDataParallel, "__init__", self._wrap_init)
        if self.settings.get("no_sync"):
            self.patches.wrap(DistributedDataParallel, "forward", self._wrap_forward)

    def _wrap_init(self, original):
        group = self

        @functools.wraps(original)
        def __init__(ddp, module, *args, **kwargs):
            for name in CONSTRUCTOR:
                if name in group.settings:
                    argument = "forward_sync_buffers" if name == "broadcast_buffers" and _FORWARD_SYNC else name
                    before = kwargs.pop(name, kwargs.get(argument, "default"))
                    kwargs[argument] = group.settings[name]
                    group.applied(name, f"DDP({type(module).__name__}) {argument}: {before} -> {group.settings[name]}")
            original(ddp, module, *args, **kwargs)
            hook = group.settings.get("comm_hook")
            if hook:
                group._register(ddp, hook)

        return __init__

    def _register(self, ddp, name: str) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if ddp._comm_hooks:
            self.refuse("comm_hook", "the script registers its own DDP comm hook; DDP takes only one")
            return
        hook = default_hooks.bf16_compress_hook if name == "bf16" else default_hooks.fp16_compress_hook
        try:
            ddp.register_comm_hook(ddp.process_group, hook)
        except (TypeError, RuntimeError, ValueError) as exc:  # bf16 needs NCCL 2.10+ on CUDA; gloo takes fp16
            self.refuse("comm_hook", f"DDP refused {hook.__name__} here ({str(exc).splitlines()[0]}); on CPU (gloo) "
                                     "try comm_hook=fp16")
            return
        self.applied("comm_hook", f"DDP({type(ddp.module).__name__}) all-reduces {name} gradients ({hook.__name__})")

    def _wrap_forward(self, original):
        group, ctx = self, self.ctx

        def forward(ddp, *args, **kwargs):  # no functools.wraps: called every micro-batch
            done, per_step = ctx.micro_batches()
            if per_step > 1 and done < per_step - 1 and ddp.require_backward_grad_sync:
                ddp.require_backward_grad_sync = False  # as `with ddp.no_sync():` around this forward
                try:
                    result = original(ddp, *args, **kwargs)
                finally:
                    ddp.require_backward_grad_sync = True
                group.applied("no_sync", f"no all-reduce on micro-batches 1..{per_step - 1} of {per_step} per step")
                return result
            return original(ddp, *args, **kwargs)

        return forward
