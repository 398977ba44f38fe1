"""Numbers many rules need, derived once from a RunRecord."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cached_property

from torchdoctor.model.findings import Finding
from torchdoctor.model.record import SPLIT_FIELDS as SPLIT, LoaderStats, RunRecord, StepSample
from torchdoctor.rules.rank_facts import JobFacts, job_facts


@dataclass
class RunFacts:
    measured: list[StepSample]  # after warmup, not sampled
    window: list[StepSample]  # after warmup, sampled ones included
    step_s: float | None  # mean measured step time
    cuda_used: bool
    sampled_steps: int
    # findings of the rules that ran before this one (the registry's order): a rule about what
    # no other rule explained reads them
    earlier: list[Finding] = field(default_factory=list)
    record: RunRecord | None = field(default=None, repr=False, compare=False)  # the record these come from

    @cached_property
    def job(self) -> JobFacts | None:
        """The cross-rank numbers (`rank_facts.job_facts`) of a merged run of two ranks or more,
        else None: worked out on first use, then shared by every rule and the rank tables."""
        return job_facts(self.record) if self.record is not None else None

    @cached_property
    def median_step_s(self) -> float | None:
        """The median measured step: the typical step. A few steps that another process slowed
        (a busy machine: 5.7 s among 0.29 s steps in a loaded demo run) pull the mean up, not it."""
        return statistics.median(s.duration_s for s in self.measured) if self.measured else None

    def mean(self, attr: str, steps: list[StepSample] | None = None) -> float:
        """The mean of a step figure; of the split's (SPLIT), over the steps that timed it."""
        chosen = self.measured if steps is None else steps
        if attr in SPLIT:
            chosen = [s for s in chosen if s.split_timed]
        return statistics.fmean(getattr(s, attr) for s in chosen) if chosen else 0.0

    def window_share(self, attr: str) -> float:
        """Share of the post-warmup wall time spent in one category (of the split's, over the steps that
        timed it)."""
        steps = [s for s in self.window if s.split_timed] if attr in SPLIT else self.window
        total = sum(s.duration_s for s in steps)
        return sum(getattr(s, attr) for s in steps) / total if total > 0 else 0.0

    @classmethod
    def of(cls, record: RunRecord) -> "RunFacts":
        measured = record.measured_steps
        return cls(
            measured=measured,
            window=[s for s in record.steps if not s.warmup],
            step_s=statistics.fmean(s.duration_s for s in measured) if measured else None,
            cuda_used=record.environment.cuda_used,
            sampled_steps=record.dispatch.sampled_steps,
            record=record,
        )


def training_loader(record: RunRecord) -> LoaderStats | None:
    """The loader that feeds the training steps: most batches outside evaluation."""
    candidates = [l for l in record.loaders if l.batches - l.batches_in_eval > 0]
    return max(candidates, key=lambda l: l.batches - l.batches_in_eval, default=None)


# The TD101 fix's worker count: the `num_workers=4` of its fix text, or twice the current.
SUGGESTED_WORKERS = 4
# Loading whose CPU time is under this share of its wall time waits (on storage, a network
# file system, a decoder service) rather than computes: workers then overlap it without
# needing a core each.
CPU_BOUND_LOADING_SHARE = 0.5


def loading_cpu_share(loader: LoaderStats) -> float | None:
    """CPU time / wall time of loading done in the training process (num_workers=0), or None."""
    if loader.num_workers > 0 or loader.wait_cpu_s is None:
        return None
    # the CPU time is read on a share of the batches (schema 8); older records: on all of them
    timed = loader.cpu_timed_wait_s if loader.cpu_timed_wait_s is not None else loader.wait_total_s
    if timed <= 0:
        return None
    return min(1.0, loader.wait_cpu_s / timed)


# Loading that spent this share of its wait ready to run but without a CPU was starved by other
# processes: its low CPU share then says nothing about storage.
STARVED_SHARE = 0.2


def starved_of_cpu(loader: LoaderStats) -> bool:
    return loader.runqueue_share is not None and loader.runqueue_share >= STARVED_SHARE


def waits_on_storage(loader: LoaderStats) -> bool:
    share = loading_cpu_share(loader)
    return share is not None and share < CPU_BOUND_LOADING_SHARE and not starved_of_cpu(loader)


def workers_for_fix(record: RunRecord, loader: LoaderStats) -> int:
    """How many loader workers can run at once after the TD101 fix on this machine."""
    wanted = max(2 * loader.num_workers, SUGGESTED_WORKERS)
    if waits_on_storage(loader):
        return wanted
    cores = record.environment.cpu_count or 1
    return max(1, min(wanted, cores - 1))  # computing workers need a core each; one stays with training


def core_duration(step: StepSample) -> float:
    """A step's time without evaluation, checkpoints and logging (other rules judge those)."""
    return max(0.0, step.duration_s - step.eval_s - step.checkpoint_s - step.logging_s)
