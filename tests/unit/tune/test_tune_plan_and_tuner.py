"""Tune planning and orchestration, with trials faked so no process is spawned."""


import pytest

from helpers.records import loader, noisy, record

from torchdoctor.model.findings import Finding, Report, Severity
from torchdoctor.tune import tuner as tuner_module
from torchdoctor.tune.plan import COMBINED, FIX, UPPER_BOUND, Trial, plan_trials
from torchdoctor.tune.report import estimate_checks, recommended, tune_report
from torchdoctor.tune.trials import TrialResult, TrialSettings
from torchdoctor.tune.tuner import Tuner


def finding(code, speedup=None):
    return Finding(code=code, slug="x", severity=Severity.HIGH, title="t", message="m", location=None,
                   evidence={}, fix="f", estimated_speedup=speedup, estimate_basis="b")


def test_plan_maps_findings_to_knobs_and_adds_upper_bounds():
    rec = record()
    rec.loaders = [loader(num_workers=0)]
    report = Report(source="run", tool_version="0",
                    findings=[finding("TD101", 1.5), finding("TD303"), finding("TD701"), finding("TD201")])
    trials = {t.name: t for t in plan_trials(report, rec, cuda=False)}
    assert trials["zero_grad=none"].addresses == ["TD303"] and trials["zero_grad=none"].kind == FIX
    workers = next(t for n, t in trials.items() if n.startswith("workers="))
    assert workers.knobs["persistent_workers"] == "true" and workers.addresses == ["TD101"]
    assert trials["eval=off"].kind == UPPER_BOUND
    assert "data=cached" in trials and "data=loader-only" in trials
    assert not any("TD201" in t.addresses for t in trials.values())  # no knob fixes a host sync


def test_compile_is_tried_only_where_it_can_work(monkeypatch):
    from torchdoctor.model.compile_record import CompileInfo
    from torchdoctor.model.location import Location
    from torchdoctor.model.record import KnobOutcome
    from torchdoctor.tune import plan

    report = Report(source="run", tool_version="0", findings=[finding("TD404")])
    monkeypatch.setattr(plan.shutil, "which", lambda name: "/usr/bin/g++")
    assert [t.name for t in plan_trials(report, record(), cuda=False)] == ["compile=true"]
    compiled = record()
    compiled.compile = CompileInfo(compiled_at=[Location("train.py", 3)])
    assert plan_trials(report, compiled, cuda=True) == []  # the script compiles already
    refused = record()
    refused.knobs = [KnobOutcome("compile", "true", applied=False, detail="no C++ compiler found")]
    assert plan_trials(report, refused, cuda=False) == []
    monkeypatch.setattr(plan.shutil, "which", lambda name: None)
    assert plan_trials(report, record(), cuda=False) == []  # no C++ compiler for the CPU backend
    assert [t.name for t in plan_trials(report, record(), cuda=True)] == ["compile=true"]


def test_cuda_only_fixes_are_not_planned_on_cpu():
    report = Report(source="run", tool_version="0", findings=[finding("TD402"), finding("TD403")])
    assert plan_trials(report, record(), cuda=False) == []
    assert {t.name for t in plan_trials(report, record(), cuda=True)} == {"amp=bf16", "tf32=true"}


class FakeTrials:
    """Stands in for run_trial: each trial's step time comes from `speeds`; a name in
    `crash` fails; `interrupt_at` raises KeyboardInterrupt when that trial starts."""

    def __init__(self, speeds, crash=(), interrupt_at=None):
        self.speeds, self.crash, self.interrupt_at, self.ran = speeds, crash, interrupt_at, []

    def __call__(self, trial, settings, run_dir):
        if trial.name == self.interrupt_at:
            raise KeyboardInterrupt
        self.ran.append(trial.name)
        if trial.name in self.crash:
            return TrialResult(trial, run_dir, 1, 0.1, "Traceback...\nRuntimeError: boom")
        run_dir.mkdir(parents=True)
        step_s = self.speeds.get(trial.name.removeprefix("combined: "), 0.1)
        rec = noisy(step_s, 0.01, seed=len(self.ran))
        rec.loaders = [loader(num_workers=0)]
        rec.save(run_dir / "record.json")
        return TrialResult(trial, run_dir, 0, 0.1)


def fake_analyze(rec):
    return Report(source="run", tool_version="0", findings=[finding("TD303", 1.3), finding("TD302")])


def tune(tmp_path, monkeypatch, fake, **kw):
    monkeypatch.setattr(tuner_module, "run_trial", fake)
    monkeypatch.setattr("torchdoctor.tune.report.analyze", fake_analyze)
    settings = TrialSettings("train.py", [], False, steps=30, warmup=2, max_seconds=60)
    return Tuner(settings, tmp_path, analyze=fake_analyze, **kw).run()


def test_winners_are_combined_and_recommended(tmp_path, monkeypatch):
    fake = FakeTrials({"baseline": 0.1, "zero_grad=none": 0.08, "foreach=true": 0.09})
    outcome = tune(tmp_path, monkeypatch, fake)
    assert fake.ran[:3] == ["baseline", "zero_grad=none", "foreach=true"]
    combo = outcome.trials[-1]
    assert combo.result.trial.kind == COMBINED and combo.result.trial.knobs == {"zero_grad": "none", "foreach": "true"}
    checks = {c.code: c for c in estimate_checks(outcome)}
    assert checks["TD303"].measured == pytest.approx(1.25, rel=0.03) and checks["TD303"].agreement < 1.1
    assert checks["TD302"].estimated is None
    assert recommended(outcome).result.trial.name.startswith("zero_grad=none") or recommended(outcome) is combo


def test_a_crashing_trial_is_recorded_and_the_tune_goes_on(tmp_path, monkeypatch):
    fake = FakeTrials({}, crash={"zero_grad=none"})
    outcome = tune(tmp_path, monkeypatch, fake)
    assert "foreach=true" in fake.ran
    report = tune_report(outcome)
    failed = next(t for t in report.tables if t.title == "Failed trials")
    assert failed.rows == [["zero_grad=none", 1, "RuntimeError: boom"]]


def test_ctrl_c_keeps_the_finished_trials(tmp_path, monkeypatch):
    fake = FakeTrials({"zero_grad=none": 0.05}, interrupt_at="foreach=true")
    outcome = tune(tmp_path, monkeypatch, fake)
    assert outcome.interrupted and [t.result.trial.name for t in outcome.trials] == ["zero_grad=none"]
    report = tune_report(outcome)
    assert [r[0] for r in report.tables[0].rows] == ["baseline", "zero_grad=none"]
    assert any("Interrupted" in n for n in report.notes)


def test_budget_skips_trials_that_would_not_fit_but_never_the_top_findings(tmp_path, monkeypatch):
    fake = FakeTrials({})
    outcome = tune(tmp_path, monkeypatch, fake, budget_s=0.0)
    assert fake.ran == ["baseline", "zero_grad=none"]  # TD303 ranks first: its knob is always tried
    assert [s.split(" (budget")[0] for s in outcome.skipped] == ["foreach=true", "baseline (repeat)"]
    assert any("Skipped by --budget" in n for n in tune_report(outcome).notes)


def test_chosen_trials_replace_the_plan(tmp_path, monkeypatch):
    fake = FakeTrials({})
    tune(tmp_path, monkeypatch, fake, trials=[Trial("workers=1", {"workers": "1"}, FIX)])
    assert fake.ran == ["baseline", "workers=1", "baseline (repeat)"]


def test_drift_between_the_two_baselines_widens_the_noise_band(tmp_path, monkeypatch):
    chosen = [Trial("zero_grad=none", {"zero_grad": "none"}, FIX)]
    steady = tune(tmp_path / "a", monkeypatch, FakeTrials(
        {"baseline": 0.115, "baseline (repeat)": 0.115, "zero_grad=none": 0.105}), trials=chosen)
    drifting = tune(tmp_path / "b", monkeypatch, FakeTrials(
        {"baseline": 0.10, "baseline (repeat)": 0.13, "zero_grad=none": 0.105}), trials=chosen)
    assert steady.gain(steady.trials[0]).significant
    assert not drifting.gain(drifting.trials[0]).significant  # 0.105 s lies inside the 0.10-0.13 s drift


def test_an_upper_bound_is_checked_against_the_findings_figure_for_removing_the_phase(tmp_path, monkeypatch):
    """eval=off removes evaluation entirely, so it checks TD701's `speedup_if_removed`, not its
    estimate (which assumes evaluation made 5x less frequent)."""
    eval_finding = finding("TD701", 1.6)
    eval_finding.evidence["speedup_if_removed"] = 2.0

    def analyze_eval(rec):
        return Report(source="run", tool_version="0", findings=[eval_finding])

    monkeypatch.setattr(tuner_module, "run_trial", FakeTrials({"baseline": 0.1, "eval=off": 0.05}))
    monkeypatch.setattr("torchdoctor.tune.report.analyze", analyze_eval)
    outcome = Tuner(TrialSettings("train.py", [], False, steps=30, warmup=2, max_seconds=60), tmp_path, analyze=analyze_eval).run()
    (check,) = [c for c in estimate_checks(outcome) if c.trial == "eval=off"]
    assert check.estimated == 2.0 and check.measured == pytest.approx(2.0, rel=0.05) and check.agreement < 1.05


def test_data_ceiling_is_measured_only_when_data_is_a_finding():
    rec = record()
    rec.loaders = [loader(num_workers=0)]
    report = Report(source="run", tool_version="0", findings=[finding("TD702"), finding("TD303")])
    names = [t.name for t in plan_trials(report, rec, cuda=False)]
    assert names[0] == "checkpoint=off"  # the top finding's trial comes first
    assert "data=cached" not in names and "data=loader-only" not in names


def test_an_upper_bound_beyond_the_baselines_own_numbers_is_not_called_a_ceiling(tmp_path, monkeypatch):
    def analyze_with_checkpoint(rec):
        found = finding("TD702", 1.1)
        found.evidence["speedup_if_removed"] = 1.15  # checkpoints: 13 % of the baseline's wall time
        return Report(source="run", tool_version="0", findings=[found])

    fake = FakeTrials({"baseline": 0.1, "checkpoint=off": 0.04})  # 2.5x: more than removing 13 % can give
    monkeypatch.setattr(tuner_module, "run_trial", fake)
    monkeypatch.setattr("torchdoctor.tune.report.analyze", analyze_with_checkpoint)
    outcome = Tuner(TrialSettings("train.py", [], False, steps=30, warmup=2, max_seconds=60), tmp_path,
                    analyze=analyze_with_checkpoint).run()
    notes = " ".join(tune_report(outcome).notes)
    assert "allow at most 1.15x" in notes and "not taken as a ceiling" in notes
    assert "the most its fix can give" not in notes


def test_the_tune_report_diagnoses_the_baseline_once(tmp_path, monkeypatch):
    """The estimate checks and every upper bound's ceiling read one diagnosis of the baseline."""
    diagnosed = []

    def analyze_with_checkpoint(rec):
        diagnosed.append(rec)
        found = finding("TD702", 1.1)
        found.evidence["speedup_if_removed"] = 1.15
        return Report(source="run", tool_version="0", findings=[found])

    fake = FakeTrials({"baseline": 0.1, "checkpoint=off": 0.04})
    monkeypatch.setattr(tuner_module, "run_trial", fake)
    outcome = Tuner(TrialSettings("train.py", [], False, steps=30, warmup=2, max_seconds=60), tmp_path,
                    analyze=analyze_with_checkpoint).run()
    monkeypatch.setattr("torchdoctor.tune.report.analyze", analyze_with_checkpoint)
    diagnosed.clear()
    notes = " ".join(tune_report(outcome).notes)
    assert "allow at most 1.15x" in notes
    assert diagnosed == [outcome.baseline.record]


def test_labels_cannot_contradict_their_numbers():
    from torchdoctor.tune.report import EstimateCheck, _agreement

    def label(est, measured, significant=True, noise=0.05, rng=None):
        return _agreement(EstimateCheck("TD101", "t.py:1", est, "workers=4", measured, significant, noise, rng))

    assert label(1.11, 0.81).startswith("wrong way: a slowdown (0.81x)")  # the case, once "agrees"
    assert label(1.40, 1.43).startswith("agrees: inside the measured band")
    assert label(1.30, 1.60).startswith("off: underestimated") and label(2.0, 1.3).startswith("off: overestimated")
    assert label(1.30, 1.60, rng=[1.2, 1.62]).startswith("agrees")  # the estimate's own range reaches it
    assert label(1.3, 1.01, significant=False).startswith("not confirmed")


def test_the_ladder_never_puts_a_stage_above_its_ceiling_without_saying_why(tmp_path, monkeypatch):
    from torchdoctor.model.record import LoaderOnlyStats

    class Ladder(FakeTrials):
        def __call__(self, trial, settings, run_dir):
            result = super().__call__(trial, settings, run_dir)
            if trial.name == "data=loader-only":
                from torchdoctor.model.record import RunRecord

                rec = RunRecord.load(run_dir / "record.json")
                rec.loader_only = LoaderOnlyStats(batches=100, seconds=10.0, samples=3200)  # 10 batches/s
                rec.save(run_dir / "record.json")
            return result

    chosen = [Trial("workers=4", {"workers": "4"}, FIX), Trial("data=loader-only", {"data": "loader-only"}, "ladder")]
    fake = Ladder({"baseline": 0.2, "baseline (repeat)": 0.2, "workers=4": 0.05})  # 20 steps/s with 4 workers
    monkeypatch.setattr(tuner_module, "run_trial", fake)
    monkeypatch.setattr("torchdoctor.tune.report.analyze", fake_analyze)
    settings = TrialSettings("train.py", [], False, steps=30, warmup=2, max_seconds=60)
    outcome = Tuner(settings, tmp_path, analyze=fake_analyze, trials=chosen).run()
    report = tune_report(outcome)
    ladder = next(t for t in report.tables if t.title == "Staged ladder")
    rows = {r[0]: r for r in ladder.rows}
    assert rows["full run, recommended knobs"][1] > rows["data loader alone"][1]
    assert "its knobs changed the loader" in rows["full run, recommended knobs"][3]
    assert "reference report" not in ladder.caption


def test_a_for_loop_optimizer_is_tried_fused_where_torch_has_the_kernels():
    from helpers.records import optimizer

    report = Report(source="run", tool_version="0", findings=[finding("TD306", 1.2)])
    rec = record()
    rec.optimizers = [optimizer(implementation="for-loop", fused_available=True)]
    assert [t.name for t in plan_trials(report, rec, cuda=False)] == ["fused=true"]
    rec.optimizers = [optimizer(class_name="RMSprop", implementation="for-loop", fused_available=False)]
    assert [t.name for t in plan_trials(report, rec, cuda=False)] == ["foreach=true"]
