"""How a line uses a value it reads from a tensor, and how far a run's timings can be trusted."""

import pytest

from helpers.records import record

from torchdoctor.diagnosis.reliability import apply_spread, busy_machine
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.rules.base import amdahl
from torchdoctor.model.record import Contention, StepSample
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.value_use import ACCUMULATE, CONTROL, EXTERNAL, LOG, OTHER, value_use


@pytest.mark.parametrize("line,use", [
    ("total += loss.item()", ACCUMULATE),
    ("losses_m.update(loss.item(), images.size(0))", ACCUMULATE),
    ('print(f"step {step} loss {loss.item():.4f}")', LOG),
    ("writer.add_scalar('loss', loss.item(), step)", LOG),
    ("plt.plot(steps, pred.data.numpy().flatten(), 'b-')", LOG),  # a figure shows it
    ("if not math.isfinite(loss.item()):", CONTROL),
    ("while done.item() == 0:", CONTROL),
    ("state, reward, done = env.step(action.item())", EXTERNAL),
    ("row = table[int(idx)]", EXTERNAL),
    ("x = y.item()", OTHER),
    ("loss = criterion(out, target) +", OTHER),  # a statement cut by the line end
])
def test_value_use_reads_the_line(line, use):
    assert value_use(line) == use


def _finding(speedup):
    return Finding(code="TD101", slug="s", severity=Severity.HIGH, title="t", message="m", location=None,
                   evidence={}, fix="f", estimated_speedup=speedup, estimate_basis="Amdahl: data wait removed")


def _spread(rec, slow_every: int, factor: float):
    rec.steps = [StepSample(index=s.index, start=s.start, end=s.start + (0.1 * factor if i % slow_every == 0 else 0.1),
                            warmup=s.warmup, sampled=False) for i, s in enumerate(rec.steps)]
    return RunFacts.of(rec)


def test_steady_steps_keep_the_estimate_and_say_their_spread():
    facts = RunFacts.of(record(step_s=0.1, steps=20))
    f = _finding(1.5)
    apply_spread([f], facts)
    assert f.estimated_speedup == 1.5 and "p50 100.0 ms, p90 100.0 ms" in f.estimate_basis


def test_spread_steps_widen_the_estimate_to_a_range():
    facts = _spread(record(steps=20), slow_every=3, factor=1.6)
    f = _finding(1.5)
    apply_spread([f], facts)
    low, high = f.evidence["estimate_range"]
    assert low < 1.5 < high and f.estimated_speedup == 1.5


def test_very_spread_steps_withhold_the_estimate():
    facts = _spread(record(steps=20), slow_every=3, factor=3.0)  # a third of the steps 3x slower
    f = _finding(1.5)
    apply_spread([f], facts)
    assert f.estimated_speedup is None and f.evidence["estimate_if_steady"] == 1.5
    assert f.estimate_basis.startswith("withheld:")


def test_a_busy_machine_is_said_with_its_numbers():
    rec = record()
    rec.contention = Contention(window_s=2.0, thread_runqueue_s=0.5, involuntary_switches=400, load_start=3.5,
                                load_end=3.9, cpus=2)
    words = busy_machine(rec)
    assert "waited for a CPU 25%" in words and "load average 3.9 on 2 CPUs" in words
    rec.contention = Contention(window_s=2.0, thread_runqueue_s=0.01, load_start=0.3, load_end=0.4, cpus=2)
    assert busy_machine(rec) is None
    rec.contention = None
    assert busy_machine(rec) is None  # not measured: never guessed


def test_too_few_timed_steps_withhold_every_estimate():
    """A `--steps 4` run printed 20.00x: four steps cannot show their own spread."""
    facts = RunFacts.of(record(step_s=0.1, steps=4))
    f = _finding(1.5)
    apply_spread([f], facts)
    assert f.estimated_speedup is None and f.evidence["estimate_if_steady"] == 1.5
    assert "fewer than the 5 the spread check needs" in f.estimate_basis

def test_a_printed_range_holds_its_point_estimate():
    """A few very slow steps put the mean step (the point's basis) above p90: the range the
    p50/p90 sizing gives would lie wholly above the point."""
    rec = record(steps=20)
    rec.steps = [StepSample(index=s.index, start=s.start, end=s.start + (0.1 if i % 10 else 1.5), warmup=s.warmup,
                            sampled=False) for i, s in enumerate(rec.steps)]
    facts = RunFacts.of(rec)
    f = _finding(1.3)
    apply_spread([f], facts)
    if "estimate_range" in f.evidence:
        low, high = f.evidence["estimate_range"]
        assert low <= 1.3 <= high
    for g in (_finding(1.05), _finding(2.5)):
        apply_spread([g], _spread(record(steps=20), slow_every=3, factor=1.6))
        low, high = g.evidence["estimate_range"]
        assert low <= g.estimated_speedup <= high


def test_a_range_reads_the_saving_back_from_the_step_the_estimate_was_sized_on():
    """TD301 sizes on the median step (100 ms), and one slow step pulls the mean to 194 ms: 1.5x on
    the median saves 33 ms a step. Read back from the mean it would be 65 ms, and the range would
    claim up to 2.83x; read from the median it spans 1.31x (p90, 140 ms) to 1.5x (p50)."""
    rec = record(steps=10)
    durations = [0.1] * 8 + [0.14, 1.0]
    rec.steps = [StepSample(index=s.index, start=s.start, end=s.start + (durations[i - 2] if i >= 2 else 0.1),
                            warmup=s.warmup, sampled=False) for i, s in enumerate(rec.steps)]
    facts = RunFacts.of(rec)
    assert facts.step_s == pytest.approx(0.194) and facts.median_step_s == pytest.approx(0.1)
    f = _finding(1.5)
    f.evidence["step_ms"] = 100.0
    apply_spread([f], facts)
    saved = 0.1 * (1 - 1 / 1.5)
    assert f.evidence["estimate_range"] == pytest.approx([amdahl(0.14, saved), 1.5], abs=1e-3)
    g = _finding(1.5)  # no step named: sized on the mean, read back from the mean as before
    apply_spread([g], facts)
    assert g.evidence["estimate_range"][1] > 2.5


def test_a_withheld_estimate_says_what_it_was_sized_on():
    facts = _spread(record(steps=20), slow_every=3, factor=3.0)
    f, g = _finding(1.5), _finding(1.5)
    f.evidence["step_ms"] = 100.0  # the median; the mean is 166.7 ms
    apply_spread([f, g], facts)
    assert "; as sized it was: Amdahl" in f.estimate_basis
    assert "; sized on the mean step it was: Amdahl" in g.estimate_basis
