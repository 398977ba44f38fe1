"""How a source line uses the value it reads from a tensor (`.item()`, `.tolist()`, `int(t)`):
read from the line's text, which the op sampler stored with the call.

`accumulate` (`total += loss.item()`, `meter.update(loss.item())`) and `log`
(`print(f"{loss.item()}")`) read a value the host could read rarely; `control`
(`if not math.isfinite(loss.item()):`) reads it to decide, which can usually wait a few steps
too; `external` (`state, r, done = env.step(a.item())`, `array[i.item()]`) needs it on the
host now: the sync is required, and only batching or keeping the work on the device removes it.
"""

from __future__ import annotations

import ast

READS = {"item", "tolist", "numpy", "cpu"}
CASTS = {"int", "float", "bool"}
LOG_CALLS = {"print", "write", "log", "info", "debug", "warning", "add_scalar", "add_scalars", "format",
             "set_postfix", "set_description", "log_metrics", "log_dict", "append", "extend",
             "plot", "scatter", "imshow", "hist", "text", "bar", "set_data", "set_ydata"}  # a figure shows it
ACCUMULATE, LOG, CONTROL, EXTERNAL, OTHER = "accumulate", "log", "control", "external", "other"
# The words `run` and `lint` both put on a read the host needs now (a finding of information,
# not a habit); a run's finding at a line lint said this of takes lint's judgement.
HOST_NEEDS_VALUE = "the host needs the value"


def value_use(text: str) -> str:
    """The use of the first tensor read on a line of source, or OTHER when unclear."""
    tree = _parse(text.strip())
    if tree is None:
        return OTHER
    parents: dict[ast.AST, ast.AST] = {}
    read = None
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
        if read is None and _is_read(node):
            read = node
    if read is None:
        return OTHER
    node = read
    while node in parents:  # a decision first: `if not math.isfinite(loss.item()):` decides
        parent = parents[node]
        if isinstance(parent, (ast.If, ast.While, ast.Assert, ast.IfExp)) and node is parent.test:
            return CONTROL
        node = parent
    node = read
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Call) and node is not parent.func:
            name = _call_name(parent.func)
            if name in LOG_CALLS:
                return LOG
            if not _is_read(parent) and name not in CASTS | {"round", "abs", "max", "min", "sum"}:
                # `meter.update(loss.item(), n)` keeps a running number (its result unused);
                # `state, r, done = env.step(a.item())` needs the value to go on
                return ACCUMULATE if isinstance(parents.get(parent), ast.Expr) else EXTERNAL
        if isinstance(parent, ast.Subscript) and node is parent.slice:
            return EXTERNAL
        if isinstance(parent, ast.JoinedStr):
            return LOG
        if isinstance(parent, ast.AugAssign):
            return ACCUMULATE
        node = parent
    return OTHER


def _parse(text: str) -> ast.AST | None:
    for candidate in (text, text.rstrip(":") + ": pass", text + ")"):  # `if x.item() > 0:`, an open call
        try:
            return ast.parse(candidate)
        except SyntaxError:
            continue
    return None


def _is_read(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = _call_name(node.func)
    if isinstance(node.func, ast.Attribute) and name in READS:
        return True
    return name in CASTS and len(node.args) == 1


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""
