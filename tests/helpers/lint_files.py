"""Lint a snippet written to a temporary file; findings as (code, line) pairs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from torchdoctor.lint import LintOptions, LintResult, lint_paths


def write(tmp_path: Path, code: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(code).lstrip("\n"))
    return path


def lint(tmp_path: Path, code: str, name: str = "train.py", **options) -> LintResult:
    path = write(tmp_path, code, name)
    options.setdefault("isolated", True)
    options.setdefault("min_severity", "info")
    options.setdefault("jobs", 1)
    return lint_paths([path], LintOptions(**options), cwd=tmp_path)


def found(tmp_path: Path, code: str, **options) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in lint(tmp_path, code, **options).findings]


def lines_of(tmp_path: Path, code: str, rule: str) -> list[int]:
    """The lines where `rule` (a code such as TD201) is reported in the snippet `code`."""
    return [line for c, line in found(tmp_path, code) if c == rule]


def severities(tmp_path: Path, code: str) -> dict[tuple[str, int], str]:
    return {(f.code, f.line): f.finding.severity.value for f in lint(tmp_path, code).findings}
