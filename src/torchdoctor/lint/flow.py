"""Where a DataLoader goes: the loops that iterate it and whether they run again (an epoch loop
around them), followed through names, `self` attributes, return values, arguments of the
file's own functions and constructors, `iter()`/`next()`, and into helpers imported from the
project that train on it (`train_one_epoch(model, loader, optimizer)`). A function of the file
that returns what `next()` drew from a loader (a wrapper class's `def next(self): return
next(self.it)`) hands out its batches: a loop that calls it draws from that loader.

A DataLoader built inside a function that passes on its `**kwargs` (a wrapper class's
`__init__(self, dataset, **kwargs)`) takes the keywords of that function's one call in the file.

The values are pulled from each place a loader could be used back to the `DataLoader(...)` calls
that can reach it, and every step of that is computed once per file (memoized), so the work
grows with the size of the file, not with loaders times loops. A name seen at a point of the
code holds what its last binding before that point gave it (and what bindings in branches
since then may have given it): a script that reuses `loader = DataLoader(...)` for several
datasets has each loop iterate its own loader.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from torchdoctor.lint.bindings import Binding, argument_for, forwarded_keywords, visible_bindings
from torchdoctor.lint.context import STEP, Region, nearest_loop
from torchdoctor.lint.model import Block, Scope, loop_iter, loop_variables
from torchdoctor.lint.names import call_tail, dotted, last_name

DATALOADER = "torch.utils.data.DataLoader"
EMPTY: frozenset = frozenset()
# Calls that hand back what they are given, for iterating: `enumerate(tqdm(loader))`.
_PASS_THROUGH = {"iter", "enumerate", "tqdm", "islice", "cycle", "prefetch", "zip", "chain", "prepare",
                 "prepare_data_loader", "MpDeviceLoader", "DeviceDataLoader"}
_MAX_DEPTH = 40  # chains of names longer than this are not followed (nor is recursion)


@dataclass
class LoaderUse:
    loop: Block | None  # None: an imported helper iterates it (`train_one_epoch(model, loader, ...)`)
    region: Region
    repeats: bool  # the loop is itself re-entered (an epoch loop, a caller's loop)
    line: int = 0  # the loop's line, or the helper call's
    # the calls in the loop that return this loader's batches (`loader.next()`); none: every
    # batch the loop draws may be the loader's
    draws: list[ast.Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.line and self.loop is not None:
            self.line = self.loop.line


@dataclass
class Loader:
    call: ast.Call
    block: Block
    uses: list[LoaderUse] = field(default_factory=list)
    # the keywords its function's caller passes through `**kwargs` to it, and the caller's block
    forwarded: dict[str, ast.expr] = field(default_factory=dict)
    forwarded_from: Block | None = None

    def scope_of(self, parameter: str) -> Scope:
        """Where the expression given for a DataLoader parameter is evaluated."""
        if self.forwarded_from is not None and parameter in self.forwarded:
            return self.forwarded_from.scope
        return self.block.scope

    @property
    def feeds_training(self) -> bool:
        return any(u.region.kind == STEP for u in self.uses)


class LoaderFlow:
    """Every torch DataLoader the file builds, with its uses; built once per file (`facts.loaders`)."""

    def __init__(self, facts):
        self.facts = facts
        self.context = facts.context
        self.loaders: list[Loader] = []
        by_call: dict[int, Loader] = {}
        aliases = _aliases(facts)
        for call, block in facts.model.calls_named("DataLoader", *aliases):
            if facts.qualify(call.func) == DATALOADER:
                loader = Loader(call, block)
                passed = forwarded_keywords(call, block.scope, self.context.call_sites(block.scope))
                if passed is not None:
                    loader.forwarded, loader.forwarded_from = passed
                self.loaders.append(loader)
                by_call[id(call)] = loader
        self._origins = by_call
        self._memo: dict[tuple, frozenset] = {}
        self._repeats: dict[tuple[int, int], bool] = {}
        self.loops_iterating: dict[int, frozenset] = {}  # id(loop) → the loaders (ids of calls) it draws from
        self._plain: set[int] | None = None
        self.draws: dict[int, list[ast.Call]] = {}  # id(loop) → its calls of functions that return a batch
        if self.loaders:
            self._find_uses()

    # -- uses ------------------------------------------------------------------------------
    def _find_uses(self) -> None:
        uses: dict[int, dict[int, LoaderUse]] = {id(l.call): {} for l in self.loaders}
        for loop in self.facts.model.loops:
            iterable = loop_iter(loop)
            if iterable is not None and loop.parent is not None:
                self._add(uses, self.sources(iterable, loop.parent), loop, self._picking_loop(iterable, loop))
        for call, block, loop in self.context.next_calls:
            if call.args:
                self._add(uses, self.sources(call.args[0], block), loop)
        for function in self.facts.model.scopes:
            drawn = self._drawn_by(function) if function.kind == "function" else EMPTY
            for call, block in self.context.callers(function) if drawn else ():
                loop = nearest_loop(block)
                if loop is not None:
                    self.draws.setdefault(id(loop), []).append(call)
                    # one batch per pass from an iterator the function keeps: the loop does not
                    # start the loader over (the function does, when the iterator runs out)
                    self._add(uses, drawn, loop, repeats=False, drawn_by=call)
        for call, block in self.context.steps.epoch_helpers:
            region = Region(STEP, False, f"`{last_name(call.func)}()`, a helper that trains on the loader,")
            for arg in (*call.args, *(k.value for k in call.keywords)):
                for origin in self.sources(arg, block):
                    if id(call) not in uses[origin]:
                        uses[origin][id(call)] = LoaderUse(None, region, self._entered_repeatedly(block, 0),
                                                           call.lineno)
        for loader in self.loaders:
            loader.uses = list(uses[id(loader.call)].values())

    def _add(self, uses: dict, origins: frozenset, loop: Block, picked_by: Block | None = None,
             repeats: bool | None = None, drawn_by: ast.Call | None = None) -> None:
        if not origins:
            return
        self.loops_iterating[id(loop)] = self.loops_iterating.get(id(loop), EMPTY) | origins
        # `for loader in (train, val): for x in loader:` iterates each loader once per pass of
        # what is around the picking loop, not once per pass of the picking loop
        if repeats is None:
            repeats = self.repeats(picked_by if picked_by is not None else loop)
        for origin in origins:
            use = uses[origin].get(id(loop))
            if use is None:
                use = uses[origin][id(loop)] = LoaderUse(loop, self.context.region(loop), repeats,
                                                         draws=[drawn_by] if drawn_by is not None else [])
            elif drawn_by is not None and use.draws:
                use.draws.append(drawn_by)

    def _picking_loop(self, iterable: ast.expr, loop: Block) -> Block | None:
        """The enclosing loop whose variable `iterable` is: `loader` in `for loader in loaders:`."""
        if not isinstance(iterable, ast.Name):
            return None
        for b in loop.parent.ancestors() if loop.parent is not None else ():
            if b.kind == "scope":
                return None
            if b.kind == "loop" and iterable.id in loop_variables(b):
                return b
        return None

    def yields_host_batches(self, loop: Block) -> bool:
        """The loop iterates only torch DataLoaders of the file that collate with the default
        function: its batches are made on the host (a `collate_fn` could move them)."""
        origins = self.loops_iterating.get(id(loop))
        if not origins:
            return False
        if self._plain is None:
            self._plain = {id(l.call) for l in self.loaders if not _custom_collate(l)}
        return origins <= self._plain

    def repeats(self, loop: Block) -> bool:
        """Is the loop started more than once: inside an outer loop, or in a function called in one."""
        return loop.parent is not None and self._entered_repeatedly(loop.parent, 0)

    def _entered_repeatedly(self, block: Block, depth: int) -> bool:
        key = (id(block), depth)
        if key not in self._repeats:
            self._repeats[key] = False  # cycle guard
            self._repeats[key] = self._compute_repeats(block, depth)
        return self._repeats[key]

    def _compute_repeats(self, block: Block, depth: int) -> bool:
        for b in block.ancestors():
            if b.kind == "loop" and not _runs_at_most_once(b, self.facts.values):
                return True
            if b.kind == "scope":
                if depth >= 2 or b.scope.kind != "function":
                    return False
                return any(self._entered_repeatedly(cb, depth + 1) for _, cb in self.context.callers(b.scope))
        return False

    # -- where values come from ------------------------------------------------------------
    def sources(self, expr: ast.expr, block: Block, depth: int = 0) -> frozenset:
        """The DataLoader calls (by id) whose loader `expr`, evaluated in `block`, may hold."""
        if depth > _MAX_DEPTH:
            return EMPTY
        t = type(expr)
        if t is ast.Name:
            return self._name(expr.id, block, (expr.lineno, expr.col_offset), depth)
        if t is ast.Call:
            if id(expr) in self._origins:
                return frozenset((id(expr),))
            tail = call_tail(expr)
            if tail in _PASS_THROUGH and expr.args:
                args = expr.args if tail in ("zip", "chain") else expr.args[:1]
                return frozenset().union(*(self.sources(a, block, depth + 1) for a in args))
            callee = self.context.local_callee(expr, block)
            return self._returns(callee, depth) if callee is not None else EMPTY
        if t is ast.Attribute:
            name = dotted(expr)
            if name is not None and name.count(".") == 1 and name.startswith("self."):
                return self._self_attribute(block.scope, expr.attr, depth)
            return EMPTY
        if t is ast.Starred:
            return self.sources(expr.value, block, depth + 1)
        if t is ast.IfExp:  # `train if training else val`
            return self.sources(expr.body, block, depth + 1) | self.sources(expr.orelse, block, depth + 1)
        if t is ast.BoolOp:  # `loader or make_loader()`
            return frozenset().union(*(self.sources(v, block, depth + 1) for v in expr.values))
        return EMPTY

    def _name(self, name: str, block: Block, position: tuple[int, int], depth: int) -> frozenset:
        scope, bindings, certain = visible_bindings(name, block, position)
        if scope is None:
            return EMPTY
        if scope is not block.scope:  # a closure or a global: any of its bindings
            return self._memoized(("all", id(scope), name), lambda: self._union(bindings, depth))
        found = self._union(bindings, depth)
        if not certain and name in scope.params:
            found |= self._param(scope, name, depth)
        return found

    def _union(self, bindings, depth: int) -> frozenset:
        found = EMPTY
        for binding in bindings:
            found |= self._binding(binding, depth)
        return found

    def _binding(self, binding: Binding, depth: int) -> frozenset:
        return self._memoized(("binding", id(binding)), lambda: self._binding_sources(binding, depth))

    def _binding_sources(self, binding: Binding, depth: int) -> frozenset:
        value = binding.value
        if value is None or binding.how == "with":
            return EMPTY
        if binding.how == "for":  # `for loader in (train_loader, val_loader)`
            if isinstance(value, (ast.Tuple, ast.List)):
                return frozenset().union(*(self.sources(e, binding.block, depth + 1) for e in value.elts))
            return EMPTY
        if binding.how != "=":
            return EMPTY
        if binding.index is not None:
            return self._element(value, binding.index, binding.block, depth)
        return self.sources(value, binding.block, depth + 1)

    def _element(self, value: ast.expr, index: int, block: Block, depth: int) -> frozenset:
        """Element `index` of `value`: `train, val = make_loaders()` where the helper returns a tuple."""
        if isinstance(value, ast.Call):
            callee = self.context.local_callee(value, block)
            if callee is not None:
                return self._memoized(("element", id(callee), index),
                                      lambda: self._returned_element(callee, index, depth))
        return EMPTY

    def _returned_element(self, function: Scope, index: int, depth: int) -> frozenset:
        found = EMPTY
        for returned, block in function.returns_at:
            if isinstance(returned, (ast.Tuple, ast.List)) and index < len(returned.elts):
                found |= self.sources(returned.elts[index], block, depth + 1)
        return found

    def _drawn_by(self, function: Scope) -> frozenset:
        """The loaders whose batches `function` returns: `return next(it)`, or a name it bound
        to `next(it)` (`batch = next(self.it)` in a `try`, again in its `except`)."""
        return self._memoized(("draws", id(function)), lambda: frozenset().union(
            *(self.sources(drawn.args[0], block) for returned, at in function.returns_at
              for drawn, block in _drawn_values(returned, at))))

    def _returns(self, function: Scope, depth: int) -> frozenset:
        return self._memoized(("returns", id(function)), lambda: frozenset().union(
            *(self.sources(r, b, depth + 1) for r, b in function.returns_at)))

    def _param(self, function: Scope, name: str, depth: int) -> frozenset:
        return self._memoized(("param", id(function), name), lambda: self._param_sources(function, name, depth))

    def _param_sources(self, function: Scope, name: str, depth: int) -> frozenset:
        found = EMPTY
        for call, block in self.context.call_sites(function):
            argument = argument_for(call, function, name)
            if argument is not None:
                found |= self.sources(argument, block, depth + 1)
        return found

    def _self_attribute(self, scope: Scope, attr: str, depth: int) -> frozenset:
        cls = scope.class_scope
        if cls is None:
            return EMPTY
        return self._memoized(("self", id(cls), attr), lambda: frozenset().union(
            *(self._union(method.bindings.get("self." + attr, ()), depth + 1)
              for method in cls.functions.values() if method.kind == "function")))

    def _memoized(self, key: tuple, compute) -> frozenset:
        found = self._memo.get(key)
        if found is None:
            self._memo[key] = EMPTY  # cycle guard: a value that flows back into itself adds nothing
            found = self._memo[key] = compute()
        return found


def _drawn_values(returned: ast.expr, block: Block) -> list[tuple[ast.Call, Block]]:
    """The `next(it)` calls a returned expression holds the value of, with their blocks."""
    if _is_next(returned):
        return [(returned, block)]
    if not isinstance(returned, ast.Name):
        return []
    scope, bindings, _ = visible_bindings(returned.id, block, (returned.lineno, returned.col_offset))
    if scope is not block.scope:
        return []
    return [(b.value, b.block) for b in bindings if b.how == "=" and b.index is None and _is_next(b.value)]


def _is_next(expr: ast.expr | None) -> bool:
    return type(expr) is ast.Call and getattr(expr.func, "id", "") == "next" and bool(expr.args)


def _custom_collate(loader: Loader) -> bool:
    """`collate_fn=` given (by keyword, position 7, or through `**kwargs` that may hold it)."""
    call = loader.call
    if loader.forwarded_from is not None and "collate_fn" in loader.forwarded:
        return True
    splat_unknown = loader.forwarded_from is None
    return len(call.args) > 6 or any(k.arg == "collate_fn" or k.arg is None and splat_unknown for k in call.keywords)


def _aliases(facts) -> list[str]:
    return [local for local, full in facts.imports.alias.items() if full.endswith(".DataLoader") and local != "DataLoader"]


def _runs_at_most_once(loop: Block, values) -> bool:
    iterable = loop_iter(loop)
    if isinstance(iterable, ast.Call) and getattr(iterable.func, "id", "") == "range" and iterable.args:
        bounds = [values.evaluate(a, loop.scope) for a in iterable.args[:2]]
        if all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            start, stop = (0, bounds[0]) if len(bounds) == 1 else bounds
            return stop - start <= 1
    return False
