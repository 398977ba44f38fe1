"""Where a DataLoader goes: the loops that iterate it (also through `iter()`/`next()` and one
call into a function of the same file), whether those loops run again (an epoch loop around
them), and which `.to(device)` calls move its batches.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from torchdoctor.lint.context import Region, nearest_loop
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.model import Block, Scope, loop_iter, loop_targets, names_in
from torchdoctor.lint.names import dotted
from torchdoctor.lint.values import Values

DATALOADER = "torch.utils.data.DataLoader"


@dataclass
class LoaderUse:
    loop: Block
    region: Region
    repeats: bool  # the loop is itself re-entered (an epoch loop, a caller's loop)


@dataclass
class Loader:
    call: ast.Call
    block: Block
    uses: list[LoaderUse] = field(default_factory=list)

    @property
    def feeds_training(self) -> bool:
        return any(u.region.kind == "step" for u in self.uses)


def find_loaders(facts: Facts) -> list[Loader]:
    loaders = []
    for call, block in facts.model.calls_named("DataLoader", *_aliases(facts)):
        if facts.qualify(call.func) == DATALOADER:
            loader = Loader(call, block)
            loader.uses = _uses(loader, facts)
            loaders.append(loader)
    return loaders


def _aliases(facts: Facts) -> list[str]:
    return [local for local, full in facts.imports.alias.items() if full.endswith(".DataLoader") and local != "DataLoader"]


def _uses(loader: Loader, facts: Facts) -> list[LoaderUse]:
    key, scope = _binding(loader, facts)
    loops = []
    for loop in facts.model.loops:
        iterable = loop_iter(loop)
        if iterable is loader.call or (iterable is not None and _contains(iterable, loader.call)):
            loops.append(loop)
    if key is not None:
        loops += _loops_over(key, scope, facts, depth=0)
    else:  # `evaluate(DataLoader(...))`: the loader goes straight into a function of the file
        for call, block in facts.model.calls:
            if any(arg is loader.call for arg in (*call.args, *(k.value for k in call.keywords))):
                callee = facts.context.local_callee(call, block)
                for param in _params_receiving(call, callee, loader.call) if callee else ():
                    loops += _loops_over(param, callee, facts, depth=1)
    seen, uses = set(), []
    for loop in loops:
        if id(loop) not in seen:
            seen.add(id(loop))
            uses.append(LoaderUse(loop, facts.context.region(loop), repeats(loop, facts)))
    return uses


def _binding(loader: Loader, facts: Facts) -> tuple[str | None, Scope]:
    """The name (`loader`, `self.train_loader`) the DataLoader is assigned to."""
    scope = loader.block.scope
    for target, value, how in scope.assigns:
        if value is loader.call and how == "=":
            name = dotted(target)
            if name is not None:
                return name, scope
    return None, scope


def _loops_over(key: str, scope: Scope, facts: Facts, depth: int) -> list[Block]:
    """Loops that iterate `key` (a name bound in `scope`, or `self.attr`)."""
    found = []
    iterators = {key}
    for target, value, how in _related_assigns(key, scope):
        if how == "=" and isinstance(value, ast.Call) and getattr(value.func, "id", "") == "iter":
            iterators.add(dotted(target) or "")
    for loop in facts.model.loops:
        if _visible(loop.scope, key, scope):
            iterable = loop_iter(loop)
            if iterable is not None and key in _dotted_names(iterable):
                found.append(loop)
    for call, block in facts.model.calls_named("next"):  # `batch = next(it)` inside a `while`
        if call.args and dotted(call.args[0]) in iterators and _visible(block.scope, key, scope):
            loop = nearest_loop(block)
            if loop is not None:
                found.append(loop)
    if depth == 0:  # `train_one_epoch(model, loader)`, `Trainer(loader)`: follow the loader once
        for call, block in facts.model.calls:
            if not _visible(block.scope, key, scope):
                continue
            callee = facts.context.local_callee(call, block)
            if callee is not None:
                for param in _params_receiving(call, callee, key):
                    found += _loops_over(param, callee, facts, depth + 1)
            init = _constructor(call, facts)
            if init is not None:
                for param in _params_receiving(call, init, key):
                    for attr in _stored_as_attribute(param, init):
                        found += _loops_over(attr, init, facts, depth + 1)
    return found


def _constructor(call: ast.Call, facts: Facts) -> Scope | None:
    """`__init__` of the file's own class when `call` instantiates it."""
    if isinstance(call.func, ast.Name):
        cls = facts.model.module.functions.get(call.func.id)
        if cls is not None and cls.kind == "class":
            init = cls.functions.get("__init__")
            return init if init is not None and init.kind == "function" else None
    return None


def _stored_as_attribute(param: str, init: Scope) -> list[str]:
    """`self.loader = loader` in `__init__`: the attribute names a parameter is kept under."""
    return [dotted(target) for target, value, how in init.assigns
            if how == "=" and isinstance(value, ast.Name) and value.id == param
            and (dotted(target) or "").startswith("self.")]


def _related_assigns(key: str, scope: Scope):
    return [(t, v, h) for t, v, h in scope.assigns if v is not None and key in _dotted_names(v)]


def _visible(where: Scope, key: str, bound_in: Scope) -> bool:
    if key.startswith("self."):
        return where.class_scope is not None and where.class_scope is bound_in.class_scope
    current: Scope | None = where
    while current is not None:
        if current is bound_in:
            return True
        current = current.parent
    return False


def _params_receiving(call: ast.Call, callee: Scope, key: str | ast.expr) -> list[str]:
    """Parameters of `callee` that `call` passes `key` (a dotted name, or the expression itself) to."""
    params = callee.params
    bound_self = params and params[0] in ("self", "cls") and (
        isinstance(call.func, ast.Attribute) or callee.name == "__init__")
    offset = 1 if bound_self else 0

    def matches(arg: ast.expr) -> bool:
        return arg is key if isinstance(key, ast.expr) else dotted(arg) == key
    received = [params[i + offset] for i, arg in enumerate(call.args) if matches(arg) and i + offset < len(params)]
    return received + [kw.arg for kw in call.keywords if kw.arg and matches(kw.value)]


def repeats(loop: Block, facts: Facts) -> bool:
    """Is the loop started more than once: inside an outer loop, or in a function called in one."""
    return loop.parent is not None and _entered_repeatedly(loop.parent, facts, 0)


def _entered_repeatedly(block: Block, facts: Facts, depth: int) -> bool:
    for b in block.ancestors():
        if b.kind == "loop" and not _runs_at_most_once(b, facts.values):
            return True
        if b.kind == "scope":
            if depth >= 2 or b.scope.kind != "function":
                return False
            return any(_entered_repeatedly(cb, facts, depth + 1) for _, cb in facts.context.callers(b.scope))
    return False


def _runs_at_most_once(loop: Block, values: Values) -> bool:
    iterable = loop_iter(loop)
    if isinstance(iterable, ast.Call) and getattr(iterable.func, "id", "") == "range" and iterable.args:
        bounds = [values.evaluate(a, loop.scope) for a in iterable.args[:2]]
        if all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            start, stop = (0, bounds[0]) if len(bounds) == 1 else bounds
            return stop - start <= 1
    return False


def batch_names(loop: Block, facts: Facts) -> set[str]:
    """Names holding this loop's batches: its targets, names bound from `next(it)` in it, and what
    the scope derives from them."""
    names: set[str] = set()
    for target in loop_targets(loop):
        names |= names_in(target)
    drawn = {id(call) for call, block in facts.model.calls_named("next") if nearest_loop(block) is loop}
    for target, value, how in loop.scope.assigns:
        # `for step in range(n): batch = next(it)`; `while True: x, y = next(it)` (also when the
        # `next` sits outside the loop: the loop then has no names of its own)
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "next" and (
                id(value) in drawn or not loop_targets(loop)):
            names |= names_in(target)
    return derived_names(names, loop.scope)


def derived_names(names: set[str], scope: Scope) -> set[str]:
    names = set(names)
    for _ in range(3):  # x = batch["x"]; x = x.float(); xs = [x, y]: a few steps of derivation
        grew = False
        for target, value, how in scope.assigns:
            if value is not None and names_in(value) & names:
                for name in names_in(target) - names:
                    names.add(name)
                    grew = True
        if not grew:
            break
    return names


def _dotted_names(expr: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(expr):
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = dotted(node)
            if name:
                found.add(name)
    return found


def _contains(expr: ast.AST, target: ast.AST) -> bool:
    return any(node is target for node in ast.walk(expr))
