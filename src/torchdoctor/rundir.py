"""The run directory (DESIGN.md §3): record.json, report.json, report.md, report.html."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from torchdoctor.errors import InputError, UsageError
from torchdoctor.findings import Report
from torchdoctor.record import RunRecord
from torchdoctor.report import render
from torchdoctor.serialize import SchemaError

RECORD_FILE = "record.json"
REPORT_FILE = "report.json"
MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
DEFAULT_PARENT = Path("torchdoctor-runs")


def safe_name(text: str) -> str:
    """A file-name-safe version of a label (a trial name, a script stem)."""
    return "".join(c if c.isalnum() or c in "-_=." else "-" for c in text).strip("-") or "run"


def _stem(target: str) -> str:
    stem = Path(target).stem if target.endswith(".py") else target.replace(".", "-")
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in stem) or "run"


def create_run_dir(out: Path | None, target: str, now: _dt.datetime | None = None,
                   parent: Path = DEFAULT_PARENT) -> Path:
    """Make a fresh run directory; never reuse one that has content."""
    if out is not None:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise UsageError(f"run directory {out} already exists and is not empty; pass a new --out or remove it")
        out.mkdir(parents=True, exist_ok=True)
        return out
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = parent / f"{stamp}-{_stem(target)}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    candidate.mkdir(parents=True)
    return candidate


def write_run(run_dir: Path, record: RunRecord, report: Report) -> None:
    record.save(run_dir / RECORD_FILE)
    report.save(run_dir / REPORT_FILE)
    (run_dir / MARKDOWN_FILE).write_text(render(report, "md"), encoding="utf-8")
    (run_dir / HTML_FILE).write_text(render(report, "html"), encoding="utf-8")


def complete_run(run_dir: Path, record: RunRecord) -> Report:
    """Everything after the measured code, whichever way it ran (`torchdoctor run`, `watch()`,
    a framework callback): the lint and trace evidence, the diagnosis, the run directory."""
    from torchdoctor.diagnose.run import analyze
    from torchdoctor.run.afterwards import add_evidence

    add_evidence(record, run_dir)
    report = analyze(record)
    write_run(run_dir, record, report)
    return report


def diagnose_run_dir(run_dir: Path) -> Report:
    """The report of a run directory, re-made from its record; the source excerpts compare
    today's files with the hashes the run's own report.json recorded."""
    from torchdoctor.diagnose.run import analyze

    return analyze(load_record(run_dir), recorded_source_hashes(run_dir))


def recorded_source_hashes(run_dir: Path) -> dict[str, str]:
    """path → sha256 of the source excerpts in RUN_DIR/report.json; empty when there are none.

    Read leniently (only the strings it needs): a report.json from an older torchdoctor, or a
    damaged one, only means the excerpts fall back to comparing file times.
    """
    try:
        doc = json.loads((run_dir / REPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    sources = doc.get("sources") if isinstance(doc, dict) else None
    return {s["path"]: s["sha256"] for s in (sources if isinstance(sources, list) else []) if isinstance(s, dict)
            and isinstance(s.get("path"), str) and isinstance(s.get("sha256"), str)}


def load_record(run_dir: Path) -> RunRecord:
    if not run_dir.is_dir():
        raise InputError(f"{run_dir} is not a run directory; pass the folder `torchdoctor run` printed")
    if any(run_dir.glob("rank-*/record.json")):  # a multi-rank run (ranks copied from other nodes included)
        from torchdoctor.diagnose.ranks import merge_run_dir

        return merge_run_dir(run_dir)
    try:
        return RunRecord.load(run_dir / RECORD_FILE)
    except SchemaError as exc:
        raise InputError(f"cannot read the run record: {exc}; re-run `torchdoctor run` to make a new one") from None
