"""`--fix` and `--diff`: rewrite the safe cases with libcst, which keeps every comment, blank
line and quote style that is not part of the edit (call_edits.py does the edits).

The safe cases only touch one call's arguments: add `non_blocking=True` to a host→device copy
of a pinned batch, `pin_memory=True` / `persistent_workers=True` (only where num_workers > 0
is certain) to a DataLoader, and remove `set_to_none=False` from `zero_grad`. A rewrite that
would not parse is dropped and the file is left as it was.

One fix can make another possible (`pin_memory=True` makes the loader's `.to(device)` copies
TD104 findings), so each file is rewritten, linted again in memory and rewritten again until
nothing fixable is left, at most MAX_PASSES times: one `--fix` (or `--diff`) reaches the
state a second `--fix` would not change. Notebooks are reported, not rewritten.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from torchdoctor.lint.call_edits import drop_argument, set_argument
from torchdoctor.lint.checks.base import FixAction
from torchdoctor.lint.engine import LintFinding

Span = tuple[int, int, int, int]
MAX_PASSES = 3  # a fix enables at most one more today (pin_memory → non_blocking); the bound stops a loop
# Lint new contents of a file (display path, bytes) the way the file was linted.
Relint = Callable[[str, bytes], list[LintFinding]]


@dataclass
class FileFix:
    path: Path
    display: str
    before: bytes
    after: bytes
    applied: list[LintFinding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        old = self.before.decode("utf-8", errors="replace").splitlines(keepends=True)
        new = self.after.decode("utf-8", errors="replace").splitlines(keepends=True)
        before, after = (self.display, self.display) if self.display.startswith("/") else (
            f"a/{self.display}", f"b/{self.display}")  # git's prefixes, for `git apply`
        return "".join(difflib.unified_diff(old, new, before, after))


def plan_fixes(findings: list[LintFinding], files: dict[str, Path],
               relint: Relint | None = None) -> tuple[list[FileFix], list[str]]:
    """Rewrite each file that has fixable findings (in memory); also return notes on files skipped.
    With `relint`, each file is fixed again until no fixable finding is left (MAX_PASSES)."""
    by_path: dict[str, list[LintFinding]] = {}
    in_notebooks: dict[str, int] = {}
    for item in findings:
        if item.fixable:
            by_path.setdefault(item.path, []).append(item)
        elif item.notebook_fix:
            in_notebooks[item.path] = in_notebooks.get(item.path, 0) + 1
    fixes, notes = [], [_notebook_note(display, count) for display, count in sorted(in_notebooks.items())]
    for display, items in sorted(by_path.items()):
        path = files[display]
        try:
            before = path.read_bytes()
            after, applied = _fix_file(display, before, items, relint)
        except (OSError, cst.ParserSyntaxError, SyntaxError, ValueError) as exc:
            notes.append(f"{display}: not fixed ({type(exc).__name__}: {str(exc).splitlines()[0]})")
            continue
        fixes.append(FileFix(path, display, before, after, applied))
    return fixes, notes


def _fix_file(display: str, source: bytes, items: list[LintFinding],
              relint: Relint | None) -> tuple[bytes, list[LintFinding]]:
    applied: list[LintFinding] = []
    for _ in range(MAX_PASSES):
        after = rewrite(source, _actions(items))
        ast.parse(after)
        if after == source:
            break  # the edits changed nothing (already in place): linting again would find the same
        source, applied = after, applied + items
        items = [f for f in relint(display, source) if f.fixable] if relint else []
        if not items:
            break
    return source, applied


def _notebook_note(display: str, count: int) -> str:
    return (f"{display}: not rewritten: --fix and --diff do not edit notebooks; "
            f"{count} finding(s) there have a fix to apply by hand")


def _actions(items: list[LintFinding]) -> dict[Span, list[FixAction]]:
    actions: dict[Span, list[FixAction]] = {}
    for item in items:
        for span, action in item.fixes:
            actions.setdefault(span, []).append(action)
    return actions


def rewrite(source: bytes, actions: dict[Span, list[FixAction]]) -> bytes:
    wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    return wrapper.visit(_ArgumentEditor(actions)).bytes


class _ArgumentEditor(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, actions: dict[Span, list[FixAction]]):
        super().__init__()
        self.actions = actions

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        pos = self.get_metadata(PositionProvider, original)
        todo = self.actions.get((pos.start.line, pos.start.column, pos.end.line, pos.end.column))
        for action in todo or ():
            if action.kind == "set-keyword":
                updated = set_argument(updated, action.name, action.value, action.position)
            elif action.kind == "drop-argument":
                updated = drop_argument(updated, action.name, action.position)
        return updated
