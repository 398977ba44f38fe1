"""The pipeline, in one readable place: measure -> evidence -> diagnose -> write.

- measure: `run.runner` (a script), `run.inprocess` (a `watch()` block, a framework's fit) or
  `run.ranks` (one process per rank) fill a RunRecord;
- evidence: `diagnosis.evidence` adds what `lint` says about the executed files and the
  analysis of the profiler window's trace to the record;
- diagnose: `diagnosis.run.analyze` turns the record into a ranked Report;
- write: record.json, report.json, report.md and report.html in the run directory.

`report RUN_DIR` re-enters at "diagnose" from the saved record, without the script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from torchdoctor.errors import InputError
from torchdoctor.model.findings import Report
from torchdoctor.model.layout import HTML_FILE, MARKDOWN_FILE, RECORD_FILE, REPORT_FILE, recorded_source_hashes
from torchdoctor.model.record import ProbeNote, RunRecord
from torchdoctor.model.serialize import SchemaError
from torchdoctor.report import render


def write_run(run_dir: Path, record: RunRecord, report: Report) -> None:
    record.save(run_dir / RECORD_FILE)
    report.save(run_dir / REPORT_FILE)
    (run_dir / MARKDOWN_FILE).write_text(render(report, "md"), encoding="utf-8")
    (run_dir / HTML_FILE).write_text(render(report, "html"), encoding="utf-8")


def complete_run(run_dir: Path, record: RunRecord) -> Report:
    """Everything after the measured code, whichever way it ran (`torchdoctor run`, `watch()`,
    a framework callback): the lint and trace evidence, the diagnosis, the run directory."""
    from torchdoctor.diagnosis.evidence import add_evidence
    from torchdoctor.diagnosis.run import analyze

    # First, before anything slow (lint of the executed files, the trace's analysis): a run
    # killed after a scheduler's SIGTERM grace still has its measurements, and `torchdoctor
    # report` makes the rest from them.
    record.save(run_dir / RECORD_FILE)
    add_evidence(record, run_dir)
    report = analyze(record)
    write_run(run_dir, record, report)
    return report


def finish_in_process(run, status: str = "completed", exit_code: int = 0, error: str | None = None,
                      notes: Sequence[ProbeNote] = ()) -> Report | None:
    """How code measured in this process ended (a `watch()` block, a framework's fit), then the
    rest of the pipeline where this process writes. `run` is a `run.inprocess.InProcessRun`."""
    if run.finished:
        return run.report
    record = run.finish(status, exit_code, error, notes=notes)
    if record is not None:
        run.report = complete_run(run.run_dir, record)
    run.release_signals()  # a SIGTERM that stopped the measuring ends the process now (143)
    return run.report


def diagnose_run_dir(run_dir: Path) -> Report:
    """The report of a run directory, re-made from its record; the source excerpts compare
    today's files with the hashes the run's own report.json recorded."""
    from torchdoctor.diagnosis.run import analyze

    record = load_record(run_dir)
    report = analyze(record, recorded_source_hashes(run_dir))
    if record.follow is not None and record.follow.live:
        report.notes.insert(0, _live_note(run_dir, record.follow.every_s))
    return report


def _live_note(run_dir: Path, every_s: float) -> str:
    """A followed run still writing its directory, or one that ended without its record."""
    import time

    from torchdoctor.model.layout import LIVE_FILE

    files = [run_dir / LIVE_FILE] if (run_dir / LIVE_FILE).exists() else sorted(run_dir.glob(f"rank-*/{LIVE_FILE}"))
    try:  # a followed multi-rank run: the ranks' live.json, the oldest said
        age = max(time.time() - path.stat().st_mtime for path in files) if files else None
    except OSError:
        age = None
    if age is None:
        return "live.json could not be read again"
    name = "live.json" if len(files) == 1 and files[0].parent == run_dir else "a rank's live.json"
    if age > max(3 * every_s, 60.0):
        return (f"{name} was last written {age:.0f} s ago and there is no record.json: the run ended without "
                "writing its record (SIGKILL, the machine's out-of-memory killer?); this is what it wrote before")
    return f"{name} was written {age:.0f} s ago (every {every_s:g} s while the run goes)"


def load_record(run_dir: Path) -> RunRecord:
    if not run_dir.is_dir():
        raise InputError(f"{run_dir} is not a run directory; pass the folder `torchdoctor run` printed")
    from torchdoctor.diagnosis.ranks import has_rank_records

    if has_rank_records(run_dir):  # a multi-rank run (ranks copied from other nodes, followed ranks still running)
        from torchdoctor.diagnosis.ranks import merge_run_dir

        return merge_run_dir(run_dir)
    from torchdoctor.model.layout import LIVE_FILE

    path = run_dir / RECORD_FILE
    if not path.exists() and (run_dir / LIVE_FILE).exists():  # `run --follow` while it runs
        path = run_dir / LIVE_FILE
    try:
        return RunRecord.load(path)
    except SchemaError as exc:
        raise InputError(f"cannot read the run record: {exc}; re-run `torchdoctor run` to make a new one") from None
