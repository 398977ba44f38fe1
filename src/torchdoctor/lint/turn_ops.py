"""TD301's loops over positions, time steps and samples: a Python loop in per-step code whose
every turn issues tensor ops of its own (a module call, a torch function, a write into a
tensor) on its own part of the data. Each turn is a few small kernels and autograd nodes; one
call on all the turns at once does the same work.

A turn works on its own part of the data when the loop variable (or a name made from it)
indexes a tensor (`emb[:, i, :]`, `rewards[t]`, `attn[i] = ...`), or when the turns' results
are collected and stacked (`outs.append(...)` then `torch.stack(outs)`, or a comprehension
handed to `torch.cat`): stacking needs results of one shape, so the turns could have been one.

Not this shape, by nature sequential or not per step:

- a stack of layers, `for block in self.blocks: x = block(x)` (another module each turn, each
  fed the last one's output); separate modules fed the same input and stacked (per-head modules
  in a list) are this shape: one fused module does them at once;
- one module applied again to its own output with no per-turn input (a weight-tied depth, a
  random number of times): nothing to batch;
- loops over parameters, buffers or param groups (the optimizer's and EMA's business), over
  a loader's batches, the training and evaluation loops themselves, and loops that run a
  random number of times;
- a loop over a Python list that sums per-item losses without stacking (deep supervision on
  outputs of different shapes): nothing shows the items could be one tensor.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from torchdoctor.lint.kinds import MODULE
from torchdoctor.lint.model import Block, Scope, loop_iter, loop_variables, names_in
from torchdoctor.lint.names import call_tail
from torchdoctor.lint.torch_api import BOOL, PLAIN_METHODS, TENSOR, qualified_kind

_STACKING = {"torch.stack", "torch.cat", "torch.concat", "torch.concatenate", "torch.hstack", "torch.vstack"}
_OWNED_BY_OPTIMIZER = {"parameters", "named_parameters", "buffers", "named_buffers", "param_groups", "state_dict",
                       "modules", "named_modules", "children", "named_children"}
_RANDOM = ("random.", "numpy.random.", "torch.randint")
# Tensor methods that are no compute of a turn: reads, moves (TD103/TD104's business), views
# (packing gradients with `p.grad.view(-1)` into one buffer launches nothing per tensor).
_NOT_OPS = PLAIN_METHODS | {"cpu", "to", "cuda", "append", "extend", "insert", "detach", "requires_grad_", "contiguous",
                            "view", "view_as", "flatten", "unsqueeze", "squeeze", "transpose", "permute", "t", "expand",
                            "expand_as", "unflatten"}
_NESTED = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class TurnLoop:
    loop: Block
    op: ast.AST  # the first op of a turn, for the words
    shape: str  # "recurrence" (feeds each turn's result to the next), "modules" (separate modules, one input), "turns"


class TurnOps:
    """Built once per file; `loops()` yields the loops of this shape in per-step code."""

    def __init__(self, facts):
        self.facts = facts
        self.kinds = facts.kinds
        self._stacked_names: dict[int, set[str]] = {}
        self._stacked_nodes: set[int] = set()
        self._issues_ops: dict[int, bool] = {}
        for call, block in facts.model.calls_named("stack", "cat", "concat", "concatenate", "hstack", "vstack"):
            if facts.qualify(call.func) in _STACKING and call.args:
                self._note_stacked(call.args[0], block.scope)

    def _note_stacked(self, arg: ast.expr, scope: Scope) -> None:
        if isinstance(arg, (ast.ListComp, ast.GeneratorExp)):
            self._stacked_nodes.add(id(arg))
        elif isinstance(arg, ast.Name):
            self._stacked_names.setdefault(id(scope), set()).add(arg.id)
            found = self.facts.values.definition(arg.id, scope)
            if found is not None and isinstance(found[0], (ast.ListComp, ast.GeneratorExp)):
                self._stacked_nodes.add(id(found[0]))  # `rows = [...]` then `torch.stack(rows)`

    def loops(self, wanted) -> Iterator[TurnLoop]:
        context = self.facts.context
        for loop in self.facts.model.loops:
            if loop.parent is None or not wanted(loop) or self._excluded(loop, context):
                continue
            found = self._turn_loop(loop)
            if found is not None:
                yield found

    def _excluded(self, loop: Block, context) -> bool:
        key = id(loop)
        if key in context.step_loops or key in context.eval_loops or key in context.loops_around_training \
                or key in context.drawing_loops or key in self.facts.loaders.loops_iterating:
            return True
        iterable = loop_iter(loop)
        if iterable is None:
            return True  # `while`: no turns to count
        for node in ast.walk(iterable):
            if isinstance(node, ast.Attribute) and node.attr in _OWNED_BY_OPTIMIZER:
                return True
            if isinstance(node, ast.Call) and (self.facts.qualify(node.func) or "").startswith(_RANDOM):
                return True
        return False

    def _turn_loop(self, loop: Block) -> TurnLoop | None:
        scope = loop.scope
        per_turn = self.facts.batches.derived(loop_variables(loop), scope, loop)
        # what changes from turn to turn: the loop's values and what the body rebinds (`idx = roll(idx)`)
        varying = per_turn | _rebound_in(loop.node)
        iterates_tensor = _rows_of_tensor(loop_iter(loop), scope, self.kinds)
        stacked_names = self._stacked_names.get(id(scope), set())
        collected = id(loop.node) in self._stacked_nodes and bool(_made_per_turn(loop.node) & per_turn)
        indexed = iterates_tensor
        op = None
        shape = "turns"
        for statement, node in _turn_nodes(loop.node):
            t = type(node)
            if t is ast.Call:
                kind = self._call_kind(node, scope, loop)
                if kind == "module-per-turn":
                    if self._feeds_itself(statement, node, loop):
                        return None  # a stack of layers
                    if not names_in(node) - names_in(node.func) & per_turn:
                        shape = "modules"  # separate modules, all fed the same input
                        op = op or node
                    continue
                if call_tail(node) == "append" and isinstance(node.func, ast.Attribute) and node.args \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id in stacked_names:
                    value = node.args[0]
                    if names_in(value) & varying:  # not `[torch.ones_like(t) for _ in range(n)]`
                        collected = True
                        if isinstance(value, (ast.Call, ast.BinOp, ast.UnaryOp)):
                            op = op or value
                    continue
                if kind and names_in(node) & varying:
                    op = op or node
                    if kind == "module" and self._feeds_itself(statement, node, loop):
                        shape = "recurrence"
            elif t is ast.Subscript and names_in(node.slice) & per_turn and self.kinds.is_tensor(node.value, scope):
                indexed = True
                if isinstance(node.ctx, ast.Store):
                    op = op or node
        if op is None or not (indexed or collected):
            return None
        if shape == "modules" and not collected:
            return None
        return TurnLoop(loop, op, shape)

    def _feeds_itself(self, statement: ast.stmt | None, call: ast.Call, loop: Block) -> bool:
        """`x = block(x)`, `ht = cell(xt, hprev); hprev = ht`: the call's result comes back into
        what it reads on the next turn."""
        if not isinstance(statement, ast.Assign):
            return False
        targets = set().union(*(names_in(t) for t in statement.targets))
        returned = self.facts.batches.derived(targets, loop.scope, loop)
        return bool(returned & (names_in(call) - names_in(call.func)))

    def _call_kind(self, call: ast.Call, scope: Scope, loop: Block) -> str | None:
        """"module" (the same module every turn), "module-per-turn" (the callee changes with the
        loop), "torch", "method" (a tensor op), "local" (a function of the file that issues ops),
        or None."""
        func = call.func
        if self.kinds.of(func, scope) == MODULE:
            return "module-per-turn" if names_in(func) & loop_variables(loop) else "module"
        qualified = self.facts.qualify(func)
        if qualified is not None:
            if qualified.startswith("torch.") and qualified_kind(qualified, call, lambda e: self.kinds.of(e, scope)) \
                    in (TENSOR, BOOL):
                return "torch"
            return None
        if isinstance(func, ast.Attribute) and func.attr not in _NOT_OPS and self.kinds.is_tensor(func.value, scope):
            return "method"
        callee = self.facts.context.local_callee(call, loop)
        if callee is not None and self._function_issues_ops(callee):
            return "local"
        return None

    def _function_issues_ops(self, function: Scope) -> bool:
        """The function's own code calls a module or a torch function (one level: no deeper)."""
        key = id(function)
        if key not in self._issues_ops:
            self._issues_ops[key] = False
            found = False
            for call, block in self.facts.context.calls_in(function):
                if self.kinds.of(call.func, function) == MODULE:
                    found = True
                    break
                qualified = self.facts.qualify(call.func) or ""
                if qualified.startswith("torch.") and qualified_kind(
                        qualified, call, lambda e: self.kinds.of(e, function)) in (TENSOR, BOOL):
                    found = True
                    break
            self._issues_ops[key] = found
        return self._issues_ops[key]




def _rebound_in(node: ast.AST) -> set[str]:
    """Names a `for` loop's own body assigns (a comprehension assigns none)."""
    if not isinstance(node, (ast.For, ast.AsyncFor)):
        return set()
    found: set[str] = set()
    for statement, _ in _turn_nodes(node):
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, (ast.Name, ast.Tuple, ast.List)):
                    found |= names_in(target)
    return found


def _made_per_turn(node: ast.AST) -> set[str]:
    """The names a comprehension's element is made from."""
    if isinstance(node, ast.DictComp):
        return names_in(node.key) | names_in(node.value)
    return names_in(node.elt) if hasattr(node, "elt") else set()


def _rows_of_tensor(iterable: ast.expr, scope: Scope, kinds) -> bool:
    """`for row in x` over a tensor the function holds; not over a name another loop binds
    (`for t in batch`: a batch is often a tuple of tensors, not rows)."""
    if not isinstance(iterable, ast.Name) or not kinds.is_tensor(iterable, scope):
        return False
    return not any(how == "for" and iterable.id in names_in(target) for target, _, how in scope.assigns)


def _turn_nodes(node: ast.AST) -> Iterator[tuple[ast.stmt | None, ast.AST]]:
    """(statement, node) for every node one turn of the loop runs, its nested loops, functions and
    comprehensions left out (they are loops of their own)."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        for statement in node.body:
            yield from _statement_nodes(statement)
        return
    parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
    for generator in node.generators[1:]:
        parts.append(generator.iter)
    for generator in node.generators:
        parts.extend(generator.ifs)
    for part in parts:
        for inner in _walk(part):
            yield None, inner


def _statement_nodes(statement: ast.stmt) -> Iterator[tuple[ast.stmt, ast.AST]]:
    if isinstance(statement, _NESTED):
        return
    for child in ast.iter_child_nodes(statement):
        if isinstance(child, ast.stmt):
            yield from _statement_nodes(child)
        elif isinstance(child, ast.excepthandler):
            for inner in child.body:
                yield from _statement_nodes(inner)
        else:
            for inner in _walk(child):
                yield statement, inner


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, _NESTED):
            continue
        yield current
        stack.extend(ast.iter_child_nodes(current))
