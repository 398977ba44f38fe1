"""Numbers many rules need, derived once from a RunRecord."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from torchdoctor.record import LoaderStats, RunRecord, StepSample


@dataclass
class RunFacts:
    measured: list[StepSample]  # after warmup, not sampled
    window: list[StepSample]  # after warmup, sampled ones included
    step_s: float | None  # mean measured step time
    cuda_used: bool
    sampled_steps: int

    def mean(self, attr: str, steps: list[StepSample] | None = None) -> float:
        chosen = self.measured if steps is None else steps
        return statistics.fmean(getattr(s, attr) for s in chosen) if chosen else 0.0

    def window_share(self, attr: str) -> float:
        """Share of the post-warmup wall time spent in one category."""
        total = sum(s.duration_s for s in self.window)
        return sum(getattr(s, attr) for s in self.window) / total if total > 0 else 0.0

    @classmethod
    def of(cls, record: RunRecord) -> "RunFacts":
        measured = record.measured_steps
        return cls(
            measured=measured,
            window=[s for s in record.steps if not s.warmup],
            step_s=statistics.fmean(s.duration_s for s in measured) if measured else None,
            cuda_used=record.environment.cuda_used,
            sampled_steps=record.dispatch.sampled_steps,
        )


def training_loader(record: RunRecord) -> LoaderStats | None:
    """The loader that feeds the training steps: most batches outside evaluation."""
    candidates = [l for l in record.loaders if l.batches - l.batches_in_eval > 0]
    return max(candidates, key=lambda l: l.batches - l.batches_in_eval, default=None)
