"""The run directory (DESIGN.md §3): record.json, report.json, report.md."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from torchdoctor.errors import InputError, UsageError
from torchdoctor.findings import Report
from torchdoctor.record import RunRecord
from torchdoctor.report import render
from torchdoctor.serialize import SchemaError

RECORD_FILE = "record.json"
REPORT_FILE = "report.json"
MARKDOWN_FILE = "report.md"
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


def load_record(run_dir: Path) -> RunRecord:
    if not run_dir.is_dir():
        raise InputError(f"{run_dir} is not a run directory; pass the folder `torchdoctor run` printed")
    try:
        return RunRecord.load(run_dir / RECORD_FILE)
    except SchemaError as exc:
        raise InputError(f"cannot read the run record: {exc}; re-run `torchdoctor run` to make a new one") from None
