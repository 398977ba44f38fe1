"""Evidence added to a record once the script has ended: what `lint` says about the files
the run executed, and the analysis of the profiler window's trace.

Both are stored in the record, so `torchdoctor report RUN_DIR` needs neither the script nor
the trace again. Both are a bonus: a failure becomes a probe note and the run is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

from torchdoctor.record import ProbeNote, RunRecord, StaticFinding


def add_evidence(record: RunRecord, run_dir: Path) -> None:
    try:
        record.static_findings = lint_executed(record.source_files)
    except Exception as exc:  # the static cross-check is a bonus; never lose the run for it
        record.probe_notes.insert(0, ProbeNote("lint", f"could not lint the executed files: {type(exc).__name__}: {exc}"))
    if record.trace_file:
        try:
            from torchdoctor.trace import analyze_trace_files  # the parser loads only for runs that saved one

            record.trace = analyze_trace_files([run_dir / record.trace_file])
        except Exception as exc:  # the trace is a bonus; the file stays for `torchdoctor trace`
            record.probe_notes.append(ProbeNote(
                "profiler", f"could not analyse {record.trace_file}: {type(exc).__name__}: {exc}"))


def lint_executed(files: list[str]) -> list[StaticFinding]:
    from torchdoctor.lint.api import lint_files  # imported late: plain runs need no linter until here

    found = []
    for f in lint_files([Path(p) for p in files]):
        if f.location is None:
            continue
        path = f.location.path if os.path.isabs(f.location.path) else os.path.abspath(f.location.path)
        found.append(StaticFinding(f.code, f.slug, f.severity.value, path, f.location.line, f.message))
    return found
