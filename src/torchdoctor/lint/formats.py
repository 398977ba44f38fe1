"""Output formats of `torchdoctor lint`: one line per finding (the house format of Python
linters), a JSON list of findings (DESIGN.md §3 plus the column), and SARIF 2.1.0 for
code-scanning UIs (sarif.py)."""

from __future__ import annotations

import json
from typing import Callable

from torchdoctor.lint.api import LintResult
from torchdoctor.lint.engine import LintFinding
from torchdoctor.lint.sarif import render_sarif
from torchdoctor.model.serialize import to_plain


def location_text(item: LintFinding) -> str:
    cell = f":cell {item.cell}" if item.cell is not None else ""
    return f"{item.path}{cell}:{item.line}:{item.column}"


def render_text(result: LintResult) -> str:
    return "".join(f"{location_text(f)}: {f.code} {f.finding.slug}: {f.finding.message}\n" for f in result.findings)


def finding_json(item: LintFinding) -> dict:
    data = to_plain(item.finding)
    data["column"] = item.column
    data["end_line"] = item.end_line
    data["fixable"] = item.fixable
    if item.cell is not None:
        data["cell"] = item.cell
    return data


def render_json(result: LintResult) -> str:
    return json.dumps([finding_json(f) for f in result.findings], indent=2, ensure_ascii=False) + "\n"


FORMATS: dict[str, Callable[[LintResult], str]] = {"text": render_text, "json": render_json, "sarif": render_sarif}
