"""Change detection on a run's own per-step series (`run --follow`): a shift that persists, tested
against the spread of the steps before it, never against a fixed percentage alone.

The test, on a series (step time, data wait) of steps measured clean:

- the reference is the REFERENCE_STEPS steps before the last RECENT_STEPS (never before the
  previous change: a level is compared with its own stretch only);
- its level is its fast quarter (the LEVEL_QUANTILE), its noise the robust spread (1.4826 x the
  median absolute deviation, the standard deviation of a normal series, unmoved by the odd spike).
  The fast quarter, not the median: on a shared machine other processes preempt the training
  thread for a slice of some steps (a 2.7 ms step then takes 6.7 ms), and the share of such steps
  comes and goes with the neighbours' load, moving the median between the two modes while the
  script did nothing different; the script's own change moves every step, its fast ones too;
- the recent steps' level must differ from the reference's by more than K_SPREAD spreads (and by
  more than MIN_SHIFT_SHARE of the step, below which no change is worth a finding), and
  PERSIST_SHARE of the recent steps must lie beyond half the shift: one slow step, or a few, is
  noise; a new level is not;
- where it began: the split of reference + recent into two stretches with the least squared
  error about their two means (the change-point estimate of a single step change), on values
  clipped to the series' 5-95 % range so a spike cannot pull it.

Memory creep: the high-water mark rose in most of the last MEMORY_CHECKS checks, spread over at
least MEMORY_MIN_SPAN_S (not a one-off jump, not the start filling its caches), by more than
MEMORY_MIN_GROWTH_BYTES, and at its rate it reaches the limit within MEMORY_HORIZON_S.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# The shift must exceed this many spreads of the steps before it: a normal series' median over 20
# steps moves by more than 4 spreads / sqrt(20 / 1.57) ~ 1.1 spreads of its own less than once in
# 10^4 checks; a busy machine's tail is heavier, hence 4 rather than 3.
K_SPREAD = 4.0
# Below this share of the step a persistent shift is real but not worth a finding (the 2 % a
# user can confirm on a shared machine is rules/base.py's MIN_REPORTED_SPEEDUP; 3 % leaves room).
MIN_SHIFT_SHARE = 0.03
REFERENCE_STEPS = 100  # the steps whose spread is the noise (at most; at least MIN_REFERENCE)
MIN_REFERENCE = 30
RECENT_STEPS = 20  # the new level must hold over this many steps
PERSIST_SHARE = 0.9  # ... this share of them beyond half the shift
LEVEL_QUANTILE = 0.25
MEMORY_CHECKS = 8  # memory: growth in most of the last this many checks
MEMORY_MIN_GROWTH_BYTES = 64 * 1024 * 1024
# ... over at least this long: the first minute of a run fills caches, allocator pools and datasets
MEMORY_MIN_SPAN_S = 60.0
MEMORY_HORIZON_S = 24 * 3600.0  # a creep that would reach the limit within a day is reported


@dataclass(frozen=True)
class Shift:
    at: int  # index in the series of the first value of the new level
    before_median: float
    before_spread: float
    before_n: int
    after_median: float
    after_spread: float
    after_n: int
    threshold: float


def spread(values: list[float]) -> float:
    """The robust spread: 1.4826 x the median absolute deviation."""
    if len(values) < 2:
        return 0.0
    m = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - m) for v in values)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def best_split(values: list[float]) -> int:
    """Index k (1 <= k < n) splitting `values` into two stretches with the least squared error
    about their means: where a single step change most likely happened."""
    n = len(values)
    if n < 2:
        return 0
    ordered = sorted(values)
    lo, hi = ordered[int(0.05 * (n - 1))], ordered[int(round(0.95 * (n - 1)))]
    clipped = [min(max(v, lo), hi) for v in values]
    total, total_sq = sum(clipped), sum(v * v for v in clipped)
    best_k, best_cost, left, left_sq = 1, float("inf"), 0.0, 0.0
    for k in range(1, n):
        v = clipped[k - 1]
        left += v
        left_sq += v * v
        right, right_sq = total - left, total_sq - left_sq
        cost = (left_sq - left * left / k) + (right_sq - right * right / (n - k))
        if cost < best_cost - 1e-18:
            best_k, best_cost = k, cost
    return best_k


def recent_shift(values: list[float], scale: float | None = None, recent: int = RECENT_STEPS,
                 reference: int = REFERENCE_STEPS) -> Shift | None:
    """A persistent shift at the end of `values` (a series since its last change), or None.
    `scale`: the step's typical length, for MIN_SHIFT_SHARE (default: the series' own level)."""
    n = len(values)
    if n < MIN_REFERENCE + recent:
        return None
    ref = values[max(0, n - recent - reference):n - recent]
    tail = values[n - recent:]
    before, noise = quantile(ref, LEVEL_QUANTILE), spread(ref)
    after = quantile(tail, LEVEL_QUANTILE)
    shift = after - before
    floor = MIN_SHIFT_SHARE * (scale if scale is not None else statistics.median(ref))
    threshold = max(K_SPREAD * noise, floor)
    if abs(shift) <= threshold:
        return None
    middle = before + shift / 2
    beyond = sum(1 for v in tail if (v > middle if shift > 0 else v < middle))
    if beyond < PERSIST_SHARE * len(tail):
        return None
    offset = n - recent - len(ref)
    window = values[offset:]
    at = offset + best_split(window)
    old, new = values[max(0, at - reference):at], values[at:]
    if len(old) < 2 or len(new) < 2:
        return None
    return Shift(at=at, before_median=statistics.median(old), before_spread=spread(old), before_n=len(old),
                 after_median=statistics.median(new), after_spread=spread(new), after_n=len(new),
                 threshold=threshold)


@dataclass(frozen=True)
class Creep:
    rate_bytes_per_s: float
    first_t: float
    first_bytes: int
    last_bytes: int
    reaches_limit_in_s: float | None  # None: no limit known


def memory_creep(times: list[float], high_water: list[int], limit: int | None) -> Creep | None:
    """A high-water mark that keeps rising toward `limit` (times and marks: one per check)."""
    if len(high_water) < MEMORY_CHECKS + 1:
        return None
    last = high_water[-(MEMORY_CHECKS + 1):]
    rises = sum(1 for a, b in zip(last, last[1:]) if b > a)
    if rises < MEMORY_CHECKS * 0.75:
        return None
    grown = high_water[-1] - high_water[0]
    if grown < MEMORY_MIN_GROWTH_BYTES or times[-1] <= times[0]:
        return None
    span = times[-1] - times[-(MEMORY_CHECKS + 1)]
    if span < MEMORY_MIN_SPAN_S:
        return None
    rate = (last[-1] - last[0]) / span
    if rate <= 0:
        return None
    left = None if limit is None else max(0.0, (limit - high_water[-1]) / rate)
    if left is not None and left > MEMORY_HORIZON_S:
        return None
    return Creep(rate, times[0], high_water[0], high_water[-1], left)


# ---- a rank that becomes a straggler ---------------------------------------------------------------
# Under data parallelism every rank's step lasts as long as the slowest rank's: the others wait for it
# in the step's collectives. A rank's own time per step is its step less that wait; the straggler's
# own time grows while the others' wait grows by as much. Each rank's excess (its own time less the
# other ranks' median at the same step) is tested like a step time: a new level that holds beyond the
# spread of the steps before it.
STRAGGLER_TEST_EVERY = 10  # the excess series are tested every this many common steps
STRAGGLER_SERIES = 4 * 1024  # the tests look at the last steps since the last change only


def own_time(step_s: float, comm_wait_s: float | None) -> float:
    """A rank's own time in a step: the step less its wait in the step's collectives (when measured)."""
    return max(0.0, step_s - (comm_wait_s or 0.0))


@dataclass(frozen=True)
class RankShift:
    rank: int
    step: int  # the first step of the new level
    shift: Shift  # on the rank's excess series (seconds)
    detected: int = 0  # the step at which the test saw it


class StragglerTest:
    """Fed one step at a time with every rank's own time (`add`), in step order; `found` keeps each
    rank that became a straggler (its excess rose to a new level that held). After a change the
    series restart at it: the next test compares the new level with itself."""

    def __init__(self, every: int = STRAGGLER_TEST_EVERY) -> None:
        self.every = every
        self.steps: list[int] = []
        self.step_s: list[float] = []
        self.own: dict[int, list[float]] = {}
        self.ex: dict[int, list[float]] = {}  # each rank's excess, step by step (kept as the steps come)
        self.found: list[RankShift] = []
        self._since_test = 0

    def add(self, step: int, own: dict[int, float], step_s: float | None = None) -> RankShift | None:
        """`step_s`: the step's length (the slowest rank's), the scale of MIN_SHIFT_SHARE (default: the
        largest own time)."""
        if len(own) < 2:
            return None
        if set(own) != set(self.own):
            if self.own:  # the ranks present changed: start over
                self.steps, self.step_s = [], []
            self.own, self.ex = {r: [] for r in own}, {r: [] for r in own}
        self.steps.append(step)
        self.step_s.append(step_s if step_s is not None else max(own.values()))
        for rank, value in own.items():
            self.own[rank].append(value)
            self.ex[rank].append(value - statistics.median(v for q, v in own.items() if q != rank))
        if len(self.steps) > STRAGGLER_SERIES:
            self._cut(len(self.steps) - STRAGGLER_SERIES // 2)
        self._since_test += 1
        if self._since_test < self.every:
            return None
        self._since_test = 0
        return self.test()

    def _cut(self, at: int) -> None:
        del self.steps[:at]
        del self.step_s[:at]
        for series in (*self.own.values(), *self.ex.values()):
            del series[:at]

    def excess(self, start: int = 0) -> dict[int, list[float]]:
        """Each rank's own time less the other ranks' median, step by step, from index `start`."""
        return {r: series[start:] for r, series in sorted(self.ex.items())}

    def test(self) -> RankShift | None:
        if len(self.steps) < MIN_REFERENCE + RECENT_STEPS:
            return None
        scale = statistics.median(self.step_s[-200:])
        up: RankShift | None = None
        # the test reads the last RECENT + REFERENCE steps and REFERENCE before where the change splits
        start = max(0, len(self.steps) - 2 * REFERENCE_STEPS - RECENT_STEPS)
        for rank, series in self.excess(start).items():
            found = recent_shift(series, scale=scale)
            if found is None:
                continue
            shift = Shift(**{**found.__dict__, "at": found.at + start})
            rise = shift.after_median - shift.before_median
            # a rank that got faster than the others, or whose excess rose because the others got
            # faster (the straggler before recovered: with two ranks one's excess is the other's,
            # negated), is no new straggler
            if rise <= 0 or not self._own_rose(rank, shift.at, rise):
                continue
            if up is None or rise > up.shift.after_median - up.shift.before_median:
                up = RankShift(rank, self.steps[shift.at], shift, self.steps[-1])
        if up is None:
            return None
        self._cut(self.steps.index(up.step))  # the new level is compared with itself from here
        self.found.append(up)
        return up

    def _own_rose(self, rank: int, at: int, rise: float) -> bool:
        """The rank's own time rose by at least half its excess: it got slower, the others did not
        get faster (with two ranks one's excess is the other's, negated)."""
        own = self.own[rank]
        before, after = own[max(0, at - REFERENCE_STEPS):at], own[at:]
        if len(before) < 2 or len(after) < 2:
            return False
        return quantile(after, LEVEL_QUANTILE) - quantile(before, LEVEL_QUANTILE) >= 0.5 * rise
