"""The profiler window's trace in a run's report: trace findings join the runtime ones.

`run` records a short torch.profiler window (always on CUDA, with `--trace` on CPU) and the
runner stores its analysis in the record. Here the trace's findings meet the rules':

- a trace finding for the same cause in the same function as a runtime finding confirms it:
  the runtime finding keeps its exact line (the op sampler saw the call itself; trace frames
  only name the enclosing function) and gains the trace's evidence and, where the runtime
  could not size the cause (GPU hazards), the trace's Amdahl estimate from GPU idle time;
- any other trace finding is added as it is (launch-bound gaps, fp32 tensor-core work, slow
  collectives have no runtime rule), and its code leaves the "not measured" list;
- the trace's tables (GPU time per step, idle causes, copies, kernels) follow the run's.
"""

from __future__ import annotations

import os

from torchdoctor.model.paths import recorded_path, typed_path
from torchdoctor.model.findings import Finding, Report, Severity
from torchdoctor.model.location import Location
from torchdoctor.model.record import RunRecord

TABLE_PREFIX = "Profiler trace: "


def merge_trace_findings(report: Report, record: RunRecord) -> None:
    if record.trace is None:
        return
    from torchdoctor.diagnosis.trace import trace_report  # the trace rules load only for runs that have one

    traced = trace_report(record.trace)
    steps = ", ".join(str(r.steps) for r in record.trace.ranks) or "0"
    for found in traced.findings:
        found.evidence["source"] = "profiler trace"
        if found.location is not None:
            found.location = _as_typed(found.location, record)
        mine = _same_cause(report.findings, found, record.run.cwd)
        if mine is None:
            found.message = f"From the profiler trace ({steps} steps): {found.message}"
            report.findings.append(found)
        else:
            _confirm(mine, found)
    measured = {f.code for f in traced.findings}
    report.not_measured = [n for n in report.not_measured if n.code not in measured]
    for table in traced.tables:
        table.title = TABLE_PREFIX + table.title
        report.tables.append(table)
    report.notes += [f"profiler trace: {note}" for note in traced.notes]


def _confirm(mine: Finding, found: Finding) -> None:
    mine.evidence["trace"] = {k: v for k, v in found.evidence.items() if k != "source"}
    mine.message += f" The profiler trace shows it too: {found.message}"
    if mine.estimated_speedup is None and (found.estimated_speedup is not None or found.severity == Severity.LOW):
        # the runtime could not size it (a GPU hazard); the trace measured it, large or small: a
        # sync that cost 1% of the step here ranks low, not at the hazard's default medium
        mine.estimated_speedup = found.estimated_speedup
        mine.estimate_basis = f"from the profiler trace: {found.estimate_basis}"
        mine.severity = found.severity


def _same_cause(findings: list[Finding], found: Finding, cwd: str) -> Finding | None:
    """The runtime finding of the same code in the same function (trace frames name the
    function, not the line), or the only one of that code when the trace has no frame."""
    same_code = [f for f in findings if f.code == found.code and f.evidence.get("source") != "profiler trace"]
    if found.location is None:
        return same_code[0] if len(same_code) == 1 else None
    where = recorded_path(found.location.path, cwd), _function(found.location.function)
    for mine in same_code:
        if mine.location is not None and (recorded_path(mine.location.path, cwd),
                                          _function(mine.location.function)) == where:
            return mine
    return None


def _function(name: str) -> str:
    return name.rsplit(".", 1)[-1]  # runtime names are qualified (Trainer.fit), trace frames not (fit)


def _as_typed(location: Location, record: RunRecord) -> Location:
    """The file a trace frame names, as the user would type it (relative to the working
    directory when inside it). Kineto names frames by file name only, so the name is looked
    up among the user files the run executed."""
    cwd = record.run.cwd
    path = recorded_path(location.path, cwd)
    if not os.path.isabs(location.path):
        tail = os.sep + os.path.normpath(location.path)
        matches = [f for f in record.source_files if f.endswith(tail)]
        if len(matches) == 1:
            path = matches[0]
    return Location(typed_path(path, cwd), location.line, location.function)
