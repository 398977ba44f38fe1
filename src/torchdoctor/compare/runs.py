"""`torchdoctor compare`: a before/after table of run directories, in the style of the
reference reports ("2.2 it/s → 4.9 it/s, 2.2x"), with changes inside the noise shown as such."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchdoctor.version import __version__
from torchdoctor.diagnosis.run import analyze
from torchdoctor.rules.noise import Z_95, Throughput, change, throughput
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
        verdict = change(runs[0].speed, speed, busy=runs[0].busy or run.busy) if run is not runs[0] else None
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
    return change(first.speed, run.speed, busy=busy).describe() + (" (a busy machine: wider band)" if busy else "")


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{value:.0f} %"


def _watts(value: float | None) -> str | None:
    return None if value is None else f"{value:.0f} W"


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
    return [f"{r.name}: {r.report.summary.machine_busy}" for r in runs if r.busy]


def load_runs(paths: list[Path]) -> list[ComparedRun]:
    from torchdoctor.pipeline import load_record

    names = [p.name or str(p) for p in paths]
    if len(set(names)) < len(names):  # two runs/ dirs of the same name: show the full paths
        names = [str(p) for p in paths]
    return [ComparedRun.of(name, load_record(path)) for name, path in zip(names, paths)]
