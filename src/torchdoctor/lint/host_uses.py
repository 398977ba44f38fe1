"""Whether the host acts on a value it reads from a tensor right away: an action handed to an
environment (`envs.step(actions)` after `actions = q.argmax(1).cpu().numpy()`), an index into
a Python container (`vocab[i.item()]`). Such a read is required, not a habit: the sync is the
price of acting on the value, and only acting on a batch at a time makes it rarer.

The same words as `torchdoctor run` uses (rules/value_use.py): a value handed to a logging call,
kept by a call whose result is dropped (`meter.update(loss.item())`), summed or formatted could
be read rarely; one handed to another library's call whose result the code goes on with is
needed now. Only the read's own statement and, when it assigns the value to a name, that name's
reads later in the same loop pass are looked at; a value fed back to torch or NumPy is not
needed on the host (the round trip is the habit).
"""

from __future__ import annotations

import ast

from torchdoctor.lint.model import Block
from torchdoctor.lint.names import call_tail, short_source
from torchdoctor.rules.value_use import CASTS, LOG_CALLS

# Calls a value passes through on its way to its use: `int(a.item())`.
_PASSING = CASTS | {"round", "abs", "list", "tuple"}
_BUILTINS = {"len", "str", "repr", "sum", "max", "min", "sorted", "range", "enumerate", "zip", "isinstance",
             "dict", "set", "any", "all", "float", "int", "bool"}
_ACCEPTED_LIBRARIES = ("torch.", "numpy.", "math.", "statistics.")
_LOOP_STATEMENTS = (ast.For, ast.AsyncFor, ast.While)


class HostUses:
    """Asked once per candidate read; the parent links of a loop (or function) are made once."""

    def __init__(self, facts):
        self.facts = facts
        self._trees: dict[int, tuple[dict[int, ast.AST], dict[str, list[ast.Name]]]] = {}

    def needed_by(self, read: ast.AST, block: Block) -> str | None:
        """The call (or container) that needs the value `read` gives, in words; None when the
        host could read it rarely."""
        root = _pass_root(block)
        parents, loads = self._tree(root)
        use = self._use(read, parents, block)
        if not isinstance(use, tuple):
            return use
        name, after = use
        for load in loads.get(name, ()):
            if load.lineno > after:
                found = self._use(load, parents, block)
                if isinstance(found, str):
                    return found
        return None

    def _use(self, node: ast.AST, parents: dict[int, ast.AST], block: Block):
        """What the value of `node` goes into: the needing call's words, a (name, line) it is
        assigned to, or None."""
        while True:
            parent = parents.get(id(node))
            if parent is None:
                return None
            t = type(parent)
            if t is ast.Attribute or (t is ast.Call and node is parent.func) or t in (ast.Tuple, ast.List):
                node = parent  # `x.cpu().numpy()`, `[a.item()]`: still the value
                continue
            if t is ast.Call:
                tail = call_tail(parent)
                if tail in _PASSING:
                    node = parent
                    continue
                if tail in LOG_CALLS or self._not_the_host(parent, block):
                    return None
                if isinstance(parents.get(id(parent)), ast.Expr):
                    return None  # `rb.add(obs, actions)`: kept, the code does not wait on a result
                return f"`{short_source(parent.func)}`"
            if t is ast.Subscript and node is parent.slice:
                if self.facts.kinds.is_tensor(parent.value, block.scope):
                    return None  # a tensor could be indexed with the tensor itself
                return f"an index into `{short_source(parent.value)}`"
            if t is ast.Assign and len(parent.targets) == 1 and type(parent.targets[0]) is ast.Name:
                return parent.targets[0].id, parent.end_lineno or parent.lineno
            return None

    def _not_the_host(self, call: ast.Call, block: Block) -> bool:
        """torch, NumPy and Python's own functions, and methods of a tensor: the value goes back
        into arithmetic the device could have done."""
        func = call.func
        qualified = self.facts.qualify(func) or ""
        if qualified.startswith(_ACCEPTED_LIBRARIES):
            return True
        if type(func) is ast.Name and func.id in _BUILTINS and not qualified:
            return True
        return type(func) is ast.Attribute and self.facts.kinds.is_tensor(func.value, block.scope)

    def _tree(self, root: ast.AST):
        key = id(root)
        if key not in self._trees:
            parents: dict[int, ast.AST] = {}
            loads: dict[str, list[ast.Name]] = {}
            for node in ast.walk(root):
                for child in ast.iter_child_nodes(node):
                    parents[id(child)] = node
                if type(node) is ast.Name and type(node.ctx) is ast.Load:
                    loads.setdefault(node.id, []).append(node)
            self._trees[key] = parents, loads
        return self._trees[key]


def _pass_root(block: Block) -> ast.AST:
    """The innermost loop statement around `block` (one pass of it is where the value is used),
    or its function."""
    for b in block.ancestors():
        if b.kind == "scope" or (b.kind == "loop" and isinstance(b.node, _LOOP_STATEMENTS)):
            return b.node
    return block.node
