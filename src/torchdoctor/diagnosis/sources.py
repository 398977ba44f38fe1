"""The source lines around each finding's location, read when the report is made.

A record is something users pass around, so a report never quotes a file the run did not
execute: a line is shown only from a Python file that the record lists as executed
(`RunRecord.source_files`); when a run directory is re-rendered (its record read from a file),
only from one under the run's recorded working directory (after following links) whose content
still has the sha256 the run's own report recorded. A record edited to name `~/.ssh/config` or
`/home/you/proj/settings.py` therefore quotes nothing: the reader would need the file's
content to forge its hash. Anything else is "source not available", with the reason. Files
are opened as plain files only (no FIFO, no device), bounded, read as text, never executed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from collections.abc import Mapping

from torchdoctor.errors import InputError
from torchdoctor.model.figures import SourceExcerpt
from torchdoctor.model.findings import Finding
from torchdoctor.model.paths import recorded_path
from torchdoctor.model.record import RunRecord
from torchdoctor.model.units import MIB
from torchdoctor.model.untrusted import read_untrusted

CONTEXT_LINES = 3  # either side of the finding's line
MAX_EXCERPTS = 100  # the first ranked findings' locations; further ones are rarely read
MAX_FILE_BYTES = 4 * MIB  # a training module larger than this is generated, not written
MAX_LINE_CHARS = 300
# `started_at` is stored to the second: a file written in the second the run started is not "later"
CLOCK_SLACK_S = 1.0
NOT_AVAILABLE = "source not available"


def source_excerpts(findings: list[Finding], record: RunRecord,
                    recorded: Mapping[str, str] | None = None) -> list[SourceExcerpt]:
    """One excerpt per distinct (path, line) of `findings`, in their order.

    `recorded`: path → sha256 from the report the run wrote, when re-rendering a run directory
    (a line is then shown only from a file whose content still has that hash); None in the run
    itself, whose record this process just made.
    """
    own = {os.path.normpath(p) for p in record.source_files if isinstance(p, str)}
    started = _timestamp(record.run.started_at)
    seen: set[tuple[str, int]] = set()
    excerpts = []
    for finding in findings:
        loc = finding.location
        if loc is None or loc.line < 1 or (loc.path, loc.line) in seen:
            continue
        seen.add((loc.path, loc.line))
        path = recorded_path(loc.path, record.run.cwd)
        why = _not_quotable(path, own, record.run.cwd if recorded is not None else None)
        if why:
            excerpts.append(SourceExcerpt(loc.path, loc.line, status="not-run-file", note=f"{NOT_AVAILABLE}: {why}"))
        else:
            expected = None if recorded is None else recorded.get(loc.path, "")
            excerpts.append(_excerpt(loc.path, loc.line, path, started, expected))
        if len(excerpts) == MAX_EXCERPTS:
            break
    return excerpts


def _not_quotable(path: str, own: set[str], cwd: str | None) -> str | None:
    """Why the file at `path` (absolute) must not be quoted; None when it may be. `cwd`: the
    run's recorded working directory, when the record comes from a file (a re-render); None
    in the run itself, whose record this process made (a script outside the working directory
    is the user's own)."""
    if not path.endswith(".py"):
        return "not a Python file"
    if path not in own:
        return "not one of the files this run executed"
    if cwd is None:
        return None
    if not os.path.isabs(cwd) or not _inside(path, os.path.normpath(cwd)):
        return "outside the run's working directory"
    if not _inside(os.path.realpath(path), os.path.realpath(cwd)):
        return "a link out of the run's working directory"
    return None


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:  # another drive, or a mix of absolute and relative
        return False


def _excerpt(shown: str, line: int, path: str, started: float | None, expected_sha: str | None) -> SourceExcerpt:
    """`expected_sha`: None in the run itself; else the hash the run recorded ("" for none)."""
    excerpt = SourceExcerpt(shown, line)
    try:
        data = read_untrusted(path, MAX_FILE_BYTES, what="Python file")
        mtime = os.stat(path).st_mtime
    except InputError as exc:
        if not os.path.lexists(path):
            return _failed(excerpt, "missing", "the file no longer exists: it was deleted or moved since the run")
        return _failed(excerpt, "unreadable", f"{NOT_AVAILABLE}: {str(exc).replace(path, 'the file')}")
    except OSError as exc:
        return _failed(excerpt, "unreadable", f"{NOT_AVAILABLE}: {exc.strerror or exc}")
    sha = hashlib.sha256(data).hexdigest()
    if expected_sha is not None and expected_sha != sha:
        why = ("the file changed since the run (its sha256 is not the one the run recorded)" if expected_sha else
               "the run directory records no hash of the file (its report.json is missing or older)")
        return _failed(excerpt, "changed", f"{NOT_AVAILABLE}: {why}")
    excerpt.sha256 = sha
    lines = data.decode("utf-8", errors="replace").splitlines()
    if expected_sha is None and started is not None and mtime > started + CLOCK_SLACK_S:
        modified = _dt.datetime.fromtimestamp(mtime, _dt.timezone.utc).isoformat(timespec="seconds")
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
