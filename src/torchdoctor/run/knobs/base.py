"""What every knob group shares: its settings, its patches and hooks, and an honest account
of where each knob applied and where it could not."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import torch

from torchdoctor.run.knobs.spec import format_value
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.model.record import KnobOutcome


@dataclass
class KnobContext:
    """What knobs may read about the run: eval state and the warmup length, never timings."""

    in_eval: Callable[[], bool]
    warmup: int
    cuda_available: Callable[[], bool] = torch.cuda.is_available
    # (backward() calls so far in the open step, micro-batches of the last finished step)
    micro_batches: Callable[[], tuple[int, int]] = lambda: (0, 0)


class KnobGroup:
    """Knobs that patch the same things. `layer` says whether the group's patches go under the
    probes ("inner": the probes measure the changed behaviour, e.g. a replayed batch still
    counts as a batch) or over them ("outer": the probes see the call as the knob rewrote it,
    e.g. zero_grad(set_to_none=True))."""

    names: tuple[str, ...] = ()
    layer = "inner"

    def __init__(self, settings: dict[str, Any], ctx: KnobContext) -> None:
        self.settings = {k: v for k, v in settings.items() if k in self.names}
        self.ctx = ctx
        self.patches = PatchSet()
        self.handles: list[Any] = []
        self._applied: dict[str, list[str]] = defaultdict(list)
        self._refused: dict[str, str] = {}

    def install(self) -> None:
        raise NotImplementedError

    def uninstall(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.patches.restore()

    def applied(self, name: str, where: str) -> None:
        self._applied[name].append(where)

    def refuse(self, name: str, why: str) -> None:
        """This knob cannot apply to this script; the run goes on without it."""
        self._refused.setdefault(name, why)

    def withdraw(self, name: str, why: str) -> None:
        """The knob was applied, then taken back (the script did the same itself later): not applied."""
        self._applied.pop(name, None)
        self._refused[name] = why

    def outcomes(self) -> list[KnobOutcome]:
        out = []
        for name, value in self.settings.items():
            places = self._applied.get(name, [])
            if places:
                detail = _summarize(places)
            else:
                detail = self._refused.get(name, "the script never reached what this knob changes")
            out.append(KnobOutcome(name=name, value=format_value(value), applied=bool(places), detail=detail))
        return out


def _summarize(places: list[str]) -> str:
    distinct = list(dict.fromkeys(places))
    more = f" (+{len(places) - len(distinct)} repeats)" if len(places) > len(distinct) else ""
    return "; ".join(distinct[:4]) + (f"; +{len(distinct) - 4} more" if len(distinct) > 4 else "") + more
