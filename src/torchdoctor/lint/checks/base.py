"""What a check returns: a `Hit` (code, node, words, severity) and, for the safe cases, a
`FixAction` that `--fix` can apply. The engine turns hits into `Finding`s with the catalogue's
slug and fix text, so checks never repeat catalogue metadata."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

from torchdoctor.model.findings import Severity
from torchdoctor.lint.facts import Facts


@dataclass(frozen=True)
class FixAction:
    """A rewrite of one call's arguments: set `name=value`, or drop the `name` argument (either
    also when passed positionally at `position`)."""

    kind: str  # "set-keyword" | "drop-argument"
    name: str
    value: str = ""
    position: int | None = None
    describe: str = ""  # for --diff summaries: "add non_blocking=True"


@dataclass
class Hit:
    code: str
    node: ast.AST  # where the finding points: its first line and column
    title: str
    message: str
    severity: Severity
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: FixAction | None = None
    fix_target: ast.Call | None = None  # the call the fix rewrites (defaults to `node`)
    advice: str | None = None  # the fix to print when the rule's general one does not fit this shape


class Check:
    """One detector. `codes` lists every code it can emit (the registry's DETECTED_CODES)."""

    codes: ClassVar[tuple[str, ...]]

    def run(self, facts: Facts) -> Iterator[Hit]:
        raise NotImplementedError


def set_keyword(name: str, value: str = "True", position: int | None = None) -> FixAction:
    """Set `name=value`; with `position`, an argument passed positionally there is `name`."""
    return FixAction("set-keyword", name, value, position, describe=f"set {name}={value}")


def drop_argument(name: str, position: int | None = None) -> FixAction:
    return FixAction("drop-argument", name, position=position, describe=f"remove {name}")
