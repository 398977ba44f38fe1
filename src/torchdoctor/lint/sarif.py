"""SARIF 2.1.0 output for code-scanning UIs, with each rule's metadata and help text from the
catalogue.

Three things SARIF consumers rely on:
- `%SRCROOT%` is an absolute `file://` URI ending in `/` (SARIF1018: a base without a base of
  its own must be absolute); result URIs are relative to it.
- `partialFingerprints` tell results apart across runs: the code, file, function and the
  normalized text of the flagged line, plus an occurrence index for identical lines (what
  GitHub's own line hash does). Moving code does not change them; two results never share one.
- A region counts lines of the artifact. For a notebook that is the .ipynb JSON text, so a
  finding's cell line is mapped to the file line that holds it (ipynb_lines.py), with no
  column (the JSON line's columns are not the code's); the cell, line and column go in the
  message and in `properties`. Where the mapping fails, the location has no region rather
  than a wrong one.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path, PurePath
from urllib.parse import quote

from torchdoctor.version import __version__
from torchdoctor.lint.api import LintResult
from torchdoctor.lint.engine import LintFinding
from torchdoctor.lint.ipynb_lines import cell_line_map
from torchdoctor.rules.registry import detected_codes
from torchdoctor.rules.registry import rule_by_code
from torchdoctor.model.serialize import to_plain

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DOCS_URI = "https://github.com/torchdoctor/torchdoctor/blob/main/docs/rules.md"
FINGERPRINT = "torchdoctor/v2"  # v1 (code, file, function) merged distinct results of one function
# SARIF has three result levels; "info" findings ("the runtime check will decide") are notes.
_SARIF_LEVEL = {"high": "error", "medium": "warning", "low": "note", "info": "note"}


def render_sarif(result: LintResult) -> str:
    codes = sorted(detected_codes("lint") | {f.code for f in result.findings})
    index = {code: i for i, code in enumerate(codes)}
    notebooks = _NotebookLines(result.files)
    results = [_result(f, index[f.code], fingerprint, notebooks)
               for f, fingerprint in zip(result.findings, fingerprints(result.findings))]
    run = {
        "tool": {"driver": {
            "name": "torchdoctor", "version": __version__, "semanticVersion": __version__,
            "informationUri": DOCS_URI, "rules": [_rule(code) for code in codes],
        }},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": _root_uri(result.root or Path.cwd())}},
        "results": results,
        "invocations": [{
            "executionSuccessful": not result.nothing_readable,
            "toolExecutionNotifications": [
                {"level": "warning" if p.fatal else "note", "message": {"text": p.message},
                 "locations": [_location(p.display, notebooks.region(p.display, p.cell, p.line or 1)
                                         if p.cell is not None else _region(p.line or 1, p.column or 1))]}
                for p in result.problems
            ],
        }],
    }
    document = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def fingerprints(findings: list[LintFinding]) -> list[str]:
    """One fingerprint per finding (in the given order), distinct within a run."""
    seen: Counter = Counter()
    found = []
    for item in findings:
        code_line = " ".join(item.source_line.split())
        key = "\0".join((item.code, item.path, item.finding.location.function if item.finding.location else "",
                         code_line))
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
        seen[digest] += 1
        found.append(f"{digest}:{seen[digest]}")
    return found


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


def _result(item: LintFinding, rule_index: int, fingerprint: str, notebooks: _NotebookLines) -> dict:
    finding = item.finding
    properties = {"severity": finding.severity.value, "title": finding.title,
                  "evidence": to_plain(finding.evidence), "fixable": item.fixable}
    message = finding.message
    if item.cell is None:
        region = _region(item.line, item.column, item.end_line)
    else:
        region = notebooks.region(item.path, item.cell, item.line, item.end_line)
        message += f" (notebook cell {item.cell}, line {item.line}, column {item.column})"
        properties.update(notebookCell=item.cell, cellLine=item.line, cellColumn=item.column)
    return {
        "ruleId": item.code, "ruleIndex": rule_index, "level": _SARIF_LEVEL[finding.severity.value],
        "message": {"text": message},
        "locations": [_location(item.path, region)],
        "partialFingerprints": {FINGERPRINT: fingerprint},
        "properties": properties,
    }


def _region(line: int, column: int, end_line: int | None = None) -> dict:
    region = {"startLine": line, "startColumn": column}
    if end_line and end_line > line:
        region["endLine"] = end_line
    return region


def _location(path: str, region: dict | None) -> dict:
    if PurePath(path).is_absolute():  # outside the working directory: a file URI, no base
        artifact = {"uri": Path(path).as_uri()}
    else:
        artifact = {"uri": quote(path), "uriBaseId": "%SRCROOT%"}
    physical = {"artifactLocation": artifact}
    if region is not None:
        physical["region"] = region
    return {"physicalLocation": physical}


def _root_uri(root: Path) -> str:
    uri = root.resolve().as_uri()
    return uri if uri.endswith("/") else uri + "/"


class _NotebookLines:
    """Regions in a notebook's own text for cell lines; each notebook is read once."""

    def __init__(self, files: dict[str, Path]):
        self.files = files
        self.maps: dict[str, dict | None] = {}

    def region(self, display: str, cell: int, line: int, end_line: int | None = None) -> dict | None:
        if display not in self.maps:
            self.maps[display] = self._read(display)
        mapping = self.maps[display]
        start = mapping.get((cell, line)) if mapping else None
        if start is None:
            return None
        region = {"startLine": start}
        end = mapping.get((cell, end_line)) if end_line else None
        if end is not None and end > start:
            region["endLine"] = end
        return region

    def _read(self, display: str) -> dict | None:
        path = self.files.get(display)
        try:
            return cell_line_map(path.read_bytes()) if path is not None else None
        except OSError:
            return None


def _pascal(slug: str) -> str:
    return "".join(part.capitalize() for part in slug.split("-"))
