"""The run directory's layout (DESIGN.md §3; for users, README "What a run directory holds", which
lists every file below and a rank's rank-K/ files with their schema): its file names, a fresh
directory per run, and the hashes of the sources its report quoted. Plain file handling: what runs in a run
directory is in `torchdoctor.pipeline`."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from torchdoctor.errors import UsageError

RECORD_FILE = "record.json"
REPORT_FILE = "report.json"
MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
TIMELINE_FILE = "timeline.jsonl"  # `run --follow`: one line per step (older ones thinned), appended while it runs
CHANGES_FILE = "changes.jsonl"  # `run --follow`: each change as it was found (the launcher of a followed job reads it)
LIVE_FILE = "live.json"  # `run --follow`: the record so far, rewritten while it runs (record.json at the end)
BLACKBOX_FILE = "blackbox.json"  # `run --follow`: the black box, written the moment it is kept (crash, signal, stall)
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


def recorded_source_hashes(run_dir: Path) -> dict[str, str]:
    """path → sha256 of the source excerpts in RUN_DIR/report.json; empty when there are none.

    Read leniently (only the strings it needs) but bounded like every file of a run directory:
    a report.json from an older torchdoctor, a damaged or a hostile one only means no excerpt
    can be shown (diagnosis/sources.py shows none whose hash is not recorded).
    """
    from torchdoctor.model.serialize import SchemaError, decode_untrusted

    try:
        doc = decode_untrusted(run_dir / REPORT_FILE)
    except SchemaError:
        return {}
    sources = doc.get("sources") if isinstance(doc, dict) else None
    return {s["path"]: s["sha256"] for s in (sources if isinstance(sources, list) else []) if isinstance(s, dict)
            and isinstance(s.get("path"), str) and isinstance(s.get("sha256"), str)}
