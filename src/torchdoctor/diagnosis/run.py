"""RunRecord → Report: the run summary, every rule's findings ranked, the series to draw
and the source lines around each finding."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from torchdoctor.errors import EXIT_TERMINATED
from torchdoctor.version import __version__
from torchdoctor.diagnosis.doctor_cost import doctor_cost_line, doctor_cost_table
from torchdoctor.diagnosis.environment import environment_table
from torchdoctor.diagnosis.figures import run_figures
from torchdoctor.diagnosis.follow import add_follow, ended_line, first_stretch
from torchdoctor.diagnosis.library_calls import library_sync_note
from torchdoctor.diagnosis.lint_evidence import link_static_findings
from torchdoctor.diagnosis.memory import memory_tables
from torchdoctor.diagnosis.rank_tables import rank_notes, rank_tables
from torchdoctor.diagnosis.reliability import apply_spread, busy_machine
from torchdoctor.diagnosis.sources import source_excerpts
from torchdoctor.diagnosis.steps import no_step_explanation, step_definition_note
from torchdoctor.diagnosis.trace_evidence import merge_trace_findings
from torchdoctor.diagnosis.stacks import stack_tables
from torchdoctor.diagnosis.wall_time import wall_time_table
from torchdoctor.model.findings import NotMeasured, Report, RunSummary, Severity, Table, TimeSplit
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.registry import RUNTIME_RULES


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(record: RunRecord, facts: RunFacts) -> RunSummary:
    durations = [s.duration_s for s in facts.measured]
    samples = [s.samples for s in facts.measured if s.samples is not None]
    total = sum(durations)
    mean = facts.mean
    split = TimeSplit(
        data_wait_s=mean("data_wait_s"),
        backward_s=mean("backward_s"),
        optimizer_s=mean("optimizer_s") + mean("zero_grad_s"),
        eval_s=mean("eval_s"),
        checkpoint_s=mean("checkpoint_s"),
        logging_s=mean("logging_s"),
    )
    accounted = (split.data_wait_s + split.backward_s + split.optimizer_s + split.eval_s
                 + split.checkpoint_s + split.logging_s)
    split.forward_and_other_s = max(0.0, (facts.step_s or 0.0) - accounted)
    summary = RunSummary(
        script=record.run.script,
        status=record.run.status,
        wall_s=record.run.wall_s,
        steps_total=len(record.steps),
        steps_measured=len(durations),
        step_time_s=facts.step_s,
        step_time_p50_s=statistics.median(durations) if durations else None,
        step_time_p90_s=_percentile(durations, 0.9),
        steps_per_s=len(durations) / total if total else None,
        samples_per_s=sum(samples) / total if total and len(samples) == len(durations) else None,
        split=split,
        device=record.environment.device_name or ("cuda" if facts.cuda_used else "cpu"),
    )
    if record.nvml:
        summary.gpu_util_mean = record.nvml.mean("gpu_util")
        summary.power_mean_w = record.nvml.mean("power_w")
        summary.power_limit_w = record.nvml.mean("power_limit_w")
    if record.cuda_memory:
        summary.peak_memory_bytes = record.cuda_memory.peak_allocated_bytes
    summary.gpu_metrics_missing = _gpu_metrics_missing(record, facts)
    summary.ranks = max(1, len(record.ranks))
    summary.ended = how_it_ended(record)
    return summary


def how_it_ended(record: RunRecord) -> str | None:
    """One line on how a run ended that did not reach a limit or its own end: what a report
    says first for a crashed or stalled run, before any throughput."""
    run = record.run
    if run.status == "stalled":
        return run.ended_by or "the ranks stopped making progress"
    if run.status == "crashed":
        lines = [line.strip() for line in (run.error or "").splitlines() if line.strip()]
        first = lines[0] if lines and lines[0].startswith("rank ") and lines[0].endswith(
            ("failed first:", "failed after it:")) else ""
        last = lines[-1] if lines else "the script raised"
        return f"{first} {last}".strip()
    if run.status == "interrupted":
        return "stopped by SIGTERM" if run.exit_code == EXIT_TERMINATED else "interrupted (Ctrl-C)"
    if run.status == "exited" and run.exit_code:
        return f"the script exited with code {run.exit_code}"
    return None


def _gpu_metrics_missing(record: RunRecord, facts: RunFacts) -> str | None:
    if not facts.cuda_used:
        return "not measurable on CPU: this run used the CPU"
    if record.nvml is None or not record.nvml.available:
        reason = record.nvml.reason if record.nvml else "the NVML sampler did not run"
        return f"NVML not available: {reason}"
    if not record.nvml.samples:
        return "NVML returned no samples during the measured steps"
    return None


def analyze(record: RunRecord, recorded_sources: Mapping[str, str] | None = None) -> Report:
    """The run's Report. `recorded_sources` (path → sha256, from the report the run itself
    wrote) lets a re-render tell a source file that changed since the run."""
    facts = RunFacts.of(record)
    report = Report(source="run", tool_version=__version__)
    report.summary = summarize(record, facts)
    report.environment = environment_table(record, record.trace)
    # a followed run with changes: the rules judge the steps before the first one; each later
    # stretch is diagnosed on its own (diagnosis/follow.py)
    judged = first_stretch(record) if record.follow is not None else record
    judged_facts = facts if judged is record else RunFacts.of(judged)
    judged_facts.earlier = report.findings
    for rule_cls in RUNTIME_RULES:
        rule = rule_cls()
        reason = rule.not_measurable(judged, judged_facts)
        if reason is not None:
            report.not_measured.append(NotMeasured(rule.code, rule.slug, reason))
            continue
        try:
            report.findings.extend(rule.check(judged, judged_facts))
        except Exception as exc:  # one broken rule must not hide the others' findings
            report.notes.append(f"rule {rule.code} failed: {type(exc).__name__}: {exc}")
    apply_spread(report.findings, judged_facts)
    if record.follow is not None:
        add_follow(report, record, analyze)
        report.summary.ended = ended_line(record) or report.summary.ended
    wall = wall_time_table(record)
    if wall is not None:
        report.tables.append(wall)
    report.summary.doctor_cost = doctor_cost_line(record, report.summary.step_time_p50_s)
    cost = doctor_cost_table(record)
    if cost is not None:
        report.tables.append(cost)
    report.tables.extend(_knob_tables(record))
    report.tables.extend(memory_tables(record))
    report.tables.extend(rank_tables(record, facts.job))
    report.tables.extend(stack_tables(record))
    merge_trace_findings(report, record)
    link_static_findings(report, record)
    report.summary.machine_busy = busy_machine(record)
    if report.summary.machine_busy:
        report.warnings.append(report.summary.machine_busy)
    report.notes.extend(_run_notes(record, facts))
    report.notes.extend(rank_notes(record))
    said = " ".join(report.notes)
    report.notes.extend(f"{n.probe}: {n.message}" for n in record.probe_notes if n.message not in said)
    report.ranked()
    report.figures = run_figures(record, report.summary.gpu_metrics_missing)
    report.sources = source_excerpts(report.findings, record, recorded_sources)
    return report


LIVE_TOP = 3  # the live panel's current top findings


def top_findings(record: RunRecord, count: int = LIVE_TOP) -> list[str]:
    """The live panel's current top findings (`run --follow` on a terminal), from the record so far: the
    report's own (code and title), ranked as `torchdoctor report DIR` ranks them on a live directory,
    information left out."""
    return [f"{f.code} {f.title}" for f in analyze(record).findings if f.severity is not Severity.INFO][:count]


def _knob_tables(record: RunRecord) -> list[Table]:
    tables = []
    if record.knobs:
        tables.append(Table(
            title="Knobs set for this run",
            columns=["knob", "value", "applied", "where / why not"],
            rows=[[k.name, k.value, "yes" if k.applied else "no", k.detail] for k in record.knobs],
            caption="Applied at run time by `--set`; the script itself was not edited.",
        ))
    lo = record.loader_only
    if lo is not None:
        rate = lo.batches / lo.seconds if lo.seconds > 0 else None
        samples = lo.samples / lo.seconds if lo.seconds > 0 and lo.samples is not None else None
        tables.append(Table(
            title="Training DataLoader alone",
            columns=["batches", "seconds", "batches/s", "samples/s"],
            rows=[[lo.batches, round(lo.seconds, 3), _round(rate), _round(samples)]],
            caption="The input pipeline's ceiling: the loader iterated without the model.",
        ))
    return tables


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _run_notes(record: RunRecord, facts: RunFacts) -> list[str]:
    notes = []
    run = record.run
    if run.status == "loader-only":
        notes.append("data=loader-only: the training DataLoader was iterated alone and the script stopped "
                     "before any training step; see the loader-only table.")
    elif not record.steps:
        notes.append(f"No training step to time: {no_step_explanation(record)}. "
                     "Data-loading and phase measurements are still shown.")
    elif not facts.measured:
        notes.append(f"Only {len(record.steps)} optimizer steps ran (warmup {run.warmup}); "
                     "none was measured. Lower --warmup or let the script run longer.")
    if run.status == "crashed":
        notes.append("The script raised; the measurements up to the failure are shown.")
    elif run.status == "interrupted":
        how = "stopped by SIGTERM" if run.exit_code == EXIT_TERMINATED else "interrupted (Ctrl-C)"
        notes.append(f"The run was {how}; the measurements so far are shown.")
    elif run.status == "time-limit":
        notes.append(f"The run reached --max-seconds {run.max_seconds:g} and was stopped.")
    elif run.status == "exited":
        notes.append(f"The script called sys.exit({run.exit_code}) after {len(record.steps)} steps.")
    if run.ended_by:
        notes.append(f"How the run ended: {run.ended_by}.")
    how = step_definition_note(record)
    if how:
        notes.append(how)
    inside_libraries = library_sync_note(record)
    if inside_libraries:
        notes.append(inside_libraries)
    if facts.sampled_steps:
        d = record.dispatch
        excluded = sum(1 for st in record.steps if st.sampled and not st.warmup)
        others = excluded - (d.sampled_steps if d is not None else 0)
        notes.append(
            f"{excluded} steps ran under a costly probe and are excluded from timings"
            + (f": {d.sampled_steps} under the op sampler" if d is not None and d.sampled_steps else "")
            + (f" (≈ {d.probe_cost_per_op_s * 1e6:.1f} µs per op)" if d is not None and d.probe_cost_per_op_s else "")
            + (f", {others} under the line sampler, backward timer or profiler" if others > 0 else "") + "."
        )
    return notes
