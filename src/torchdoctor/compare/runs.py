"""`torchdoctor compare`: a before/after table of run directories, in the style of the
reference reports ("2.2 it/s → 4.9 it/s, 2.2x"), with changes inside the noise shown as such."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchdoctor.version import __version__
from torchdoctor.diagnosis.run import analyze
from torchdoctor.rules.noise import Z_95, Change, Throughput, change, contention_gap, throughput
from torchdoctor.model.figures import Figures, RunBar
from torchdoctor.model.findings import Finding, Report, Table
from torchdoctor.model.record import RunRecord
from torchdoctor.model.units import format_bytes


@dataclass
class ComparedRun:
    name: str
    record: RunRecord
    report: Report
    speed: Throughput | None

    @classmethod
    def of(cls, name: str, record: RunRecord) -> "ComparedRun":
        return cls(name, record, analyze(record), throughput(record))

    @property
    def busy(self) -> bool:
        """Measured while other processes took the CPU (see diagnosis/reliability.py)."""
        return self.report.summary is not None and self.report.summary.machine_busy is not None

    def against(self, first: "ComparedRun") -> Change:
        """This run's change against `first`, with the band the two runs' noise, a busy machine
        and their measured CPU waiting give (rules/noise.py)."""
        busy = first.busy or self.busy
        return change(first.speed, self.speed, busy=busy,
                      waiting=contention_gap([first.record], [self.record]) if busy else None)

    @property
    def knobs(self) -> str:
        applied = [f"{k.name}={k.value}" for k in self.record.knobs if k.applied]
        skipped = [f"{k.name}={k.value} (not applied)" for k in self.record.knobs if not k.applied]
        return ", ".join(applied + skipped) or "(as written)"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _rate(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _finding_keys(findings: list[Finding]) -> dict[tuple, Finding]:
    return {(f.code, f.location.path if f.location else None, f.location.line if f.location else None): f
            for f in findings}


def _label(f: Finding) -> str:
    where = f" at {f.location.path}:{f.location.line}" if f.location else ""
    return f"{f.code} {f.slug}{where}"


def compare_runs(runs: list[ComparedRun]) -> Report:
    report = Report(source="compare", tool_version=__version__)
    first = runs[0]
    scripts = sorted({r.record.run.script for r in runs})
    rows, split_rows = [], []
    for run in runs:
        s = run.report.summary
        vs_first = "baseline" if run is first else _vs(first, run)
        rows.append([run.name, run.knobs, _rate(run.speed.steps_per_s if run.speed else None),
                     _rate(run.speed.samples_per_s if run.speed else None), _ms(s.step_time_s), vs_first])
        split = s.split
        split_rows.append([run.name, _ms(split.data_wait_s), _ms(split.forward_and_other_s), _ms(split.backward_s),
                           _ms(split.optimizer_s), _ms(split.eval_s), _ms(split.checkpoint_s),
                           _pct(s.gpu_util_mean), _watts(s.power_mean_w),
                           format_bytes(s.peak_memory_bytes) if s.peak_memory_bytes else None])
    title = "Before / after" if len(scripts) == 1 else f"Before / after: DIFFERENT SCRIPTS ({', '.join(scripts)})"
    report.tables.append(Table(
        title=title, columns=["run", "knobs", "steps/s", "samples/s", "step ms", f"vs {first.name}"],
        rows=rows,
        caption=("Measured steps only (warmup and sampled steps excluded). A ratio whose distance from 1 is "
                 "inside the 95 % band from each run's own window-to-window noise is shown as no measurable change."),
    ))
    report.tables.append(_without_empty_columns(Table(
        title="Step time split (ms per step)",
        columns=["run", "data wait", "forward + other", "backward", "optimizer", "eval", "checkpoint",
                 "GPU util", "GPU power", "peak GPU memory"],
        rows=split_rows,
        caption="Host-side time per measured step; GPU columns appear when a run measured them (CUDA + NVML).",
    )))
    numerics = _numerics(first, runs[1:])
    if numerics is not None:
        report.tables.append(numerics)
    report.tables.extend(_findings_delta(first, runs[1:]))
    report.notes.extend(_warnings(runs))
    report.warnings.extend(_busy_warnings(runs))
    report.figures = Figures(comparison=run_bars(runs))
    return report


def run_bars(runs: list[ComparedRun]) -> list[RunBar]:
    """Each run's throughput with its own 95 % band, for the before/after chart. samples/s
    when every run counted samples (a batch-size change makes steps incomparable)."""
    measured = [r for r in runs if r.speed is not None]
    if not measured or runs[0].speed is None:
        return []
    by_samples = all(r.speed.samples_per_s for r in measured)
    bars = []
    for run in measured:
        speed = run.speed
        value = speed.samples_per_s if by_samples else speed.steps_per_s
        half = Z_95 * speed.relative_sem * value if speed.relative_sem is not None else None
        verdict = run.against(runs[0]) if run is not runs[0] else None
        bars.append(RunBar(
            name=run.name, measure="samples/s" if by_samples else "steps/s", value=round(value, 3),
            low=None if half is None else round(max(0.0, value - half), 3),
            high=None if half is None else round(value + half, 3),
            verdict=verdict.describe() if verdict else "baseline",
            significant=bool(verdict and verdict.significant),
            ratio=round(verdict.ratio, 4) if verdict else None,
            noise=None if verdict is None or verdict.noise is None else round(verdict.noise, 4),
            step_time_s=run.report.summary.step_time_s, split=run.report.summary.split,
        ))
    return bars


def _without_empty_columns(table: Table) -> Table:
    keep = [i for i in range(len(table.columns)) if any(row[i] is not None for row in table.rows)]
    table.columns = [table.columns[i] for i in keep]
    table.rows = [[row[i] for i in keep] for row in table.rows]
    return table


def _vs(first: ComparedRun, run: ComparedRun) -> str:
    if first.speed is None or run.speed is None:
        return "no measured steps to compare"
    busy = first.busy or run.busy
    return run.against(first).describe() + (" (a busy machine: wider band)" if busy else "")


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{value:.0f} %"


def _watts(value: float | None) -> str | None:
    return None if value is None else f"{value:.0f} W"


def _numerics(first: ComparedRun, others: list[ComparedRun]) -> Table | None:
    """Each run's losses against the first's (compare/numerics.py), when the runs kept them."""
    from torchdoctor.compare.numerics import judge, knobs_of

    if first.record.losses is None or not any(r.record.losses for r in others):
        return None
    base_knobs = knobs_of(first.record)
    rows = []
    for run in others:
        changed = {k: v for k, v in knobs_of(run.record).items() if base_knobs.get(k) != v}
        v = judge(first.record.losses, run.record.losses, changed)
        rows.append([run.name, ", ".join(f"{k}={x}" for k, x in changed.items()) or "(as written)", v.status,
                     v.compared, v.tolerance or "—", v.text])
    return Table(title=f"Numerics vs {first.name}", columns=["run", "knobs changed", "losses", "compared", "must be",
                                                              "detail"], rows=rows,
                 caption=("The values each script passed to backward(), step by step. Knobs that only move work must "
                          "keep them bit-identical; AMP, TF32, compile and threads within a stated tolerance; batch "
                          "size and ranks are compared by the level of the losses. Runs of an unseeded script differ "
                          "anyway: `tune` measures that floor with its repeated baseline."))


def _findings_delta(first: ComparedRun, others: list[ComparedRun]) -> list[Table]:
    base = _finding_keys(first.report.findings)
    rows = []
    for run in others:
        mine = _finding_keys(run.report.findings)
        gone = [_label(base[k]) for k in base if k not in mine]
        new = [_label(mine[k]) for k in mine if k not in base]
        rows.append([run.name, "; ".join(gone) or "-", "; ".join(new) or "-"])
    if not rows:
        return []
    return [Table(title=f"Findings vs {first.name}", columns=["run", "gone", "new"], rows=rows,
                  caption="By rule code and source line.")]


def _warnings(runs: list[ComparedRun]) -> list[str]:
    notes = []
    scripts = {(r.record.run.script, tuple(r.record.run.argv)) for r in runs}
    if len({s for s, _ in scripts}) > 1:
        notes.append("These runs are of different scripts: "
                     + ", ".join(sorted({s for s, _ in scripts})) + ". Compared anyway; read ratios with care.")
    elif len(scripts) > 1:
        notes.append("These runs passed different arguments to the script; compared anyway.")
    devices = {r.report.summary.device for r in runs}
    if len(devices) > 1:
        notes.append(f"These runs used different devices ({', '.join(sorted(devices))}).")
    for r in runs:
        if r.speed is not None and r.speed.relative_sem is None:
            notes.append(f"{r.name}: too few measured steps to measure noise; only changes over 10 % count.")
    return notes


def _busy_warnings(runs: list[ComparedRun]) -> list[str]:
    """One warning for all the runs measured on a busy machine, with each one's numbers."""
    busy = [r for r in runs if r.busy]
    if len(busy) == 1:
        return [f"{busy[0].name}: {busy[0].report.summary.machine_busy}"]
    if not busy:
        return []
    waited = [f"{r.name} {r.record.contention.runqueue_share:.0%}" for r in busy
              if r.record.contention is not None and r.record.contention.runqueue_share is not None]
    loads = [max(x for x in (r.record.contention.load_start, r.record.contention.load_end) if x is not None)
             for r in busy if r.record.contention is not None
             and (r.record.contention.load_start is not None or r.record.contention.load_end is not None)]
    cpus = next((r.record.contention.cpus for r in busy if r.record.contention and r.record.contention.cpus), None)
    facts = []
    if waited:
        facts.append("the training thread waited for a CPU: " + ", ".join(waited) + " of the measured time")
    if loads:
        facts.append(f"load average up to {max(loads):.1f}" + (f" on {cpus} CPUs" if cpus else ""))
    return [f"Busy machine in {len(busy)} of {len(runs)} runs (" + "; ".join(facts) + "): step times and every "
            "ratio below are less reliable; each band is at least 10 % and reaches to what the runs' measured CPU "
            "waiting alone explains. Re-run on a quieter machine to confirm."]


def load_runs(paths: list[Path]) -> list[ComparedRun]:
    from torchdoctor.pipeline import load_record

    names = [p.name or str(p) for p in paths]
    if len(set(names)) < len(names):  # two runs/ dirs of the same name: show the full paths
        names = [str(p) for p in paths]
    return [ComparedRun.of(name, load_record(path)) for name, path in zip(names, paths)]


# ---- the CI gate and the projection -------------------------------------------------------
@dataclass
class GateResult:
    run: str
    passed: bool
    text: str  # one line: the verdict and the numbers it rests on


def ci_gate(runs: list[ComparedRun], slower_pct: float | None = None,
            faster_pct: float | None = None) -> list[GateResult]:
    """`--fail-if-slower PCT`: a later run fails when it is slower than the first by more than
    PCT beyond the measured noise band; inside the band it passes (said as inconclusive when the
    point alone is past PCT). `--fail-if-not-faster PCT`: it passes only when faster by more
    than PCT beyond the band."""
    first, results = runs[0], []
    for run in runs[1:]:
        if first.speed is None or run.speed is None:
            results.append(GateResult(run.name, False, f"{run.name}: no measured steps to compare: fails the gate"))
            continue
        moved = run.against(first)
        pct = (moved.ratio - 1) * 100
        words = f"{moved.ratio:.2f}x {moved.measure} of {first.name} ({_band(moved)})"
        if slower_pct is not None:
            beyond = moved.significant and moved.ratio < 1 - slower_pct / 100
            if beyond:
                results.append(GateResult(run.name, False, f"{run.name}: FAIL, {-pct:.1f} % slower: {words}, beyond the "
                                                           f"{slower_pct:g} % allowed and the noise"))
            elif moved.ratio < 1 - slower_pct / 100:
                results.append(GateResult(run.name, True, f"{run.name}: pass (inconclusive), {-pct:.1f} % slower but "
                                                          f"inside the noise band: {words}; more --steps narrow it"))
            else:
                results.append(GateResult(run.name, True, f"{run.name}: pass, {words}: not slower by more than "
                                                          f"{slower_pct:g} %"))
        if faster_pct is not None:
            faster = moved.significant and moved.ratio > 1 + faster_pct / 100
            results.append(GateResult(run.name, faster,
                                      f"{run.name}: {'pass' if faster else 'FAIL'}, {words}: "
                                      + (f"faster by more than {faster_pct:g} % beyond the noise" if faster else
                                         f"not shown faster by more than {faster_pct:g} % beyond the noise")))
    return results


def _band(moved: Change) -> str:
    band = f"±{moved.noise:.1%}" if moved.noise is not None else "noise unknown: too few steps, 10 % assumed"
    if moved.waiting is not None and abs(moved.waiting - 1) >= 0.01:
        band += f"; CPU waiting alone explains {moved.waiting:.2f}x"
    return band


def gate_table(results: list[GateResult], slower_pct: float | None, faster_pct: float | None) -> Table:
    asked = " and ".join(x for x in (f"--fail-if-slower {slower_pct:g}" if slower_pct is not None else "",
                                     f"--fail-if-not-faster {faster_pct:g}" if faster_pct is not None else "") if x)
    return Table(title="CI gate", columns=["run", "verdict", "why"],
                 rows=[[r.run, "pass" if r.passed else "FAIL", r.text.split(": ", 1)[1]] for r in results],
                 caption=(f"{asked}: each run against the first; a change inside the 95 % noise band of the two "
                          "runs' own window-to-window spread (10 % at least on a busy machine) never fails the gate "
                          "(--fail-if-slower) and never passes it (--fail-if-not-faster). Exit code 1 when a run "
                          "fails."))


def projection_table(runs: list[ComparedRun], hours: float, price: float | None = None) -> Table:
    """Each measured change as hours (and cost) saved on a training run of `hours` at the first
    run's speed, with the band from the noise: hours × (1 - 1/ratio) at the band's two ends."""
    first = runs[0]
    devices = max(1, len(first.record.ranks) or 1)
    unit = "GPU-hours" if first.record.environment.cuda_used else "device-hours (CPU)"
    rows = []
    for run in runs[1:]:
        if first.speed is None or run.speed is None:
            rows.append([run.name, "not measured", None, None] + ([None] if price is not None else []))
            continue
        moved = run.against(first)
        band = moved.noise if moved.noise is not None else 0.10
        point = hours * (1 - 1 / moved.ratio)
        high = hours * (1 - 1 / (moved.ratio + band))
        low = hours * (1 - 1 / (moved.ratio - band)) if moved.ratio - band > 0 else None
        if not moved.significant:  # inside the noise (or what CPU waiting explains): the band holds 0
            high, low = max(high, 0.0), None if low is None else min(low, 0.0)
        saved = (f"{point:.1f} h" + (" (slower: lost)" if point < 0 else "")) if moved.significant else \
            "no measurable change"
        spread = f"{low:.1f} to {high:.1f} h" if low is not None else f"at most {high:.1f} h (the band is that wide)"
        cost = None
        if price is not None and moved.significant:
            cost = f"{point * devices * price:,.2f}" + (f" ({low * devices * price:,.2f} to {high * devices * price:,.2f})"
                                                        if low is not None else "")
        rows.append([run.name, f"{hours / moved.ratio:.1f} h", saved, spread] + ([cost or "—"] if price is not None
                                                                                  else []))
    columns = ["run", f"a {hours:g} h run takes", "saved", "saved, 95 % band"]
    if price is not None:
        columns.append(f"cost saved at {price:g}/h per device ({devices} device{'s' if devices != 1 else ''})")
    return Table(title=f"Projection: a {hours:g}-hour run", columns=columns, rows=rows,
                 caption=(f"A run that takes {hours:g} h at {first.name}'s measured speed, at each run's speed instead "
                          f"(same work): saved = {hours:g} h × (1 − 1/ratio), negative when slower; the band is the "
                          f"ratio's 95 % noise band. {unit[0].upper() + unit[1:]} = hours × {devices} rank(s). A change inside "
                          "the noise saves nothing measurable."))
