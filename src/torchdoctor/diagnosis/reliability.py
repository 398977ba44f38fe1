"""How far to trust a run's timings: the spread of its step times and how busy the machine
was. Estimates carry their noise: widened to a range when steps vary, withheld when they vary
too much to size anything, and the report says when the machine was busy.
"""

from __future__ import annotations

import statistics

from torchdoctor.model.findings import Finding
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import ms
from torchdoctor.rules.facts import RunFacts, core_duration
from torchdoctor.rules.noise import machine_busy

# p90/p50 of the measured steps' core time (phases excluded). Above WIDEN an estimate also gets
# the range it spans between the median and the slow steps; above WITHHOLD the steps vary too
# much for one number: half the steps at least 2x slower than the median.
WIDEN_SPREAD = 1.25
WITHHOLD_SPREAD = 2.0
MIN_STEPS_FOR_SPREAD = 5
# When the machine was busy: rules/noise.py (machine_busy), which the rules read too.


def step_spread(facts: RunFacts) -> tuple[float, float] | None:
    """(p50, p90) of the measured steps' core durations."""
    cores = sorted(core_duration(s) for s in facts.measured)
    if len(cores) < MIN_STEPS_FOR_SPREAD:
        return None
    p90 = cores[min(len(cores) - 1, round(0.9 * (len(cores) - 1)))]
    return statistics.median(cores), p90


def apply_spread(findings: list[Finding], facts: RunFacts) -> None:
    """Say each runtime estimate's noise; widen or withhold it when the steps vary."""
    spread = step_spread(facts)
    if not facts.step_s:
        return
    if spread is None:  # too few timed steps to know their spread: no number is worth printing
        for f in findings:
            if f.estimated_speedup is not None:
                f.evidence["estimate_if_steady"] = f.estimated_speedup
                f.estimated_speedup = None
                f.estimate_basis = (f"withheld: {len(facts.measured)} timed step(s), fewer than the "
                                    f"{MIN_STEPS_FOR_SPREAD} the spread check needs (run with more --steps); "
                                    f"sized on them it was: {f.estimate_basis}")
        return
    p50, p90 = spread
    ratio = p90 / p50 if p50 > 0 else float("inf")
    words = f"step times p50 {ms(p50):.1f} ms, p90 {ms(p90):.1f} ms"
    for f in findings:
        if f.estimated_speedup is None:
            continue
        step, on = sized_on(f, facts)
        saved = step * (1 - 1 / f.estimated_speedup)  # per step, as the rule sized it
        if ratio > WITHHOLD_SPREAD:
            f.evidence["estimate_if_steady"] = f.estimated_speedup
            f.estimated_speedup = None
            f.estimate_basis = (f"withheld: {words}, too spread for one number (re-run on a quieter machine or "
                                f"with more --steps); {on} it was: {f.estimate_basis}")
            continue
        if ratio > WIDEN_SPREAD:
            # the point is sized on its step (the mean, or the median its evidence names), the range on
            # p50 and p90: a skewed run can put the mean outside them, and a printed range always holds
            # its own point
            low = min(_speedup(p90, saved), _speedup(p50, saved), f.estimated_speedup)
            high = max(_speedup(p90, saved), _speedup(p50, saved), f.estimated_speedup)
            f.evidence["estimate_range"] = [round(low, 3), round(high, 3)]
            f.estimate_basis += f"; {words}: between {low:.2f}x and {high:.2f}x"
        else:
            f.estimate_basis += f"; {words}"


def sized_on(f: Finding, facts: RunFacts) -> tuple[float, str]:
    """The step a finding's estimate divides by, and the words for a withheld one: the step its
    evidence names (`step_ms`: TD301 and TD305 size on the median measured step, TD306 too, and
    their basis names it), else the mean measured step. The time it saves per step is read back
    from that step: read from the mean, a median-sized estimate would claim the mean's larger saving."""
    step_ms = f.evidence.get("step_ms")
    if isinstance(step_ms, (int, float)) and step_ms > 0 and abs(step_ms - ms(facts.step_s)) > 0.001:
        return step_ms / 1000.0, "as sized"
    return facts.step_s, "sized on the mean step"


def _speedup(step_s: float, saved_s: float) -> float:
    return step_s / max(step_s - saved_s, step_s * 0.05)


def busy_machine(record: RunRecord) -> str | None:
    """A sentence saying the machine was busy during the measured steps, or None."""
    c = record.contention
    if not machine_busy(record):
        return None
    share = c.runqueue_share
    load = max((x for x in (c.load_start, c.load_end) if x is not None), default=None)
    facts = []
    if share is not None:
        facts.append(f"the training thread waited for a CPU {share:.0%} of the measured time")
    if load is not None:
        facts.append(f"load average {load:.1f} on {c.cpus} CPU{'s' if c.cpus != 1 else ''}")
    if c.involuntary_switches:
        facts.append(f"{c.involuntary_switches:,} involuntary context switches")
    inflated = (f" Waiting for a CPU alone made the training thread's time up to {1 / (1 - share):.2f}x what it "
                f"would be on an idle machine." if share is not None and 0.02 <= share < 0.95 else "")
    return ("Busy machine: other processes took CPU time during the measured steps (" + "; ".join(facts) + ")."
            + inflated + " Step times and every estimate sized from them are less reliable: estimates carry the "
            "steps' spread, and compare and tune widen their noise band to at least 10 %. Re-run on a quieter "
            "machine to confirm.")
