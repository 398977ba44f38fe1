"""How many passes a loop makes at most, when the file fixes it: `for i in range(N)`, or a loop
over a loader that leaves after N batches (`if i >= max_batches: break`, `if i < n: ... else:
break`), N a constant or what every caller passes. An evaluation that reads a handful of
batches waits for the GPU a handful of times: what is a habit per batch of a full pass over a
test set is noise there."""

from __future__ import annotations

import ast

from torchdoctor.lint.model import Block, enclosing_loops, loop_iter
from torchdoctor.lint.names import last_name

FEW_PASSES = 16  # an evaluation of at most this many batches is a handful of syncs, not a habit


def most_passes(loop: Block, facts) -> int | None:
    """The most passes `loop` makes, or None when the file does not fix it."""
    node = loop.node
    if not isinstance(node, (ast.For, ast.AsyncFor)):
        return None
    counted = _range_count(loop_iter(loop), loop, facts)
    counter = _counter(node)
    if counter is None:
        return counted
    for statement in node.body:
        bound = _break_bound(statement, counter, loop, facts)
        if bound is not None:
            counted = bound if counted is None else min(counted, bound)
    return counted


def passes_within(block: Block, outer: Block, facts) -> int | None:
    """How many times code in `block` runs per pass of the loop around `outer` at most: the
    product of the passes of the loops from `block` out to `outer` (itself included)."""
    total = 1
    for loop in enclosing_loops(block):
        passes = most_passes(loop, facts)
        if passes is None:
            return None
        total *= passes
        if loop is outer:
            return total
    return None


def _range_count(iterable: ast.expr | None, loop: Block, facts) -> int | None:
    if isinstance(iterable, ast.Call) and last_name(iterable.func) == "enumerate" and iterable.args:
        iterable = iterable.args[0]
    if isinstance(iterable, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in iterable.elts):
        return len(iterable.elts)  # `for split in ["train", "val"]`
    if not (isinstance(iterable, ast.Call) and last_name(iterable.func) == "range" and iterable.args):
        return None
    if len(iterable.args) > 2:
        return None
    values = [facts.values.evaluate(a, loop.scope) for a in iterable.args]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return max(0, values[0]) if len(values) == 1 else max(0, values[1] - values[0])


def _counter(node: ast.For | ast.AsyncFor) -> str | None:
    """The name counting the passes from 0: `i` in `for i, batch in enumerate(loader)` or
    `for i in range(n)`."""
    iterable, target = node.iter, node.target
    if isinstance(iterable, ast.Call) and last_name(iterable.func) == "enumerate" and len(iterable.args) == 1 \
            and not iterable.keywords and isinstance(target, ast.Tuple) and target.elts \
            and isinstance(target.elts[0], ast.Name):
        return target.elts[0].id
    if isinstance(iterable, ast.Call) and last_name(iterable.func) == "range" and len(iterable.args) == 1 \
            and isinstance(target, ast.Name):
        return target.id
    return None


def _break_bound(statement: ast.stmt, counter: str, loop: Block, facts) -> int | None:
    """`if i >= N: break` (N + 1 passes: the pass with i == N runs up to the test) or
    `if i < N: ... else: break` (N passes)."""
    if not isinstance(statement, ast.If):
        return None
    if _only_break(statement.body):
        limit = _limit(statement.test, counter, (ast.GtE, ast.Gt, ast.Eq), loop, facts)
        return None if limit is None else limit + 1
    if _only_break(statement.orelse):
        return _limit(statement.test, counter, (ast.Lt,), loop, facts)
    return None


def _only_break(body: list[ast.stmt]) -> bool:
    return len(body) == 1 and isinstance(body[0], ast.Break)


def _limit(test: ast.expr, counter: str, ops: tuple, loop: Block, facts) -> int | None:
    """N in `counter <op> N`, when every other part of an `and` holds (`max_batches is not None`)."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    limit = None
    for part in parts:
        if isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ops) \
                and isinstance(part.left, ast.Name) and part.left.id == counter:
            value = facts.values.evaluate(part.comparators[0], loop.scope)
            if isinstance(value, int) and not isinstance(value, bool):
                limit = value + (1 if isinstance(part.ops[0], ast.Gt) else 0)
                continue
        if facts.values.evaluate(part, loop.scope) is not True:
            return None
    return limit
