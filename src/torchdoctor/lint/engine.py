"""Lint one source file: parse it, run every selected check over one shared `Facts`, and turn
the hits into `Finding`s that carry the catalogue's code, slug and fix text, with static
estimate fields. `# noqa` and per-file ignores are applied here, once for all checks."""

from __future__ import annotations

import ast
import functools
import gc
import re
from dataclasses import dataclass, field, replace

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.lint.checks.base import Check, FixAction, Hit
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.noqa import suppressions
from torchdoctor.lint.notebook import blank_cell
from torchdoctor.lint.parse_cost import slow_to_parse
from torchdoctor.lint.project import training_modules
from torchdoctor.lint.selection import Selection
from torchdoctor.lint.source import Problem, SourceFile
from torchdoctor.model.location import Location
from torchdoctor.rules.base import make_finding
from torchdoctor.rules.registry import detectors, rule_by_code

Span = tuple[int, int, int, int]
STATIC_BASIS = ("static finding: read from the source without running it; `torchdoctor run` on this "
                "script measures what it costs")


@dataclass
class LintFinding:
    """A Finding plus what only a linter knows: the column, the statement's last line (for
    `# noqa` on multi-line calls), the notebook cell, and the rewrite `--fix` may apply."""

    finding: Finding
    column: int  # 1-based, in characters
    end_line: int
    cell: int | None = None
    # the rewrites --fix may apply: (call span: line, col, end line, end col with 0-based columns, action)
    fixes: list[tuple[Span, FixAction]] = field(default_factory=list)
    notebook_fix: bool = False  # --fix would rewrite this in a .py file; notebooks are not rewritten
    source_line: str = ""  # the code on the finding's line, stripped: SARIF fingerprints hash it

    @property
    def fixable(self) -> bool:
        return bool(self.fixes)

    @property
    def code(self) -> str:
        return self.finding.code

    @property
    def line(self) -> int:
        return self.finding.location.line if self.finding.location else 0

    @property
    def path(self) -> str:
        return self.finding.location.path if self.finding.location else ""

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.column, self.code)


@dataclass
class FileOutcome:
    findings: list[LintFinding] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    linted: bool = False  # at least part of the file was parsed and checked
    trains: bool = False  # the file holds a training step (a backward or an optimizer step)
    follow: list[str] = field(default_factory=list)  # project modules a launcher's training loop may be in


def lint_source(source: SourceFile, selection: Selection, relative: str = "") -> FileOutcome:
    """All findings for one file; `relative` is its path for per-file ignores.

    Parsing and analysing a file allocates hundreds of thousands of objects that live until the
    file is done; the cyclic collector would walk them all again and again while they are made
    (a third of the time on a 50,000-line file), so it waits until the file is done."""
    if not gc.isenabled():
        return _lint_source(source, selection, relative)
    gc.disable()
    try:
        return _lint_source(source, selection, relative)
    finally:
        gc.enable()


def _lint_source(source: SourceFile, selection: Selection, relative: str) -> FileOutcome:
    outcome = FileOutcome()
    tree, text = _parse(source, outcome)
    if tree is None:
        return outcome
    outcome.linted = True
    checks = [c for c in lint_checks() if any(selection.wants(code, relative) for code in c.codes)]
    if not checks:
        return outcome
    try:
        facts = Facts(tree, text, str(source.path))
    except RecursionError:  # code nested deeper than the parser's own limit lets through
        outcome.problems.append(Problem(source.display, "cannot lint: the code is nested too deeply; the file "
                                                        "was skipped"))
        outcome.linted = False
        return outcome
    outcome.trains = bool(facts.context.step_loops or facts.context.step_functions)
    outcome.follow = training_modules(facts)
    lines = text.split("\n")
    noqa = None  # tokenized on the first hit: most files have none
    on_line: dict[tuple[str, int], LintFinding] = {}
    silenced_at: set[tuple[str, int]] = set()
    for check in checks:
        for hit in _guarded(check, facts, source, outcome):
            hit = _at_defaults(hit, facts)
            key = (hit.code, hit.node.lineno)
            if key in silenced_at or not selection.wants(hit.code, relative):
                continue
            if key in on_line:  # one finding per code and line: the most severe hit's; their fixes add up
                kept = on_line[key]
                if hit.severity.rank < kept.finding.severity.rank:
                    end = getattr(hit.node, "end_lineno", None) or key[1]
                    on_line[key] = _finding(hit, source, facts, lines, end, kept.fixes)
                else:
                    kept.fixes += _fixes(hit, source, lines)
                on_line[key].notebook_fix |= kept.notebook_fix or (source.cells is not None and _has_fix(hit))
                continue
            line, end = key[1], getattr(hit.node, "end_lineno", None) or key[1]
            if noqa is None:
                noqa = suppressions(text)
            if noqa.silences(hit.code, line, end):
                silenced_at.add(key)
                continue
            on_line[key] = _finding(hit, source, facts, lines, end)
    outcome.findings = list(on_line.values())
    return outcome


@functools.lru_cache(maxsize=1)
def lint_checks() -> tuple[Check, ...]:
    """One instance of every lint check in the registry."""
    return tuple(d.load()() for d in detectors("lint"))


def _at_defaults(hit: Hit, facts: Facts) -> Hit:
    """A habit in code that does not run unless the user changes a default is kept at `info`,
    with the option that turns it on."""
    if hit.severity is Severity.INFO:
        return hit
    reason = facts.off_by_default.reason(hit.node)
    if reason is None:
        return hit
    return replace(hit, severity=Severity.INFO, message=f"{hit.message}; {reason}",
                   evidence={**hit.evidence, "off_by_default": reason})


def _guarded(check, facts: Facts, source: SourceFile, outcome: FileOutcome):
    """A check's hits; a bug in one check costs its findings for this file, not the whole run."""
    try:
        return list(check.run(facts))
    except (RecursionError, ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
        outcome.problems.append(Problem(source.display, f"internal error in {type(check).__name__} "
                                        f"({type(exc).__name__}: {exc}); its findings for this file are missing",
                                        fatal=False))
        return []


def _parse(source: SourceFile, outcome: FileOutcome) -> tuple[ast.Module | None, str]:
    text = source.text
    too_slow = slow_to_parse(text)
    if too_slow is not None:
        outcome.problems.append(Problem(source.display, f"skipped: {too_slow}"))
        return None, text
    attempts = len(source.cells.starts) + 1 if source.cells else 1
    for _ in range(attempts):
        try:
            return ast.parse(text, filename=source.display), text
        except SyntaxError as exc:
            line, column = exc.lineno or 0, exc.offset or 0
            if source.cells is None or not line:
                outcome.problems.append(Problem(source.display, f"cannot parse: {exc.msg}; the file was skipped",
                                                line, column))
                return None, text
            cell, cell_line = source.cells.locate(line)
            outcome.problems.append(Problem(source.display, f"cannot parse: {exc.msg}; this cell was skipped",
                                            cell_line, column, cell=cell, fatal=False))
            text = blank_cell(text, source.cells, source.cells.numbers.index(cell))
        except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
            reason = ("nested too deeply" if isinstance(exc, (RecursionError, MemoryError)) else
                      str(exc) or type(exc).__name__)
            outcome.problems.append(Problem(source.display, f"cannot parse: {reason}; the file was skipped"))
            return None, text
    return None, text


def _finding(hit: Hit, source: SourceFile, facts: Facts, lines: list[str], end: int,
             earlier_fixes: list | None = None) -> LintFinding:
    rule = rule_by_code(hit.code)
    assert rule is not None, f"lint check emitted {hit.code}, which has no catalogue entry"
    line = hit.node.lineno
    column = char_column(lines[line - 1], hit.node.col_offset) + 1
    cell = None
    evidence = dict(hit.evidence)
    shown_line, shown_end = line, end
    message = hit.message
    if source.cells is not None:
        cell, shown_line = source.cells.locate(line)
        shown_end = source.cells.locate(end)[1]
        evidence = {k: _cell_line(v, source) if k.endswith("line") and isinstance(v, int) else v
                    for k, v in evidence.items()}
        evidence["cell"] = cell
        # Checks speak of lines of the joined cells; a notebook user needs "cell 3, line 2".
        message = _LINE_WORDS.sub(lambda m: f"{m.group(1)} {_cell_line(int(m.group(2)), source)}", message)
    finding = make_finding(rule, title=hit.title, message=message,
                           location=Location(source.display, shown_line, facts.model.function_at(line)),
                           evidence=evidence, speedup=None, basis=STATIC_BASIS, severity=hit.severity,
                           fix=hit.advice)
    fixes = (earlier_fixes or []) + _fixes(hit, source, lines)
    notebook_fix = source.cells is not None and _has_fix(hit)
    return LintFinding(finding, column, shown_end, cell, fixes, notebook_fix, lines[line - 1].strip())


def _has_fix(hit: Hit) -> bool:
    return hit.fix is not None and isinstance(hit.fix_target or hit.node, ast.Call)


def _fixes(hit: Hit, source: SourceFile, lines: list[str]) -> list[tuple[Span, FixAction]]:
    target = hit.fix_target or hit.node
    if source.cells is not None or not _has_fix(hit):
        return []  # notebooks are reported, not rewritten
    span = (target.lineno, char_column(lines[target.lineno - 1], target.col_offset),
            target.end_lineno, char_column(lines[target.end_lineno - 1], target.end_col_offset))
    return [(span, hit.fix)]


_LINE_WORDS = re.compile(r"\b(line) (\d+)\b")


def _cell_line(line: int, source: SourceFile) -> str:
    cell, cell_line = source.cells.locate(line)
    return f"{cell_line} of cell {cell}"


def char_column(line: str, byte_offset: int) -> int:
    """ast columns count UTF-8 bytes; editors and libcst count characters."""
    if line.isascii():
        return byte_offset
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))
