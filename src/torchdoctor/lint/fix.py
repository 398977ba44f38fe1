"""`--fix` and `--diff`: rewrite the safe cases with libcst, which keeps every comment, blank
line and quote style that is not part of the edit.

The safe cases only touch one call's arguments: add `non_blocking=True` to a host→device copy
of a pinned batch, `pin_memory=True` / `persistent_workers=True` (only where num_workers > 0
is certain) to a DataLoader, and remove `set_to_none=False` from `zero_grad`. A rewrite that
would not parse is dropped and the file is left as it was.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from torchdoctor.lint.checks.base import FixAction
from torchdoctor.lint.engine import LintFinding

Span = tuple[int, int, int, int]


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


def plan_fixes(findings: list[LintFinding], files: dict[str, Path]) -> tuple[list[FileFix], list[str]]:
    """Rewrite each file that has fixable findings (in memory); also return notes on files skipped."""
    by_path: dict[str, list[LintFinding]] = {}
    for item in findings:
        if item.fixable:
            by_path.setdefault(item.path, []).append(item)
    fixes, notes = [], []
    for display, items in sorted(by_path.items()):
        path = files[display]
        try:
            before = path.read_bytes()
            after = rewrite(before, _actions(items))
            ast.parse(after)
        except (OSError, cst.ParserSyntaxError, SyntaxError, ValueError) as exc:
            notes.append(f"{display}: not fixed ({type(exc).__name__}: {str(exc).splitlines()[0]})")
            continue
        fixes.append(FileFix(path, display, before, after, items))
    return fixes, notes


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
                updated = set_keyword(updated, action.name, action.value)
            elif action.kind == "drop-argument":
                updated = drop_argument(updated, action.name, action.position)
        return updated


def set_keyword(call: cst.Call, name: str, value: str) -> cst.Call:
    args = list(call.args)
    new_value = cst.parse_expression(value)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=new_value)
            return call.with_changes(args=args)
    new = cst.Arg(value=new_value, keyword=cst.Name(name),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    # Whitespace before an argument as the call already spells it: " " on one line, a newline
    # and the arguments' indentation when one argument per line (without the comment after it).
    if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        before_arg = _without_comment(args[-2].comma.whitespace_after)
    elif isinstance(last.comma, cst.Comma) and isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        before_arg = _without_comment(call.whitespace_before_args)
    else:
        before_arg = cst.SimpleWhitespace(" ")
    trailing = last.comma
    if isinstance(trailing, cst.Comma) and isinstance(trailing.whitespace_after, cst.ParenthesizedWhitespace):
        # one per line with a trailing comma: the last argument keeps its comment, the new one
        # goes on its own line, and the closing parenthesis keeps its indentation
        closing = trailing.whitespace_after
        last = last.with_changes(comma=trailing.with_changes(whitespace_after=closing.with_changes(
            indent=getattr(before_arg, "indent", True), last_line=getattr(before_arg, "last_line", cst.SimpleWhitespace("")))))
        new = new.with_changes(comma=cst.Comma(whitespace_after=_without_comment(closing)))
    else:
        new = new.with_changes(comma=trailing, whitespace_after_arg=last.whitespace_after_arg)
        last = last.with_changes(comma=cst.Comma(whitespace_after=before_arg),
                                 whitespace_after_arg=cst.SimpleWhitespace(""))
    args[-1:] = [last, new]
    return call.with_changes(args=args)


def drop_argument(call: cst.Call, name: str, position: int | None) -> cst.Call:
    args = list(call.args)
    index = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == name), None)
    if index is None and position is not None and position < len(args) and args[position].keyword is None:
        index = position
    if index is None:
        return call
    removed = args.pop(index)
    if not args:  # `zero_grad(\n    set_to_none=False,\n)` → `zero_grad()`
        return call.with_changes(args=[], whitespace_before_args=cst.SimpleWhitespace(""))
    if index == len(args):  # removed the last one: the new last argument ends the call as it did
        previous = args[-1]
        if isinstance(removed.comma, cst.Comma) and isinstance(previous.comma, cst.Comma) and isinstance(
                previous.comma.whitespace_after, cst.ParenthesizedWhitespace) and isinstance(
                removed.comma.whitespace_after, cst.ParenthesizedWhitespace):
            closing = removed.comma.whitespace_after
            args[-1] = previous.with_changes(comma=previous.comma.with_changes(
                whitespace_after=previous.comma.whitespace_after.with_changes(
                    indent=closing.indent, last_line=closing.last_line)))
        else:
            args[-1] = previous.with_changes(comma=removed.comma, whitespace_after_arg=removed.whitespace_after_arg)
    return call.with_changes(args=args)


def _without_comment(whitespace: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    if isinstance(whitespace, cst.ParenthesizedWhitespace):
        return whitespace.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
    return whitespace
