"""Bindings of names in source order, and which of them a use of the name may see: the last
binding before the use that certainly ran (in a block around the use), plus those in branches
since then. What a call passes for a parameter. Flow-sensitive enough that a script reusing
`loader = DataLoader(...)` for several datasets, or `x = x.to(device)`, reads right.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchdoctor.lint.model import Block, Scope


class Binding:
    """One binding of a name: `target` gets `value` (element `index` of it, for `a, b = value`)
    at `position`, the point in the source after which the new value is seen."""

    __slots__ = ("target", "value", "how", "block", "position", "index")

    def __init__(self, target: ast.expr, value: ast.expr | None, how: str, block: Block, index: int | None):
        self.target = target
        self.value = value
        self.how = how
        self.block = block
        self.index = index
        end = value if value is not None else target  # `x = f(x)` reads the old `x`
        self.position = (end.end_lineno or end.lineno, end.end_col_offset or 0)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Binding({self.how} @{self.position})"


BRANCH_BINDINGS = 32  # bindings in branches since the last certain one, looked at per use


def reaching_bindings(scope: Scope, name: str, block: Block, position: tuple[int, int]) -> tuple[list[Binding], bool]:
    """The bindings of `name` in `scope` whose value a use at `position` in `block` may see, and
    whether one of them certainly ran (it sits in a block around the use, so no branch skipped
    it). A use before every binding (a loop reading what its previous pass bound) may see any."""
    bindings = scope.bindings.get(name)
    if not bindings:
        return [], False
    positions = scope.positions.get(name)
    if positions is None:  # nearly always in order already (a walrus inside a value is not)
        bindings.sort(key=lambda b: b.position)
        positions = scope.positions[name] = [b.position for b in bindings]
    end = bisect_left(positions, position)
    if end == 0:
        return list(bindings), False
    around = {id(b) for b in block.ancestors()}
    reaching = []
    for binding in reversed(bindings[max(0, end - BRANCH_BINDINGS):end]):
        reaching.append(binding)
        if id(binding.block) in around:
            return reaching, True
    return reaching, False


def visible_bindings(name: str, block: Block, position: tuple[int, int]) -> tuple[Scope | None, list[Binding], bool]:
    """Where a use of `name` at `position` in `block` looks it up: the nearest scope around it
    that binds `name` or takes it as a parameter (methods do not see class-body names), the
    bindings the use may see there, and whether one of them certainly ran. In the block's own
    scope those are `reaching_bindings`; in an enclosing one (a closure or a global), any of its
    bindings, none certain. (None, [], False) when no scope binds the name."""
    scope: Scope | None = block.scope
    while scope is not None:
        if name in scope.bindings or name in scope.params:
            break
        scope = scope.parent
        while scope is not None and scope.kind == "class":
            scope = scope.parent
    if scope is None:
        return None, [], False
    if scope is not block.scope:
        return scope, scope.bindings.get(name, []), False
    reaching, certain = reaching_bindings(scope, name, block, position)
    return scope, reaching, certain


def argument_for(call: ast.Call, function: Scope, name: str) -> ast.expr | None:
    """What `call` passes for parameter `name` of `function` (a bound method skips `self`)."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    node = function.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return None
    params = [p.arg for p in (*node.args.posonlyargs, *node.args.args)]
    if name not in params:
        return None
    bound = params[0] in ("self", "cls") and (isinstance(call.func, ast.Attribute) or function.name == "__init__")
    index = params.index(name) - (1 if bound else 0)
    positional = call.args
    if index < 0 or any(isinstance(a, ast.Starred) for a in positional[:index + 1]):
        return None
    return positional[index] if index < len(positional) else None


def forwarded_keywords(call: ast.Call, function: Scope,
                       sites: list[tuple[ast.Call, Block]]) -> tuple[dict[str, ast.expr], Block] | None:
    """`DataLoader(dataset, **kwargs)` inside `def __init__(self, dataset, **kwargs)`: the keywords
    that the function's one call site passes into its `**kwargs`, and the block that call is in
    (where those expressions are evaluated). None when `call` passes on no `**` parameter of its
    function untouched (read, changed or rebound elsewhere in it), or when the function is called
    from several places or with a `**mapping` of the caller's: the keywords are then not fixed."""
    node = function.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.args.kwarg is None or len(sites) != 1:
        return None
    kwarg = node.args.kwarg.arg
    splats = [k.value for k in call.keywords if k.arg is None]
    if len(splats) != 1 or not isinstance(splats[0], ast.Name) or splats[0].id != kwarg:
        return None
    if any(isinstance(n, ast.Name) and n.id == kwarg for n in ast.walk(node) if n is not splats[0]):
        return None
    site, block = sites[0]
    if any(k.arg is None for k in site.keywords):
        return None
    named = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
    return {k.arg: k.value for k in site.keywords if k.arg not in named}, block
