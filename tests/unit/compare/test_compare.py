"""Before/after comparison: ratios, noise, findings gone and new, mismatched runs."""

import json

import pytest

from helpers.records import noisy

from torchdoctor.cli import main
from torchdoctor.rules.noise import change, throughput
from torchdoctor.compare.runs import ComparedRun, compare_runs
from torchdoctor.model.record import KnobOutcome


def test_a_real_speedup_is_reported_with_its_noise_band():
    before, after = throughput(noisy(0.10, 0.05)), throughput(noisy(0.05, 0.05, seed=1))
    c = change(before, after)
    assert c.significant and c.ratio == pytest.approx(2.0, rel=0.05)
    assert c.describe().startswith("2.0") and "samples/s (±" in c.describe()


def test_a_difference_inside_the_noise_is_no_measurable_change():
    c = change(throughput(noisy(0.100, 0.30)), throughput(noisy(0.098, 0.30, seed=3)))
    assert not c.significant and c.describe().startswith("no measurable change")


def test_too_few_steps_means_unknown_noise_and_a_10_percent_bar():
    short_a, short_b = throughput(noisy(0.1, 0.0, steps=4)), throughput(noisy(0.095, 0.0, steps=4))
    c = change(short_a, short_b)
    assert c.noise is None and not c.significant and "too few steps" in c.describe()


def test_batch_size_change_compares_samples_per_second():
    small = throughput(noisy(0.10, 0.01, samples=32))
    big = throughput(noisy(0.15, 0.01, samples=64, seed=2))  # slower steps, more samples each
    c = change(small, big)
    assert c.measure == "samples/s" and c.ratio == pytest.approx(64 / 0.15 / (32 / 0.10), rel=0.03)


def test_compare_table_findings_delta_and_warnings():
    base = noisy(0.10, 0.02)
    fixed = noisy(0.05, 0.02, seed=5)
    fixed.knobs = [KnobOutcome("workers", "4", True, "x"), KnobOutcome("pin_memory", "true", False, "no CUDA")]
    fixed.run.script = "other.py"
    report = compare_runs([ComparedRun.of("base", base), ComparedRun.of("fixed", fixed)])
    table = report.tables[0]
    assert table.rows[0][-1] == "baseline"
    assert table.rows[1][1] == "workers=4, pin_memory=true (not applied)"
    assert table.rows[1][-1].startswith("2.0")
    assert any("different scripts" in n for n in report.notes)


def test_cli_compare_needs_two_runs_and_readable_records(tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert "at least two run directories" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "record.json").write_text("{truncated")
    assert main(["compare", str(bad), str(bad)]) == 2
    assert "cannot read the run record" in capsys.readouterr().err


def test_cli_compare_renders_json(tmp_path, capsys):
    dirs = []
    for name, rec in (("a", noisy(0.1, 0.02)), ("b", noisy(0.1, 0.02, seed=9))):
        d = tmp_path / name
        d.mkdir()
        rec.save(d / "record.json")
        dirs.append(str(d))
    assert main(["compare", *dirs, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "compare" and data["tables"][0]["rows"][1][-1].startswith("no measurable change")


def test_the_before_after_bars_carry_each_runs_band_and_the_tables_verdicts():
    runs = [ComparedRun.of("before", noisy(0.10, 0.05)), ComparedRun.of("after", noisy(0.05, 0.05, seed=1)),
            ComparedRun.of("same", noisy(0.10, 0.30, seed=3)), ComparedRun.of("short", noisy(0.1, 0.0, steps=4))]
    report = compare_runs(runs)
    bars = {b.name: b for b in report.figures.comparison}
    verdicts = {row[0]: row[-1] for row in report.tables[0].rows}
    assert {name: b.verdict for name, b in bars.items()} == verdicts  # the chart says what the table says
    before, after = bars["before"], bars["after"]
    assert before.measure == "samples/s" and before.value == pytest.approx(runs[0].speed.samples_per_s, rel=1e-3)
    assert before.low < before.value < before.high and before.ratio is None
    assert after.significant and after.ratio == pytest.approx(after.value / before.value, rel=1e-3)
    assert after.noise is not None and after.high - after.value == pytest.approx(after.value - after.low, rel=1e-3)
    assert not bars["same"].significant and bars["same"].high - bars["same"].low > after.high - after.low
    assert bars["short"].low is None and bars["short"].noise is None  # too few steps: no band drawn, none invented


def test_runs_without_measured_steps_get_no_bar():
    empty = noisy(0.1, 0.0, steps=0)
    report = compare_runs([ComparedRun.of("before", noisy(0.1, 0.05)), ComparedRun.of("empty", empty)])
    assert [b.name for b in report.figures.comparison] == ["before"]
    assert compare_runs([ComparedRun.of("empty", empty), ComparedRun.of("b", noisy(0.1, 0.05))]).figures.comparison == []


def test_two_different_scripts_are_said_in_the_header():
    a, b = noisy(0.10, 0.01), noisy(0.05, 0.01, seed=1)
    b.run.script = "other.py"
    report = compare_runs([ComparedRun.of("a", a), ComparedRun.of("b", b)])
    assert report.tables[0].title == "Before / after: DIFFERENT SCRIPTS (other.py, train.py)"


def test_a_busy_machine_widens_the_band_so_no_winner_is_named_inside_it():
    from torchdoctor.model.record import Contention

    quiet = throughput(noisy(0.100, 0.005, steps=60))
    faster = throughput(noisy(0.094, 0.005, steps=60, seed=1))  # 6 %: beyond the quiet band
    assert change(quiet, faster).significant
    assert not change(quiet, faster, busy=True).significant  # inside a busy machine's 10 %
    a, b = noisy(0.100, 0.005, steps=60), noisy(0.094, 0.005, steps=60, seed=1)
    b.contention = Contention(window_s=6.0, thread_runqueue_s=1.5, load_start=4.0, load_end=4.0, cpus=2)
    report = compare_runs([ComparedRun.of("before", a), ComparedRun.of("after", b)])
    verdict = report.tables[0].rows[1][-1]
    assert verdict.startswith("no measurable change") and "busy machine" in verdict
    assert any("Busy machine" in w for w in report.warnings)


def _saved(tmp_path, name, rec):
    (tmp_path / name).mkdir()
    rec.save(tmp_path / name / "record.json")
    return str(tmp_path / name)


@pytest.mark.parametrize("after_s, jitter, flag, code, says", [
    (0.130, 0.02, "--fail-if-slower", 1, "FAIL, 23.1 % slower"),  # 0.77x, well beyond the band
    (0.100, 0.02, "--fail-if-slower", 0, "pass"),  # the same speed
    (0.103, 0.02, "--fail-if-slower", 0, "pass"),  # 3 % slower: within the 5 % allowed
    (0.108, 0.60, "--fail-if-slower", 0, "pass (inconclusive)"),  # 7 % slower, inside a wide noise band
    (0.080, 0.02, "--fail-if-not-faster", 0, "pass"),  # 25 % faster
    (0.098, 0.02, "--fail-if-not-faster", 1, "FAIL"),  # 2 %: not faster by more than 5 %
])
def test_the_ci_gate_respects_the_noise_band(tmp_path, capsys, after_s, jitter, flag, code, says):
    a = _saved(tmp_path, "a", noisy(0.100, jitter, steps=40))
    b = _saved(tmp_path, "b", noisy(after_s, jitter, steps=40))  # the same jitter pattern, scaled
    assert main(["compare", a, b, flag, "5"]) == code
    err = capsys.readouterr().err
    assert says in err.splitlines()[-1]


def test_hours_turn_a_gain_into_hours_and_cost_saved_with_the_band(tmp_path, capsys):
    a = _saved(tmp_path, "a", noisy(0.100, 0.02, steps=40))
    b = _saved(tmp_path, "b", noisy(0.050, 0.02, steps=40, seed=2))
    assert main(["compare", a, b, "--hours", "100", "--price-per-hour", "2", "--format", "json"]) == 0
    table = next(t for t in json.loads(capsys.readouterr().out)["tables"] if t["title"].startswith("Projection"))
    [row] = table["rows"]
    takes, saved = (float(x.removesuffix(" h")) for x in row[1:3])
    assert 49.0 < takes < 51.0 and takes + saved == pytest.approx(100, abs=0.11)  # ~2x: a 100 h run takes ~50 h
    low, high = (float(x) for x in row[3].removesuffix(" h").split(" to "))
    assert low < float(row[2].removesuffix(" h")) < high
    assert 98 < float(row[4].split()[0]) < 102  # ~50 device-hours at 2 per hour
    assert main(["compare", a, b, "--price-per-hour", "2"]) == 2  # a price needs the run's length
