"""checkpoint=off: `torch.save` writes nothing, so the gap to a normal run is what saving costs.

Under the phase probe, which then times the (now empty) saves at their call sites.
"""

from __future__ import annotations

import functools

import torch

from torchdoctor.run.knobs.base import KnobGroup
from torchdoctor.run.probes.frames import caller_location


class CheckpointKnob(KnobGroup):
    names = ("checkpoint",)
    layer = "inner"

    def install(self) -> None:
        if self.settings.get("checkpoint") == "off":
            self.patches.wrap(torch, "save", self._wrap_save)

    def _wrap_save(self, original):
        group = self

        @functools.wraps(original)
        def save(obj, f, *args, **kwargs):
            where = caller_location()
            group.applied("checkpoint", f"torch.save skipped at {where.path}:{where.line}" if where
                          else "torch.save skipped")
            return None

        return save
