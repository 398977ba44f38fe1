"""The source lines around each finding's location, read when the report is made.

Only files the run executed (`RunRecord.source_files`, Python files) are read: a record
from someone else cannot make a report quote an arbitrary file of the reader's machine. The
file is read as text and never executed. A file that vanished or changed since the run is
said so: exactly, by the hash the run's own report recorded, or else because the file's
modification time is later than the run's start.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from collections.abc import Mapping

from torchdoctor.model.paths import recorded_path
from torchdoctor.model.units import MIB
from torchdoctor.model.figures import SourceExcerpt
from torchdoctor.model.findings import Finding
from torchdoctor.model.record import RunRecord

CONTEXT_LINES = 3  # either side of the finding's line
MAX_EXCERPTS = 100  # the first ranked findings' locations; further ones are rarely read
MAX_FILE_BYTES = 4 * MIB  # a training module larger than this is generated, not written
MAX_LINE_CHARS = 300
# `started_at` is stored to the second: a file written in the second the run started is not "later"
CLOCK_SLACK_S = 1.0


def source_excerpts(findings: list[Finding], record: RunRecord,
                    recorded: Mapping[str, str] | None = None) -> list[SourceExcerpt]:
    """One excerpt per distinct (path, line) of `findings`, in their order.

    `recorded`: path → sha256 from the report the run wrote, when re-rendering a run directory.
    """
    own = {os.path.normpath(p) for p in record.source_files}
    started = _timestamp(record.run.started_at)
    seen: set[tuple[str, int]] = set()
    excerpts = []
    for finding in findings:
        loc = finding.location
        if loc is None or loc.line < 1 or (loc.path, loc.line) in seen:
            continue
        seen.add((loc.path, loc.line))
        path = recorded_path(loc.path, record.run.cwd)
        if path not in own or not path.endswith(".py"):
            excerpts.append(SourceExcerpt(loc.path, loc.line, status="not-run-file",
                                          note="source not shown: not one of the files this run executed"))
        else:
            excerpts.append(_excerpt(loc.path, loc.line, path, started, (recorded or {}).get(loc.path)))
        if len(excerpts) == MAX_EXCERPTS:
            break
    return excerpts


def _excerpt(shown: str, line: int, path: str, started: float | None, recorded_sha: str | None) -> SourceExcerpt:
    excerpt = SourceExcerpt(shown, line)
    try:
        stat = os.stat(path)
        if stat.st_size > MAX_FILE_BYTES:
            return _failed(excerpt, "unreadable", f"source not shown: the file is {stat.st_size:,} bytes")
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return _failed(excerpt, "missing", "the file no longer exists: it was deleted or moved since the run")
    except OSError as exc:
        return _failed(excerpt, "unreadable", f"source not shown: {exc.strerror or exc}")
    excerpt.sha256 = hashlib.sha256(data).hexdigest()
    lines = data.decode("utf-8", errors="replace").splitlines()
    if recorded_sha is not None and recorded_sha != excerpt.sha256:
        excerpt.status, excerpt.note = "changed", "the file changed since the run: these are its lines now"
    elif recorded_sha is None and started is not None and stat.st_mtime > started + CLOCK_SLACK_S:
        modified = _dt.datetime.fromtimestamp(stat.st_mtime, _dt.timezone.utc).isoformat(timespec="seconds")
        excerpt.status = "changed"
        excerpt.note = f"the file was modified after the run started ({modified}): these are its lines now"
    if line > len(lines):
        return _failed(excerpt, "changed",
                       f"line {line} is past the end of the file ({len(lines)} line{'' if len(lines) == 1 else 's'}): "
                       "it changed since the run")
    excerpt.first_line = max(1, line - CONTEXT_LINES)
    excerpt.lines = [text[:MAX_LINE_CHARS] for text in lines[excerpt.first_line - 1:line + CONTEXT_LINES]]
    return excerpt


def _failed(excerpt: SourceExcerpt, status: str, note: str) -> SourceExcerpt:
    excerpt.status, excerpt.note = status, note
    return excerpt


def _timestamp(iso: str) -> float | None:
    try:
        return _dt.datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return None
