"""Launch-overhead habits: TD301 python-loop-ops, TD302 optimizer-foreach-off,
TD303 grad-zero-not-none.

TD301 is the reference report's `_apply_prompt`: a Python `for` over the batch (or sequence)
dimension that reads or writes one tensor element per iteration, in code that runs every
step. Each iteration is a separate tiny op (and autograd node); vectorized indexing does the
same work in one.
"""

from __future__ import annotations

import ast
from typing import Iterator

from torchdoctor.model.findings import Severity
from torchdoctor.lint.checks.base import Check, Hit, drop_argument
from torchdoctor.lint.context import Region
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.host_tensors import on_host
from torchdoctor.lint.model import (
    Block,
    Scope,
    enclosing_loops,
    loop_iter,
    loop_variables,
    names_in,
)
from torchdoctor.lint.names import dotted, short_source
from torchdoctor.lint.turn_ops import TurnOps
from torchdoctor.lint.values import Unknown, bind
from torchdoctor.rules.launch import CALLS_FIX


class PythonLoopOps(Check):
    codes = ("TD301",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        reported = []
        for hit in self._elements(facts):
            reported.append((hit.evidence["loop_line"], hit.node.lineno))
            yield hit
        yield from self._turns(facts, reported)

    def _turns(self, facts: Facts, reported: list[tuple[int, int]]) -> Iterator[Hit]:
        """Loops whose every turn issues tensor ops of its own (`turn_ops.py`), unless a loop
        around, in or at it is reported element by element already."""
        # per step only: a counting loop inside an evaluation is as often the evaluation's own
        # batch loop (`for k in range(eval_iters): x, y = get_batch()`) as a loop over positions
        hot = lambda loop: facts.context.region(loop.parent).per_step  # noqa: E731
        for found in TurnOps(facts).loops(hot):
            loop = found.loop
            first, last = loop.node.lineno, loop.node.end_lineno or loop.node.lineno
            if any(first <= line <= last or loop_line <= first <= line for loop_line, line in reported):
                continue
            region = facts.context.region(loop.parent)
            over = f"`{short_source(loop_iter(loop), 40)}`"
            yield Hit("TD301", loop.node, f"Python loop over {over} issues tensor ops on every turn",
                      f"the loop at line {loop.line} runs over {over} and every turn runs "
                      f"`{short_source(found.op, 40)}`, inside {region.via}: a few small ops (plus their autograd "
                      f"nodes) per turn, every step; {_TURN_ADVICE[found.shape]}", Severity.MEDIUM,
                      {"loop_line": loop.line, "iterates": over, "shape": found.shape},
                      # a call per turn (a cell, an embedding): one call on all items, not element indexing
                      advice=CALLS_FIX if isinstance(found.op, ast.Call) else None)

    def _elements(self, facts: Facts) -> Iterator[Hit]:
        """Loops over a tensor dimension that read or write one element per iteration."""
        dim_loops = {}
        for loop in facts.model.loops:
            over = self._dimension(loop, facts)
            if over is not None:
                dim_loops[id(loop)] = (loop, over)
        if not dim_loops:
            return
        by_line: dict[int, tuple] = {}
        recurrences = _recurrence_reads(facts, lambda block: self._enclosing_dim_loop(block, dim_loops) is not None)
        for sub, block in facts.model.subscripts:
            found = self._enclosing_dim_loop(block, dim_loops)
            if found is None or id(sub) in recurrences:
                continue
            loop, over, loop_vars = found
            if not names_in(sub.slice) & loop_vars or not facts.kinds.is_tensor(sub.value, block.scope):
                continue
            region = facts.context.region(block)
            if not (region.per_step or region.per_eval_batch):
                continue
            store = isinstance(sub.ctx, ast.Store)
            current = by_line.get(sub.lineno)
            if current is None or (store and not current[2]):
                by_line[sub.lineno] = (sub, loop, store, over, region, on_host(sub.value, block, facts))
        for call, loop, over, region in self._row_updates(facts, dim_loops):
            by_line[call.lineno] = (call, loop, True, over, region, False)  # a write: it wins over a read
        for line in sorted(by_line):
            sub, loop, store, over, region, host = by_line[line]
            verb = "writes" if store else "reads"
            op = "one small op on the host (no GPU sync: the tensor is on the CPU)" if host else (
                "one small op (plus its autograd node)" if region.per_step else "one small op")
            cost = f"{op} per element, " + ("every step" if region.per_step else "for every evaluation batch")
            yield Hit("TD301", sub, f"Python loop over {over} {verb} one tensor element per iteration",
                      f"the loop at line {loop.line} runs over {over} and {verb} `{short_source(sub)}` once per "
                      f"iteration, inside {region.via}: {cost}; index all elements at once instead",
                      Severity.MEDIUM if store else Severity.LOW,
                      {"loop_line": loop.line, "iterates": over, "access": verb})

    def _row_updates(self, facts: Facts, dim_loops: dict) -> Iterator[tuple[ast.Call, Block, str, Region]]:
        """`for row in x: row.mul_(2)`: an in-place op on each row of a tensor, in per-step code.
        A loop over a name the file draws from another loop (`for t in batch`) is left alone:
        that may be a tuple of tensors, not rows."""
        for tail, calls in facts.model.calls_by_tail.items():
            if not tail.endswith("_") or tail.startswith("_"):
                continue
            for call, block in calls:
                receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
                found = self._enclosing_dim_loop(block, dim_loops) if isinstance(receiver, ast.Name) else None
                if found is None or not self._over_rows(found[0], facts) or receiver.id not in loop_variables(found[0]):
                    continue
                region = facts.context.region(block)
                if region.per_step or region.per_eval_batch:
                    yield call, found[0], found[1], region

    @staticmethod
    def _over_rows(loop: Block, facts: Facts) -> bool:
        iterable = loop_iter(loop)
        if not isinstance(iterable, ast.Name) or not facts.kinds.is_tensor(iterable, loop.scope):
            return False
        return not any(how == "for" and iterable.id in names_in(target) for target, _, how in loop.scope.assigns)

    def _dimension(self, loop: Block, facts: Facts) -> str | None:
        """What tensor dimension the loop walks (`inputs.shape[0]`), or None."""
        iterable = loop_iter(loop)
        if iterable is None:
            return None
        scope = loop.scope
        if isinstance(iterable, ast.Call) and getattr(iterable.func, "id", "") == "enumerate" and iterable.args:
            iterable = iterable.args[0]
        if isinstance(iterable, ast.Call) and getattr(iterable.func, "id", "") == "range" and iterable.args:
            if len(iterable.args) == 3 and not (isinstance(iterable.args[2], ast.Constant) and iterable.args[2].value == 1):
                return None  # `range(0, n, batch)`: a chunk of the dimension per pass, not one element
            for bound in iterable.args[:2]:
                dim = _dimension_expr(bound, facts, scope)
                if dim:
                    return dim
            return None
        if facts.kinds.is_tensor(iterable, scope) and not isinstance(iterable, ast.Call):
            return f"the rows of `{short_source(iterable)}`"
        return None

    @staticmethod
    def _enclosing_dim_loop(block: Block, dim_loops: dict) -> tuple | None:
        loop_vars: set[str] = set()
        for b in enclosing_loops(block):
            loop_vars |= loop_variables(b)
            if id(b) in dim_loops:
                loop, over = dim_loops[id(b)]
                return loop, over, loop_vars
        return None


_TURN_ADVICE = {
    "recurrence": "the turns feed each other, so they run in order, but a fused recurrent module (nn.RNN, nn.GRU, "
                  "nn.LSTM) runs them all in one call, and what does not depend on the last turn can be computed "
                  "for all turns at once",
    "modules": "separate modules fed the same input: one module holding all their weights does it in one call "
               "(split its output)",
    "turns": "work on all turns at once instead (index with a tensor of all positions, or one call on the "
             "stacked input)",
}


def _recurrence_reads(facts: Facts, in_dimension_loop) -> set[int]:
    """Subscripts read in a recurrence, `hidden = cell(x[i], hidden)`: each pass needs the
    previous pass's result, so the elements cannot be taken all at once (an RNN over time).
    A running sum (`acc = acc + x[i]`) calls nothing with what it carries: it still vectorizes.
    Only assignments in the loops that matter are looked at."""
    found: set[int] = set()
    for statement, block in facts.model.assignments:
        if not isinstance(statement, ast.Assign) or not in_dimension_loop(block):
            continue
        carried = {name for t in statement.targets for name in _rebound(t)}
        passes_carried = any(
            isinstance(call, ast.Call) and any(
                dotted(n) in carried for a in (*call.args, *(k.value for k in call.keywords)) for n in ast.walk(a)
                if isinstance(n, (ast.Name, ast.Attribute)))
            for call in ast.walk(statement.value))
        if passes_carried:
            found.update(id(n) for n in ast.walk(statement.value) if isinstance(n, ast.Subscript))
    return found


def _rebound(target: ast.expr) -> Iterator[str]:
    """Names a target rebinds whole (`h`, `self.h`, `h, c`), not the parts of `x[i]` it writes."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _rebound(element.value if isinstance(element, ast.Starred) else element)
    elif isinstance(target, (ast.Name, ast.Attribute)) and dotted(target):
        yield dotted(target)


def _dimension_expr(expr: ast.expr, facts: Facts, scope: Scope, depth: int = 0) -> str | None:
    """`x.shape[0]`, `x.size(1)`, `len(x)` of a tensor, `B - 1`, or a name assigned one of those."""
    if isinstance(expr, ast.BinOp):
        return _dimension_expr(expr.left, facts, scope, depth) or _dimension_expr(expr.right, facts, scope, depth)
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape":
        return f"`{short_source(expr)}`"
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "size" and expr.args:
        if facts.kinds.is_tensor(expr.func.value, scope):
            return f"`{short_source(expr)}`"
    if isinstance(expr, ast.Call) and getattr(expr.func, "id", "") == "len" and len(expr.args) == 1:
        if facts.kinds.is_tensor(expr.args[0], scope):
            return f"`{short_source(expr)}`"
    if isinstance(expr, ast.Name) and depth < 2:
        found = facts.values.definition(expr.id, scope)
        if found is not None and found[0] is not None:
            inner = _dimension_expr(found[0], facts, found[1], depth + 1)
            return f"`{expr.id}` ({inner})" if inner else None
    return None


class ForeachOff(Check):
    codes = ("TD302",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        for tail, calls in facts.model.calls_by_tail.items():
            if tail[:1].isupper():
                yield from self._check(calls, facts)

    def _check(self, calls, facts: Facts) -> Iterator[Hit]:
        for call, block in calls:
            name = facts.qualify(call.func) or ""
            parts = name.split(".")
            if not (len(parts) == 3 and parts[:2] == ["torch", "optim"] and parts[2][:1].isupper()):
                continue
            expr = bind(call, ()).get("foreach")  # keyword-only in every torch.optim optimizer
            if expr is None:
                continue
            value = facts.values.evaluate(expr, block.scope)
            if isinstance(value, Unknown):
                yield Hit("TD302", call, f"{parts[2]} foreach set at run time",
                          f"foreach {value.why}; if it is False, `{parts[2]}.step()` loops over the parameters in "
                          f"Python: the runtime check will decide", Severity.INFO, {"optimizer": parts[2]})
            elif value is False:
                yield Hit("TD302", call, f"{parts[2]} created with foreach=False",
                          f"`{parts[2]}(..., foreach=False)` updates one parameter tensor at a time: about a dozen "
                          f"small ops per parameter in every `step()`, instead of a few multi-tensor kernels",
                          Severity.MEDIUM, {"optimizer": parts[2]})


class ZeroGradDense(Check):
    codes = ("TD303",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        yield from self._in_place(facts)
        for call, block in facts.model.calls_named("zero_grad"):
            if not isinstance(call.func, ast.Attribute):
                continue
            args = bind(call, ("set_to_none",))
            expr = args.get("set_to_none")
            if expr is None:
                continue
            value = facts.values.evaluate(expr, block.scope)
            if value is False:
                positional = 0 if call.args else None
                yield Hit("TD303", call, "zero_grad(set_to_none=False) writes zeros into every gradient",
                          f"`{short_source(call)}` fills every gradient with zeros each step (a memset per "
                          f"parameter), and backward then adds into them instead of writing fresh tensors",
                          Severity.MEDIUM, {"call": short_source(call)},
                          fix=drop_argument("set_to_none", positional) if args.editable else None)

    @staticmethod
    def _in_place(facts: Facts) -> Iterator[Hit]:
        """`w1.grad.zero_()` in the step: the same memset per tensor, written out by hand (low:
        on a few hand-made weights it is a few small kernels)."""
        by_block: dict[int, list[ast.Call]] = {}
        blocks = {}
        for call, block in facts.model.calls_named("zero_"):
            func = call.func
            if call.args or not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Attribute) \
                    or func.value.attr != "grad" or not facts.context.region(block).per_step:
                continue
            by_block.setdefault(id(block), []).append(call)
            blocks[id(block)] = block
        for key, calls in by_block.items():  # `w1.grad.zero_(); w2.grad.zero_()`: one place to change
            call = min(calls, key=lambda c: (c.lineno, c.col_offset))
            owner = short_source(call.func.value.value)
            more = f" (and {len(calls) - 1} more gradients here)" if len(calls) > 1 else ""
            yield Hit("TD303", call, f"`{owner}.grad` zeroed in place every step",
                      f"`{short_source(call)}`{more} inside {facts.context.region(blocks[key]).via} fills the "
                      f"gradient with zeros each step, and the next backward adds into it instead of writing a "
                      f"fresh tensor; `{owner}.grad = None` skips the fill", Severity.LOW,
                      {"call": short_source(call), "gradients": len(calls)})

