"""The tune's report: the before/after table of every trial, the doctor's estimates checked
against the measured gains, the staged ladder, failures and the recommended knob set."""

from __future__ import annotations

from dataclasses import dataclass

from torchdoctor.version import __version__
from torchdoctor.diagnosis.run import analyze
from torchdoctor.rules.noise import throughput
from torchdoctor.compare.numerics import CHANGED, NumericsVerdict, floor_of, judge, knobs_of
from torchdoctor.compare.runs import ComparedRun, compare_runs, projection_table
from torchdoctor.model.findings import Finding, Report, Table
from torchdoctor.tune.plan import COMBINED, FIX, LADDER, SCALING, UPPER_BOUND
from torchdoctor.tune.tuner import TunedTrial, TuneOutcome

ESTIMATE_TOLERANCE = 1.5  # an estimate within this factor of the measured gain is "close" (the benchmark's yardstick)


@dataclass
class EstimateCheck:
    code: str
    where: str
    estimated: float | None
    trial: str
    measured: float | None
    significant: bool
    noise: float | None = None  # the measured ratio's 95 % band (absolute)
    estimate_range: list[float] | None = None  # the estimate's own range, when the steps' spread gave one

    @property
    def agreement(self) -> float | None:
        """max(estimated/measured, measured/estimated): 1.0 is a perfect estimate."""
        if self.estimated is None or self.measured is None or self.measured <= 0:
            return None
        return max(self.estimated / self.measured, self.measured / self.estimated)


def estimate_checks(outcome: TuneOutcome, base_report: Report | None = None) -> list[EstimateCheck]:
    """`base_report`: the baseline's diagnosis when the caller has it already."""
    if base_report is None:
        base_report = analyze(outcome.baseline.record)
    checks = []
    for trial in outcome.trials:
        # an upper bound removes exactly the time its finding's estimate counts, so it checks it too
        if trial.result.trial.kind not in (FIX, UPPER_BOUND) or not trial.ok:
            continue
        gain = outcome.gain(trial)
        for finding in base_report.findings:
            if finding.code in trial.result.trial.addresses:
                where = f"{finding.location.path}:{finding.location.line}" if finding.location else "-"
                checks.append(EstimateCheck(finding.code, where, _estimate_for(finding, trial), trial.result.trial.name,
                                            gain.ratio if gain else None, bool(gain and gain.significant),
                                            gain.noise if gain else None, finding.evidence.get("estimate_range")))
    return checks


def _estimate_for(finding: Finding, trial: TunedTrial) -> float | None:
    """What the trial should measure: the finding's estimate for a fix; for an upper bound,
    which removes the whole phase, the finding's own figure for removing it."""
    if trial.result.trial.kind == UPPER_BOUND:
        return finding.evidence.get("speedup_if_removed")
    return finding.estimated_speedup


def numerics(outcome: TuneOutcome, trial: TunedTrial) -> NumericsVerdict:
    """The trial's losses against the baseline's (the guard: compare/numerics.py)."""
    base = outcome.baseline.record
    repeat = outcome.baseline_repeat.record if outcome.baseline_repeat is not None else None
    floor = floor_of(base, repeat) if trial is not outcome.baseline_repeat else None
    return judge(base.losses if base else None, trial.record.losses if trial.ok else None,
                 knobs_of(trial.record) if trial.ok else {}, floor)


def recommended(outcome: TuneOutcome) -> TunedTrial | None:
    """The fastest fix or combination that beat the baseline beyond noise and kept the
    script's numerics (within its knob's tolerance)."""
    best, best_ratio = None, 1.0
    for trial in outcome.trials:
        if trial.result.trial.kind not in (FIX, COMBINED):
            continue
        if trial.ok and numerics(outcome, trial).status == CHANGED:
            continue
        gain = outcome.gain(trial)
        if gain is not None and gain.significant and gain.ratio > best_ratio:
            best, best_ratio = trial, gain.ratio
    return best


def tune_report(outcome: TuneOutcome, hours: float | None = None, price: float | None = None) -> Report:
    """`hours` (and `price` per device-hour): each trial's measured gain projected onto a training
    run that long, with its band."""
    if not outcome.baseline.ok:
        report = Report(source="tune", tool_version=__version__)
        if outcome.interrupted:
            report.notes.append("Interrupted during the baseline run, so nothing was tuned: "
                                + "; ".join(outcome.skipped))
        else:
            report.notes.append(f"The baseline run failed, so nothing was tuned: {outcome.baseline.result.error}")
        return report
    _one_rank_from_trial(outcome)
    repeat = [outcome.baseline_repeat] if outcome.baseline_repeat is not None else []
    timed = [t for t in [outcome.baseline, *repeat, *outcome.trials] if t.ok and t.result.trial.kind != LADDER]
    runs = [ComparedRun.of(t.result.trial.name, t.record) for t in timed]
    if len(outcome.baseline_records()) == 2:
        # the ratios in the table are the ones the recommendation and the estimate checks use
        runs[0].name, runs[0].speed = "baseline (both runs pooled)", throughput(*outcome.baseline_records())
    report = compare_runs(runs)
    report.source = "tune"
    if hours:
        report.tables.insert(1, projection_table(runs, hours, price))
    base_report = analyze(outcome.baseline.record)  # read by the estimate checks and the upper-bound notes
    checks = estimate_checks(outcome, base_report)
    if checks:
        report.tables.append(Table(
            title="Estimated vs measured",
            columns=["finding", "where", "estimated", "trial", "measured", "agreement"],
            rows=[[c.code, c.where, _x(c.estimated), c.trial, _x(c.measured) if c.significant else
                   f"{_x(c.measured)} (within noise)", _agreement(c)] for c in checks],
            caption=("Estimated: the doctor's Amdahl estimate from the baseline (for an upper bound such as "
                     "eval=off, its figure for removing the phase entirely). Measured: the trial's throughput "
                     "over the baseline's, same steps, fresh process."),
        ))
    report.tables.append(_numerics_table(outcome))
    report.tables.append(_ladder(outcome))
    failed = [t for t in outcome.trials if not t.ok]
    if failed:
        report.tables.append(Table(title="Failed trials", columns=["trial", "exit code", "error (last line)"],
                                   rows=[[t.result.trial.name, t.result.exit_code, _last_line(t.result.error)]
                                         for t in failed]))
    report.notes[:0] = _summary_notes(outcome, base_report)
    if len(outcome.baseline_records()) == 2:
        report.notes.append("Every ratio is against both baseline runs pooled (one before the trials, one after), "
                            "so drift during the tune widens the noise band instead of posing as a gain.")
    return report


def _numerics_table(outcome: TuneOutcome) -> Table:
    rows = []
    repeat = outcome.baseline_repeat
    if repeat is not None and repeat.ok:
        v = numerics(outcome, repeat)
        rows.append(["baseline (repeat)", "(as written)", v.status if v.status != "CHANGED" else "differs",
                     v.compared, _rel(v.max_rel), "the script's own run-to-run difference: the floor", v.text])
    for trial in outcome.trials:
        if not trial.ok:
            continue
        v = numerics(outcome, trial)
        rows.append([trial.result.trial.name, ", ".join(f"{k}={x}" for k, x in knobs_of(trial.record).items()) or "—",
                     v.status, v.compared, _rel(v.max_rel), v.tolerance or "—", v.text])
    return Table(title="Numerics guard", columns=["trial", "applied", "losses", "compared", "largest rel. diff",
                                                  "must be", "detail"], rows=rows,
                 caption=("Each trial's losses (the values the script passed to backward()) against the baseline's, "
                          "step by step. Knobs that only move work (workers, pinning, prefetch, foreach, "
                          "zero_grad, no_sync, DDP buckets) must keep them bit-identical; AMP, TF32, compile, threads, "
                          "fused optimizer kernels and compressed all-reduce within the stated tolerance; batch size and ranks change each "
                          "step's data, so only the level of the losses is compared. A trial marked CHANGED is never "
                          "recommended."))


def _rel(value: float | None) -> str:
    return "—" if value is None else "0" if value == 0 else f"{value:.2g}"


def _one_rank_from_trial(outcome: TuneOutcome) -> None:
    """The nproc=1 trial is one rank alone, measured: the baseline's scaling verdict (TD606)
    compares with it instead of its model."""
    from torchdoctor.diagnosis.ranks import one_rank_baseline

    base = outcome.baseline.record
    alone = next((t for t in outcome.trials if t.ok and t.result.trial.kind == SCALING), None)
    if alone is None or base is None or base.distributed is None or not base.ranks:
        return
    base.distributed.one_rank = one_rank_baseline(alone.record, "tune's nproc=1 trial", alone.result.seconds,
                                                  str(alone.result.run_dir.relative_to(outcome.tune_dir)))


def _ladder(outcome: TuneOutcome) -> Table:
    """The stages, each with what bounds it. A stage measured above the ceiling a stage before it
    defines is said as such: either the knobs changed what the ceiling measured (a loader with
    more workers) or the runs differ by more than their knobs, and the ceiling is no ceiling."""
    rows: list[list] = []
    by_kind = {t.result.trial.name: t for t in outcome.trials if t.ok}
    loader_only = by_kind.get("data=loader-only")
    ceilings: list[tuple[str, float]] = []  # (stage, steps/s) a full run cannot pass
    if loader_only is not None and loader_only.record.loader_only is not None:
        lo = loader_only.record.loader_only
        rate = lo.batches / lo.seconds if lo.seconds else None
        rows.append(["data loader alone", _r(rate), _r(lo.samples / lo.seconds) if lo.samples is not None and
                     lo.seconds else None, "the input pipeline's ceiling, with the script's own loader settings"])
        ceilings += [("data loader alone", rate)] if rate else []
    best = recommended(outcome)
    stages = (("compute on cached data", by_kind.get("data=cached"), "the ceiling of any data-loading fix"),
              ("full run (baseline)", outcome.baseline, ""),
              ("full run, recommended knobs", best, ""))
    for label, trial, says in stages:
        records = (outcome.baseline_records() if trial is outcome.baseline
                   else [trial.record] if trial is not None and trial.ok else [])
        speed = throughput(*records) if records else None
        if speed is None:
            continue
        note = says
        ceiling = min(ceilings, key=lambda c: c[1]) if ceilings and label.startswith("full run") else None
        if ceiling is not None and speed.steps_per_s > ceiling[1] * (1 + _band(outcome, trial)):
            knobs = trial.result.trial.knobs if trial is not None and trial is not outcome.baseline else {}
            moved = LOADER_KNOBS if ceiling[0] == "data loader alone" else COMPUTE_KNOBS
            what = "loader" if moved is LOADER_KNOBS else "compute"
            note = (f"above the {ceiling[0]} ceiling: its knobs changed the {what}, which that ceiling measured "
                    "as written" if any(k in moved for k in knobs) else
                    f"above the {ceiling[0]} ceiling measured with the same loader: the runs differ by more than "
                    "their knobs (a busy machine?), so that ceiling is not one here")
        rows.append([label, _r(speed.steps_per_s), _r(speed.samples_per_s), note])
        if label == "compute on cached data":
            ceilings.append((label, speed.steps_per_s))
    return Table(title="Staged ladder", columns=["stage", "steps/s (batches/s)", "samples/s", "bounded by"],
                 rows=rows,
                 caption=("The loader alone is the input pipeline's ceiling; cached data shows what compute alone "
                          "achieves; the gap from there to the full run is data loading. A stage above a ceiling "
                          "says why."))


LOADER_KNOBS = ("workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size", "threads")
COMPUTE_KNOBS = ("threads", "batch_size", "compile", "amp", "tf32", "channels_last", "cudnn_benchmark", "foreach",
                 "fused", "zero_grad", "non_blocking", "no_sync", "comm_hook", "bucket_cap_mb", "nproc")


def _band(outcome: TuneOutcome, trial) -> float:
    gain = outcome.gain(trial) if trial is not None and trial is not outcome.baseline else None
    return gain.noise if gain is not None and gain.noise is not None else 0.10


def _summary_notes(outcome: TuneOutcome, base: Report) -> list[str]:
    notes = []
    best = recommended(outcome)
    if best is not None:
        gain = outcome.gain(best)
        sets = " ".join(f"--set {s}" for s in best.result.trial.settings())
        notes.append(f"Recommended: {sets} (measured {gain.describe()}). Make the same change in the script "
                     f"to keep it; `torchdoctor rules CODE` shows how.")
    else:
        notes.append("No knob beat the baseline beyond run-to-run noise.")
    for trial in outcome.trials:
        gain = outcome.gain(trial)
        if trial.result.trial.kind == UPPER_BOUND and gain is not None:
            notes.append(_upper_bound_note(base, trial, gain))
        if trial.ok and trial.result.trial.kind in (FIX, COMBINED) and numerics(outcome, trial).status == CHANGED:
            notes.append(f"Numerics: {trial.result.trial.name} changed the script's losses beyond what it may "
                         f"({numerics(outcome, trial).text}); not recommended whatever its speed.")
    if outcome.skipped:
        notes.append("Skipped by --budget: " + "; ".join(outcome.skipped))
    if outcome.interrupted:
        notes.append("Interrupted: the trials that finished are compared above.")
    return notes


def _upper_bound_note(base: Report, trial: TunedTrial, gain) -> str:
    """An upper bound is only a ceiling when it is measurable and agrees with what the baseline
    itself measured: removing a phase of share s can give at most 1/(1-s)."""
    name = trial.result.trial.name
    if not gain.significant:
        return f"Upper bound {name}: {gain.describe()}: its fix has nothing measurable to give here."
    allowed = _evidence_ceiling(base, trial)
    band = gain.noise if gain.noise is not None else 0.10
    if allowed is not None and gain.ratio > allowed * (1 + band):
        return (f"Upper bound {name} measured {gain.ratio:.2f}x, but the baseline's own measurements allow at most "
                f"{allowed:.2f}x for what it removes: the runs differ by more than this knob (another process, a busy "
                "machine); not taken as a ceiling. Re-run the tune on a quieter machine.")
    return f"Upper bound {name}: {gain.describe()} — the most its fix can give."


def _evidence_ceiling(base: Report, trial: TunedTrial) -> float | None:
    """What removing the trial's target entirely can give, from the baseline's numbers (`base`:
    its diagnosis)."""
    if trial.result.trial.knobs.get("data") == "cached":
        s = base.summary
        return s.step_time_s / (s.step_time_s - s.split.data_wait_s) if s and s.step_time_s and \
            s.step_time_s > s.split.data_wait_s else None
    figures = [f.evidence.get("speedup_if_removed") for f in base.findings
               if f.code in trial.result.trial.addresses and f.evidence.get("speedup_if_removed")]
    return max(figures) if figures else None


def _x(value: float | None) -> str:
    return "not estimated" if value is None else f"{value:.2f}x"


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _agreement(check: EstimateCheck) -> str:
    """A label that cannot contradict its numbers: "agrees" only when the estimate (or its own
    range) lies inside the measured gain's noise band; a measured slowdown is called one."""
    if check.agreement is None:
        return "-"
    est, measured = check.estimated, check.measured
    band = check.noise if check.noise is not None else 0.10
    low, high = check.estimate_range or (est, est)
    factor = f"factor {check.agreement:.2f}"
    if check.significant and measured < 1 <= est:
        return f"wrong way: a slowdown ({measured:.2f}x) where a {est:.2f}x gain was estimated"
    if high >= measured - band and low <= measured + band:
        return f"agrees: inside the measured band ({measured - band:.2f}x to {measured + band:.2f}x)"
    if not check.significant:
        return f"not confirmed: no measurable change where {est:.2f}x was estimated ({factor})"
    side = "over" if est > measured else "under"
    return f"off: {side}estimated ({factor}; measured {measured - band:.2f}x to {measured + band:.2f}x)"


def _last_line(error: str | None) -> str:
    """The script's own last error line (the exception), not the doctor's closing message."""
    lines = [line for line in (error or "").splitlines() if line.strip()]
    own = [line for line in lines if not line.startswith("torchdoctor:")]
    return (own or lines or ["no output"])[-1]

