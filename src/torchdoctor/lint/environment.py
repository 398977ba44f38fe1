"""Environment variables a file sets in code: `os.environ[V] = x`, `os.environ.setdefault(V, x)`,
`os.putenv(V, x)`, `os.environ.update(V=x)` and `os.environ.update({V: x})`. Shared by the
checks that look for variables which slow a run down (CUDA_LAUNCH_BLOCKING, NCCL_*)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Container, Iterator

if TYPE_CHECKING:
    from torchdoctor.lint.facts import Facts
    from torchdoctor.lint.model import Block


def environment_writes(facts: Facts, names: Container[str]) -> Iterator[tuple[str, ast.AST, ast.expr, Block]]:
    """(variable, the statement or call, the value, its block) for every write of one of `names`,
    in one pass over the file's assignments and calls: assignments first, then `setdefault`,
    `putenv` and `update` calls, each in source order."""
    for statement, block in facts.model.assignments:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and statement.value is not None:
                variable = _string_in(target.slice, names)
                if variable is not None and facts.qualify(target.value) == "os.environ":
                    yield variable, statement, statement.value, block
    for call, block in facts.model.calls_named("setdefault", "putenv", "update"):
        name = facts.qualify(call.func) or ""
        if name in ("os.environ.setdefault", "os.putenv") and len(call.args) == 2:
            variable = _string_in(call.args[0], names)
            if variable is not None:
                yield variable, call, call.args[1], block
        elif name == "os.environ.update":
            for kw in call.keywords:
                if kw.arg is not None and kw.arg in names:
                    yield kw.arg, call, kw.value, block
            if call.args and isinstance(call.args[0], ast.Dict):
                for key, value in zip(call.args[0].keys, call.args[0].values):
                    variable = _string_in(key, names) if key is not None else None
                    if variable is not None:
                        yield variable, call, value, block


def _string_in(expr: ast.expr, names: Container[str]) -> str | None:
    """The string constant `expr` is, when it is one of `names`."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str) and expr.value in names:
        return expr.value
    return None
