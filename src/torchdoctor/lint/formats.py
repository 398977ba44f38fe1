"""Output formats of `torchdoctor lint`: one line per finding (the house format of Python
linters), a JSON list of findings (DESIGN.md §3 plus the column), and SARIF 2.1.0 for
code-scanning UIs, with each rule's metadata and help text from the catalogue."""

from __future__ import annotations

import json
from pathlib import Path, PurePath
from typing import Callable
from urllib.parse import quote

from torchdoctor import __version__
from torchdoctor.lint.api import LintResult
from torchdoctor.lint.engine import LintFinding
from torchdoctor.lint.registry import DETECTED_CODES
from torchdoctor.rules.registry import rule_by_code
from torchdoctor.serialize import to_plain

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DOCS_URI = "https://github.com/torchdoctor/torchdoctor/blob/main/docs/rules.md"
# SARIF has three result levels; "info" findings ("the runtime check will decide") are notes.
_SARIF_LEVEL = {"high": "error", "medium": "warning", "low": "note", "info": "note"}


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


def render_sarif(result: LintResult) -> str:
    codes = sorted(DETECTED_CODES | {f.code for f in result.findings})
    index = {code: i for i, code in enumerate(codes)}
    run = {
        "tool": {"driver": {
            "name": "torchdoctor", "version": __version__, "semanticVersion": __version__,
            "informationUri": DOCS_URI, "rules": [_rule(code) for code in codes],
        }},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": "./"}},
        "results": [_result(f, index[f.code]) for f in result.findings],
        "invocations": [{
            "executionSuccessful": not result.nothing_readable,
            "toolExecutionNotifications": [
                {"level": "warning" if p.fatal else "note", "message": {"text": p.message},
                 "locations": [_physical(p.display, p.line or 1, p.column or 1)]}
                for p in result.problems
            ],
        }],
    }
    document = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _rule(code: str) -> dict:
    rule = rule_by_code(code)
    example = f"\n\nExample of the habit:\n```python\n{rule.example}\n```" if rule.example else ""
    help_markdown = f"**{rule.title}.** {rule.rationale}{example}\n\n**Fix:** {rule.fix}"
    return {
        "id": code, "name": _pascal(rule.slug),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.rationale},
        "help": {"text": f"{rule.rationale}\n\nFix: {rule.fix}", "markdown": help_markdown},
        "helpUri": f"{DOCS_URI}#{code.lower()}-{rule.slug}",
        "defaultConfiguration": {"level": "warning"},
        "properties": {"tags": ["performance", "pytorch", rule.slug], "slug": rule.slug},
    }


def _result(item: LintFinding, rule_index: int) -> dict:
    finding = item.finding
    cell = f" (notebook cell {item.cell})" if item.cell is not None else ""
    return {
        "ruleId": item.code, "ruleIndex": rule_index, "level": _SARIF_LEVEL[finding.severity.value],
        "message": {"text": f"{finding.message}{cell}"},
        "locations": [_physical(item.path, item.line, item.column, item.end_line)],
        "partialFingerprints": {"torchdoctor/v1": f"{item.code}:{item.path}:{finding.location.function}"},
        "properties": {"severity": finding.severity.value, "title": finding.title,
                       "evidence": to_plain(finding.evidence), "fixable": item.fixable},
    }


def _physical(path: str, line: int, column: int, end_line: int | None = None) -> dict:
    region = {"startLine": line, "startColumn": column}
    if end_line and end_line > line:
        region["endLine"] = end_line
    if PurePath(path).is_absolute():  # outside the working directory: a file URI, no base
        artifact = {"uri": Path(path).as_uri()}
    else:
        artifact = {"uri": quote(path), "uriBaseId": "%SRCROOT%"}
    return {"physicalLocation": {"artifactLocation": artifact, "region": region}}


def _pascal(slug: str) -> str:
    return "".join(part.capitalize() for part in slug.split("-"))


FORMATS: dict[str, Callable[[LintResult], str]] = {"text": render_text, "json": render_json, "sarif": render_sarif}
