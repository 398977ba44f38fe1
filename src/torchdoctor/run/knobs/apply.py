"""All knobs of one run, installed around the probes in the right layers."""

from __future__ import annotations

from typing import Any

from torchdoctor.run.knobs.base import KnobContext, KnobGroup
from torchdoctor.run.knobs.compute import ComputeKnobs
from torchdoctor.run.knobs.ddp import DdpKnobs
from torchdoctor.run.knobs.loader import LoaderKnobs
from torchdoctor.run.knobs.optimizer import OptimizerKnobs
from torchdoctor.run.knobs.phases import CheckpointKnob
from torchdoctor.model.record import RunRecord

GROUPS: tuple[type[KnobGroup], ...] = (LoaderKnobs, OptimizerKnobs, ComputeKnobs, CheckpointKnob, DdpKnobs)


class KnobSet:
    name = "knobs"

    def __init__(self, settings: dict[str, Any], ctx: KnobContext) -> None:
        self.groups = [g(settings, ctx) for g in GROUPS if any(n in settings for n in g.names)]
        self._installed: list[KnobGroup] = []

    def install(self, layer: str) -> None:
        """`inner` before the probes are installed, `outer` after them."""
        for group in self.groups:
            if group.layer == layer:
                group.install()
                self._installed.append(group)

    def uninstall(self, layer: str) -> None:
        for group in reversed([g for g in self._installed if g.layer == layer]):
            group.uninstall()
            self._installed.remove(group)

    def contribute(self, record: RunRecord) -> None:
        for group in self.groups:
            record.knobs += group.outcomes()
            if isinstance(group, LoaderKnobs):
                group.contribute(record)
