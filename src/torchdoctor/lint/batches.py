"""What a loop does with the batches it draws: the names that hold them (its targets, what
`next(it)` gives in it or a function of the file that returns a batch (`batch =
loader.next()`, `flow.py`), and what the function derives from those), and the `.to(device)` /
`.cuda()` calls that move them, in the loop or one call down into a function of the file.

Built once per file (`facts.batches`) and memoized per loop and per set of names, so asking
about every loop of a long script costs time in proportion to the script.
"""

from __future__ import annotations

import ast
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

from torchdoctor.lint.model import Block, Scope, loop_targets, names_in
from torchdoctor.lint.values import device_type

if TYPE_CHECKING:
    from torchdoctor.lint.facts import Facts

_DTYPES = {"float", "float16", "half", "bfloat16", "float32", "float64", "double", "int", "int8", "int16",
           "int32", "int64", "long", "short", "bool", "uint8", "complex64", "complex128", "cfloat"}
_DERIVATION_STEPS = 3  # x = batch["x"]; x = x.float(); xs = [x, y]: a few steps of derivation
_MOVES = ("to", "cuda")


class Batches:
    def __init__(self, facts):
        self.facts = facts
        self.context = facts.context
        self._edges: dict[int, dict[str, set[str]]] = {}
        self._derived: dict[tuple[int, frozenset], frozenset] = {}
        self._next_indexed = False
        self._next_targets: dict[int, set[str]] = {}  # id(next call) → the names it is assigned to
        self._scope_next_names: dict[int, set[str]] = {}
        self._sorted_calls: dict[int, tuple[list, list]] = {}
        self._sorted_bindings: dict[int, tuple[list, list]] = {}
        self._transfers: dict[tuple, list[tuple[ast.Call, Scope]]] = {}
        self._callee_moves: dict[tuple[int, frozenset], list[ast.Call]] = {}
        self._goes_to_cuda: dict[tuple[int, str], bool] = {}  # (id(scope), device name) → `.to(name)` may go to CUDA

    # -- names -----------------------------------------------------------------------------
    def names(self, loop: Block) -> set[str]:
        """Names holding this loop's batches: its targets, names bound from `next(it)` in it (or,
        for a loop with neither, from any `next` of its function), and what is derived from them."""
        self._index_next_calls()
        names: set[str] = set()
        for target in loop_targets(loop):
            names |= names_in(target)
        for call in (*self.context.drawing_loops.get(id(loop), ()), *self.facts.loaders.draws.get(id(loop), ())):
            names |= self._next_targets.get(id(call), set())
        if not names:  # `x, y = next(it)` before a `while True:` that uses them
            names = set(self._scope_next_names.get(id(loop.scope), set()))
        return set(self.derived(names, loop.scope, loop))

    def derived(self, names: set[str], scope: Scope, loop: Block | None = None) -> frozenset:
        """`names` and the names assigned from them (a few steps deep): in `loop` when given (where
        a loop's own values flow), else anywhere in `scope`."""
        key = (id(loop if loop is not None else scope), frozenset(names))
        found = self._derived.get(key)
        if found is None:
            edges = self._derivations(scope, loop)
            found, frontier = set(names), set(names)
            for _ in range(_DERIVATION_STEPS):
                frontier = {t for n in frontier for t in edges.get(n, ())} - found
                if not frontier:
                    break
                found |= frontier
            found = self._derived[key] = frozenset(found)
        return found

    def _derivations(self, scope: Scope, loop: Block | None) -> dict[str, set[str]]:
        """name → the names assigned from expressions that read it, in the loop or the scope."""
        key = id(loop if loop is not None else scope)
        edges = self._edges.get(key)
        if edges is None:
            edges = self._edges[key] = {}
            for target, value in self._assignments(scope, loop):
                targets = names_in(target)
                for name in names_in(value):
                    edges.setdefault(name, set()).update(targets)
        return edges

    def _assignments(self, scope: Scope, loop: Block | None):
        if loop is None:
            return [(t, v) for t, v, _ in scope.assigns if v is not None]
        if id(scope) not in self._sorted_bindings:
            bindings = sorted((b for group in scope.bindings.values() for b in group if b.value is not None),
                              key=lambda b: b.position)
            self._sorted_bindings[id(scope)] = ([b.position for b in bindings], bindings)
        positions, bindings = self._sorted_bindings[id(scope)]
        node = loop.node
        start = bisect_left(positions, (node.lineno, node.col_offset))
        end = bisect_right(positions, (node.end_lineno or node.lineno, node.end_col_offset or 0))
        return [(b.target, b.value) for b in bindings[start:end] if _inside(b.block, loop)]

    def _index_next_calls(self) -> None:
        if self._next_indexed:
            return
        self._next_indexed = True
        drawing = {id(c) for calls in self.facts.loaders.draws.values() for c in calls}
        for scope in self.facts.model.scopes:
            for target, value, how in scope.assigns:
                if type(value) is ast.Call and (how == "=" and getattr(value.func, "id", "") == "next"
                                                or how in ("=", "for") and id(value) in drawing):
                    bound = names_in(target)
                    self._next_targets.setdefault(id(value), set()).update(bound)
                    self._scope_next_names.setdefault(id(scope), set()).update(bound)

    # -- transfers -------------------------------------------------------------------------
    def transfers(self, loop: Block, draws: list[ast.Call] | None = None) -> list[tuple[ast.Call, Scope]]:
        """`.to(device)` / `.cuda()` calls moving this loop's batches, in the loop or one call down;
        given `draws`, only the batches those calls return (`batch = loader.next()`)."""
        key = (id(loop), *(id(c) for c in draws or ()))
        found = self._transfers.get(key)
        if found is not None:
            return found
        found = []
        names = self.names(loop) if not draws else self._drawn_names(loop, draws)
        for call, block in self.calls_inside(loop):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr in _MOVES:
                if self._moves_batch(call, names, block.scope):
                    found.append((call, block.scope))
                continue
            callee = self.context.local_callee(call, block)  # `self.to_device(x, y)`: one call down
            received = _params_with(call, callee, names) if callee is not None else set()
            if received:
                found += [(c, callee) for c in self._moves_in(callee, received)]
        self._transfers[key] = found
        return found

    def _drawn_names(self, loop: Block, draws: list[ast.Call]) -> set[str]:
        """The names bound to what the calls return, or to each of its items (`for t in loader.next()`)."""
        self._index_next_calls()
        names = set().union(*(self._next_targets.get(id(c), set()) for c in draws))
        return set(self.derived(names, loop.scope, loop))

    def _moves_in(self, callee: Scope, received: set[str]) -> list[ast.Call]:
        key = (id(callee), frozenset(received))
        if key not in self._callee_moves:
            inner = self.derived(received, callee)
            self._callee_moves[key] = [c for c, _ in self.context.calls_in(callee)
                                       if isinstance(c.func, ast.Attribute) and c.func.attr in _MOVES
                                       and self._moves_batch(c, inner, callee)]
        return self._callee_moves[key]

    def _moves_batch(self, call: ast.Call, names: set[str], scope: Scope) -> bool:
        func = call.func
        if not isinstance(func, ast.Attribute) or not names_in(func.value) & names:
            return False
        if func.attr == "cuda":
            return True
        device = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
        if device is None:
            return False
        if type(device) is ast.Name:  # the same `device` is asked about in every loop of a script
            key = (id(scope), device.id)
            if key not in self._goes_to_cuda:
                self._goes_to_cuda[key] = _to_cuda(device, self.facts, scope)
            return self._goes_to_cuda[key]
        return _to_cuda(device, self.facts, scope)

    def calls_inside(self, loop: Block) -> list[tuple[ast.Call, Block]]:
        """The calls in the loop's body (and header), in its own function."""
        scope = loop.scope
        if id(scope) not in self._sorted_calls:
            calls = sorted(self.context.calls_in(scope), key=lambda cb: (cb[0].lineno, cb[0].col_offset))
            self._sorted_calls[id(scope)] = ([(c.lineno, c.col_offset) for c, _ in calls], calls)
        positions, calls = self._sorted_calls[id(scope)]
        node = loop.node
        start = bisect_left(positions, (node.lineno, node.col_offset))
        end = bisect_right(positions, (node.end_lineno or node.lineno, node.end_col_offset or 0))
        return [(call, block) for call, block in calls[start:end] if _inside(block, loop)]


def _to_cuda(device: ast.expr, facts: Facts, scope: Scope) -> bool:
    """`.to(device)` may be a copy to a CUDA device (not a dtype, a tensor's device, the CPU)."""
    if is_dtype(device, facts) or facts.kinds.is_tensor(device, scope):
        return False
    # pinned memory and non_blocking are about CUDA copies: a copy to the CPU, MPS or XPU is not one
    return device_type(device, facts.values, scope) in (None, "cuda")


def is_dtype(expr: ast.expr, facts: Facts) -> bool:
    name = facts.qualify(expr) or ""
    return name.startswith("torch.") and name.split(".")[-1] in _DTYPES


def _inside(block: Block, loop: Block) -> bool:
    for b in block.ancestors():
        if b is loop:
            return True
        if b.kind == "scope":
            return False
    return False


def _params_with(call: ast.Call, callee: Scope, names: set[str]) -> set[str]:
    params = callee.params
    offset = 1 if params and params[0] == "self" and isinstance(call.func, ast.Attribute) else 0
    received = {params[i + offset] for i, a in enumerate(call.args)
                if i + offset < len(params) and names_in(a) & names}
    return received | {k.arg for k in call.keywords if k.arg in params and names_in(k.value) & names}
