"""Which logging calls format their arguments. `logger.info("loss %s", loss)` turns `loss` into
text only when INFO is enabled: the arguments are formatted lazily, by the handler. Python
emits WARNING and above by default (its last-resort handler prints them), DEBUG and INFO only
once someone lowers the level; this file is the only place a linter can see do that
(`logging.basicConfig(level=logging.INFO)`, `logger.setLevel("DEBUG")`).
"""

from __future__ import annotations

import ast

from torchdoctor.lint.model import FileModel, Scope
from torchdoctor.lint.values import Values

LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "exception": 40, "critical": 50,
          "fatal": 50}
DEFAULT_LEVEL = 30  # WARNING: what an unconfigured process emits
_MAX_DEPTH = 4


def enabled_level(model: FileModel, values: Values) -> int:
    """The lowest level the file surely turns on: the lowest of the levels it sets, where a
    level chosen at run time (`DEBUG if verbose else INFO`) counts as the higher choice."""
    lowest = DEFAULT_LEVEL
    for call, block in model.calls_named("basicConfig", "setLevel"):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "setLevel" and call.args:
            expr = call.args[0]
        else:
            expr = next((k.value for k in call.keywords if k.arg == "level"), None)
        level = level_of(expr, block.scope, values) if expr is not None else None
        if level is not None:
            lowest = min(lowest, level)
    return lowest


def level_of(expr: ast.expr, scope: Scope, values: Values, depth: int = 0) -> int | None:
    """`logging.INFO`, `"INFO"`, `20`, a name assigned one of those once; None when unknown."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.IfExp):
        choices = [level_of(e, scope, values, depth + 1) for e in (expr.body, expr.orelse)]
        return None if None in choices else max(choices)
    if isinstance(expr, ast.Attribute):
        return LEVELS.get(expr.attr.lower()) if expr.attr.isupper() else None
    if isinstance(expr, ast.Name):
        found = values.definition(expr.id, scope)
        if found is None or found[0] is None:
            return None
        return level_of(found[0], found[1], values, depth + 1)
    if isinstance(expr, ast.Constant):
        if isinstance(expr.value, str):
            return LEVELS.get(expr.value.lower())
        if isinstance(expr.value, int) and not isinstance(expr.value, bool):
            return expr.value
    return None
