"""Run-to-run noise from one run: split its measured steps into consecutive windows and see
how much the window means move. A difference between two runs smaller than that is not a
speedup."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from torchdoctor.model.record import RunRecord

WINDOWS = 5
MIN_STEPS_PER_WINDOW = 2
Z_95 = 1.96
# Without enough steps to measure noise, only a change this large counts as real.
UNKNOWN_NOISE_THRESHOLD = 0.10
# Windows within one run miss what differs between runs (another process, clocks, caches), so
# no band is narrower than this; it matches the smallest gain a rule reports (rules/base.py).
NOISE_FLOOR = 0.02
# When either run was measured on a busy machine (other processes took its CPU), what moves
# between runs is far larger than its windows show: 10 %, the spread seen between identical
# runs on a loaded 2-core machine.
BUSY_NOISE_FLOOR = 0.10


@dataclass
class Throughput:
    """What a run achieved, with its uncertainty."""

    step_s: float  # mean measured step time
    steps_per_s: float
    samples_per_s: float | None
    relative_sem: float | None  # standard error of the mean step time / mean; None: too few steps


def throughput(*records: RunRecord) -> Throughput | None:
    """Of one run, or of repeats of one configuration pooled in run order: windows then span
    the runs, so a shift between repeats widens the noise band as it should."""
    steps = [s for record in records for s in record.measured_steps]
    if not steps:
        return None
    durations = [s.duration_s for s in steps]
    total = sum(durations)
    samples = [s.samples for s in steps]
    return Throughput(
        step_s=total / len(durations),
        steps_per_s=len(durations) / total,
        samples_per_s=sum(samples) / total if all(n is not None for n in samples) else None,
        relative_sem=relative_sem(durations),
    )


def relative_sem(durations: list[float]) -> float | None:
    """The standard error of the mean duration over consecutive windows, relative to the mean."""
    windows = min(WINDOWS, len(durations) // MIN_STEPS_PER_WINDOW)
    if windows < 3:
        return None
    size = len(durations) // windows
    means = [statistics.fmean(durations[i * size:(i + 1) * size]) for i in range(windows)]
    mean = statistics.fmean(means)
    return statistics.stdev(means) / mean / math.sqrt(windows) if mean > 0 else None


@dataclass
class Change:
    """How run B compares with run A on one throughput measure."""

    ratio: float  # B's throughput / A's (>1: B is faster)
    noise: float | None  # the 95 % band on the ratio from the two runs' own noise
    measure: str  # "samples/s" or "steps/s"
    # the ratio the runs' measured CPU waiting alone would give (contention_gap): a run that
    # waited more for a CPU is not slower code, so the band reaches from 1 to it
    waiting: float | None = None

    @property
    def significant(self) -> bool:
        band = self.noise if self.noise is not None else UNKNOWN_NOISE_THRESHOLD
        low, high = min(1.0, self.waiting or 1.0), max(1.0, self.waiting or 1.0)
        return not low - band <= self.ratio <= high + band

    def describe(self) -> str:
        band = f"±{self.noise:.1%}" if self.noise is not None else "noise unknown: too few steps"
        if self.waiting is not None and abs(self.waiting - 1) >= 0.01:
            band += f"; CPU waiting alone explains {self.waiting:.2f}x"
        if not self.significant:
            return f"no measurable change ({self.ratio:.2f}x, {band})"
        return f"{self.ratio:.2f}x {self.measure} ({band})"


def change(a: Throughput, b: Throughput, busy: bool = False, waiting: float | None = None) -> Change:
    """Prefer samples/s (a batch_size change makes steps incomparable) when both runs have it.
    `busy`: a run was measured on a busy machine, and the band is at least BUSY_NOISE_FLOOR.
    `waiting`: the ratio the runs' measured CPU waiting alone would give (`contention_gap`)."""
    if a.samples_per_s and b.samples_per_s:
        ratio, measure = b.samples_per_s / a.samples_per_s, "samples/s"
    else:
        ratio, measure = b.steps_per_s / a.steps_per_s, "steps/s"
    floor = BUSY_NOISE_FLOOR if busy else NOISE_FLOOR
    if a.relative_sem is None or b.relative_sem is None:
        return Change(ratio, floor if busy else None, measure, waiting)
    band = Z_95 * math.hypot(a.relative_sem, b.relative_sem) * ratio
    return Change(ratio, max(band, floor), measure, waiting)


def share_lower_bound(share: float, samples: int, z: float = 1.28) -> float:
    """The one-sided lower bound (90 % at z=1.28) of a share estimated from `samples` stack
    samples (Wilson's interval): 5 hits of 21 samples say 24 %, but only that it is above 13 %."""
    if samples <= 0:
        return 0.0
    p, n = min(max(share, 0.0), 1.0), samples
    centre = p + z * z / (2 * n)
    spread = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    return max(0.0, (centre - spread) / (1 + z * z / n))


# The training thread waiting this share of the measured time for a CPU, or a load average this
# many times the CPUs: the machine was busy (the report says so; diagnosis/reliability.py).
BUSY_RUNQUEUE_SHARE = 0.10
BUSY_LOAD_PER_CPU = 1.5


def machine_busy(record: RunRecord) -> bool:
    """Other processes took the CPUs during the measured steps, as the run measured it (never guessed)."""
    c = record.contention
    if c is None:
        return False
    share = c.runqueue_share
    load = max((x for x in (c.load_start, c.load_end) if x is not None), default=None)
    return (share is not None and share >= BUSY_RUNQUEUE_SHARE) or bool(
        load is not None and c.cpus and load >= BUSY_LOAD_PER_CPU * c.cpus)


def waiting_share(*records: RunRecord) -> float | None:
    """The training thread's share of time spent waiting for a CPU, over `records` (pooled)."""
    shares = [r.contention.runqueue_share for r in records if r.contention is not None
              and r.contention.runqueue_share is not None]
    return sum(shares) / len(shares) if shares else None


def contention_gap(a: list[RunRecord], b: list[RunRecord]) -> float | None:
    """B's throughput over A's that their measured CPU waiting alone would give: a training
    thread that waited a share s of its time for a CPU ran 1 - s of it. None when not measured."""
    sa, sb = waiting_share(*a), waiting_share(*b)
    if sa is None or sb is None or max(sa, sb) >= 0.95:
        return None
    return (1 - sb) / (1 - sa)
