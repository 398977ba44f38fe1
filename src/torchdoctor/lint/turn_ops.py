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
  fed the last one's output), or another module each turn on that turn's own input (the
  clusters of an adaptive softmax, the levels of a feature pyramid); separate modules fed the
  same input and stacked (per-head modules in a list) are this shape: one fused module does
  them at once;
- one module applied again to its own output with no per-turn input (a weight-tied depth, a
  random number of times): nothing to batch;
- loops over parameters, buffers or param groups (`.parameters()`, a list named `params`: the
  optimizer's, the gradient clipper's and EMA's business), over
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
from torchdoctor.lint.model import (
    Block,
    Scope,
    loop_iter,
    loop_variables,
    names_in,
    statement_of,
)
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
        self._lines: dict[int, list[int]] = {}
        # id(loop) → what one turn of it runs itself (not its nested loops or functions), from the
        # file's indexed events: calls, subscripts and the names assignments rebind
        self._calls: dict[int, list[tuple[ast.Call, Block]]] = {}
        self._subscripts: dict[int, list[ast.Subscript]] = {}
        self._rebound: dict[int, set[str]] = {}
        self._indexed = False
        for call, block in facts.model.calls_named("stack", "cat", "concat", "concatenate", "hstack", "vstack"):
            if facts.qualify(call.func) in _STACKING and call.args:
                self._note_stacked(call.args[0], block.scope)

    def _index(self) -> None:
        """Made the first time a loop in per-step code is looked at."""
        self._indexed = True
        model = self.facts.model
        for call, block in model.calls:
            loop = _turn_of(block)
            if loop is not None:
                self._calls.setdefault(id(loop), []).append((call, block))
        for sub, block in model.subscripts:
            loop = _turn_of(block)
            if loop is not None:
                self._subscripts.setdefault(id(loop), []).append(sub)
        for statement, block in model.assignments:
            loop = _turn_of(block)
            if loop is not None:
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                rebound = self._rebound.setdefault(id(loop), set())
                for target in targets:
                    if isinstance(target, (ast.Name, ast.Tuple, ast.List)):
                        rebound |= names_in(target)

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
            if isinstance(node, (ast.Name, ast.Attribute)) and "param" in (
                    node.id if isinstance(node, ast.Name) else node.attr).lower():
                return True  # `for p in trainable_params`: a list of parameters
            if isinstance(node, ast.Call) and (self.facts.qualify(node.func) or "").startswith(_RANDOM):
                return True
        return False

    def _turn_loop(self, loop: Block) -> TurnLoop | None:
        if not self._indexed:
            self._index()
        calls, subscripts = self._calls.get(id(loop), ()), self._subscripts.get(id(loop), ())
        if not calls and not subscripts:
            return None
        scope = loop.scope
        per_turn = self.facts.batches.derived(loop_variables(loop), scope, loop)
        # what changes from turn to turn: the loop's values and what the body rebinds (`idx = roll(idx)`)
        varying = per_turn | self._rebound.get(id(loop), set())
        iterates_tensor = _rows_of_tensor(loop_iter(loop), scope, self.kinds)
        stacked_names = self._stacked_names.get(id(scope), set())
        collected = id(loop.node) in self._stacked_nodes and bool(_made_per_turn(loop.node) & per_turn)
        indexed = iterates_tensor
        op = None
        shape = "turns"
        for node in subscripts:
            if names_in(node.slice) & per_turn and self.kinds.is_tensor(node.value, scope):
                indexed = True
                if isinstance(node.ctx, ast.Store):
                    op = op or node
        for node, block in sorted(calls, key=lambda c: (c[0].lineno, c[0].col_offset)):
            if call_tail(node) == "append" and isinstance(node.func, ast.Attribute) and node.args \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in stacked_names:
                value = node.args[0]
                if names_in(value) & varying:  # not `[torch.ones_like(t) for _ in range(n)]`
                    collected = True
                    if isinstance(value, (ast.Call, ast.BinOp, ast.UnaryOp)):
                        op = op or value
                continue
            kind = self._call_kind(node, scope, loop)
            if kind == "module-per-turn":
                if self._feeds_itself(node, block, loop) or _argument_names(node) & per_turn:
                    return None  # a stack of layers; each turn's own module on its own input (clusters, levels)
                shape = "modules"  # separate modules, all fed the same input
                op = op or node
                continue
            if kind and names_in(node) & varying:
                op = op or node
                if kind == "module" and shape == "turns" and self._feeds_itself(node, block, loop):
                    shape = "recurrence"
        if op is None or not (indexed or collected):
            return None
        if shape == "modules" and not collected:
            return None
        return TurnLoop(loop, op, shape)

    def _feeds_itself(self, call: ast.Call, block: Block, loop: Block) -> bool:
        """`x = block(x)`, `ht = cell(xt, hprev); hprev = ht`: the call's result comes back into
        what it reads on the next turn."""
        statement = statement_of(call, block, self._lines)
        if not isinstance(statement, ast.Assign):
            return False
        targets = set().union(*(names_in(t) for t in statement.targets))
        returned = self.facts.batches.derived(targets, loop.scope, loop)
        return bool(returned & _argument_names(call))

    def _call_kind(self, call: ast.Call, scope: Scope, loop: Block) -> str | None:
        """"module" (the same module every turn), "module-per-turn" (the callee changes with the
        loop), "torch", "method" (a tensor op), "local" (a function of the file that issues ops),
        or None."""
        func = call.func
        if self.kinds.of(func, scope) == MODULE:
            return "module-per-turn" if names_in(func) & loop_variables(loop) else "module"
        if self.facts.qualify(func) is not None:
            return "torch" if self._torch_op(call, scope) else None
        if isinstance(func, ast.Attribute) and func.attr not in _NOT_OPS and self.kinds.is_tensor(func.value, scope):
            return "method"
        callee = self.facts.context.local_callee(call, loop)
        if callee is not None and self._function_issues_ops(callee):
            return "local"
        return None

    def _torch_op(self, call: ast.Call, scope: Scope) -> bool:
        """A torch function that gives a tensor (not `torch.cuda.synchronize()`, `torch.no_grad()`)."""
        qualified = self.facts.qualify(call.func) or ""
        return qualified.startswith("torch.") and qualified_kind(
            qualified, call, lambda e: self.kinds.of(e, scope)) in (TENSOR, BOOL)

    def _function_issues_ops(self, function: Scope) -> bool:
        """The function's own code calls a module or a torch function (one level: no deeper)."""
        key = id(function)
        if key not in self._issues_ops:
            self._issues_ops[key] = False  # a recursive function asks about itself
            self._issues_ops[key] = any(
                self.kinds.of(call.func, function) == MODULE or self._torch_op(call, function)
                for call, _ in self.facts.context.calls_in(function))
        return self._issues_ops[key]


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


def _argument_names(call: ast.Call) -> set[str]:
    """The names a call reads in its arguments (not in what it calls: `self.layers[i]`)."""
    found: set[str] = set()
    for argument in (*call.args, *(k.value for k in call.keywords)):
        found |= names_in(argument)
    return found


def _turn_of(block: Block) -> Block | None:
    """The loop whose every turn runs code in `block` itself (through ifs and withs, not into a
    nested function)."""
    for b in block.ancestors():
        if b.kind == "loop":
            return b
        if b.kind == "scope":
            return None
    return None
