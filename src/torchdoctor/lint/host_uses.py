"""Whether the host acts on a value it reads from a tensor right away: an action handed to an
environment (`envs.step(actions)` after `actions = q.argmax(1).cpu().numpy()`), an index into
a Python container (`vocab[i.item()]`). Such a read is required, not a habit: the sync is the
price of acting on the value, and only acting on a batch at a time makes it rarer.

The same words as `torchdoctor run` uses (rules/value_use.py): a value handed to a logging call,
kept by a call whose result is dropped (`meter.update(loss.item())`), summed or formatted could
be read rarely; one handed to another library's call whose result the code goes on with is
needed now. Only the read's own statement and, when it assigns the value to a name, that name's
reads later in the same loop pass are looked at; a value fed back to torch or NumPy is not
needed on the host (the round trip is the habit), and neither is one with autograd history (a
loss handed to a metrics helper is no decision).
"""

from __future__ import annotations

import ast

from torchdoctor.lint.model import Block, statement_of
from torchdoctor.lint.names import call_tail, short_source
from torchdoctor.rules.value_use import CASTS, LOG_CALLS

# Calls a value passes through on its way to its use: `int(a.item())`.
_PASSING = CASTS | {"round", "abs", "list", "tuple"}
_BUILTINS = {"len", "str", "repr", "sum", "max", "min", "sorted", "range", "enumerate", "zip", "isinstance",
             "dict", "set", "any", "all", "float", "int", "bool"}
_ACCEPTED_LIBRARIES = ("torch.", "numpy.", "math.", "statistics.")
_LOOP_STATEMENTS = (ast.For, ast.AsyncFor, ast.While)


class HostUses:
    """Asked once per candidate read. Only the read's own statement is walked (found by line in
    its block's statements), and the later uses of a name it is assigned to are the calls that
    take the name as an argument (indexed once per file): nothing here grows with the size of
    the loop or function around the read."""

    def __init__(self, facts):
        self.facts = facts
        self._by_argument: dict[str, list[tuple[ast.Call, Block]]] | None = None
        self._lines: dict[int, list[int]] = {}  # the tree lives as long as this object: ids stay valid

    def needed_by(self, read: ast.AST, block: Block) -> str | None:
        """The call (or container) that needs the value `read` gives, in words; None when the
        host could read it rarely, or when the value has autograd history (a loss, an activation:
        no decision the program acts on, whatever helper it is handed to)."""
        if not self._without_history(read, block):
            return None
        statement = statement_of(read, block, self._lines)
        if statement is None:
            return None
        use = self._use(read, _parents(statement), statement, block)
        if not isinstance(use, tuple):
            return use
        name, after = use
        root = _pass_root(block)
        for call, where in self._calls_taking(name):
            if call.lineno > after and any(b.node is root for b in where.ancestors()):
                found = self._handed_to(call, statement_of(call, where, self._lines), where)
                if found:
                    return found
        return None

    def _use(self, node: ast.AST, parents: dict[int, ast.AST], statement: ast.stmt, block: Block):
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
                if call_tail(parent) in _PASSING:
                    node = parent
                    continue
                return self._handed_to(parent, statement, block)
            if t is ast.Subscript and node is parent.slice:
                if self.facts.kinds.is_tensor(parent.value, block.scope):
                    return None  # a tensor could be indexed with the tensor itself
                return f"an index into `{short_source(parent.value)}`"
            if t is ast.Assign and len(parent.targets) == 1 and type(parent.targets[0]) is ast.Name:
                return parent.targets[0].id, parent.end_lineno or parent.lineno
            return None

    def _handed_to(self, call: ast.Call, statement: ast.stmt | None, block: Block) -> str | None:
        """The call's words when it needs the value it is handed now: not a logging call, not
        torch or Python arithmetic, and its result is used (`rb.add(obs, actions)` on its own keeps
        the value; the code does not wait on a result)."""
        if call_tail(call) in LOG_CALLS or self._not_the_host(call, block):
            return None
        if statement is None or (isinstance(statement, ast.Expr) and statement.value is call):
            return None
        return f"`{short_source(call.func)}`"

    def _calls_taking(self, name: str) -> list[tuple[ast.Call, Block]]:
        if self._by_argument is None:
            self._by_argument = {}
            for call, block in self.facts.model.calls:
                for argument in call.args:
                    if type(argument) is ast.Name:
                        self._by_argument.setdefault(argument.id, []).append((call, block))
        return self._by_argument.get(name, [])

    def _without_history(self, read: ast.AST, block: Block) -> bool:
        """The value read has no autograd history: made under `torch.no_grad()`, or by an op that
        gives none (`argmax`, `sample()`, `.detach()`, `.data`, a comparison), here or where the
        name it reads was bound."""
        if _under_no_grad(block, self.facts):
            return True
        if _historyless(read):
            return True
        receiver = read.func.value if isinstance(read, ast.Call) and isinstance(read.func, ast.Attribute) else None
        while isinstance(receiver, (ast.Call, ast.Attribute, ast.Subscript)):
            receiver = receiver.func if isinstance(receiver, ast.Call) else receiver.value
        if isinstance(receiver, ast.Name):
            found = self.facts.values.definition(receiver.id, block.scope)
            if found is not None and found[0] is not None:
                return _historyless(found[0])
        return False

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


_NO_HISTORY = {"detach", "argmax", "argmin", "sample", "multinomial", "randint", "randperm", "bernoulli"}
_NO_GRAD = {"torch.no_grad", "torch.inference_mode"}


def _historyless(expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and call_tail(node) in _NO_HISTORY:
            return True
        if isinstance(node, ast.Attribute) and node.attr == "data":
            return True
        if isinstance(node, ast.Compare):
            return True
    return False


def _under_no_grad(block: Block, facts) -> bool:
    for b in block.ancestors():
        if b.kind == "with" and any((facts.qualify(_called(i.context_expr)) or "") in _NO_GRAD for i in b.node.items):
            return True
        if b.kind == "scope":
            node = b.node
            return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                (facts.qualify(_called(d)) or "") in _NO_GRAD for d in node.decorator_list)
    return False


def _called(expr: ast.expr) -> ast.expr:
    return expr.func if isinstance(expr, ast.Call) else expr


def _parents(statement: ast.stmt) -> dict[int, ast.AST]:
    parents: dict[int, ast.AST] = {}
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.stmt):  # a compound statement's body is other statements
                parents[id(child)] = node
                stack.append(child)
    return parents


def _pass_root(block: Block) -> ast.AST:
    """The innermost loop statement around `block` (one pass of it is where the value is used),
    or its function."""
    for b in block.ancestors():
        if b.kind == "scope" or (b.kind == "loop" and isinstance(b.node, _LOOP_STATEMENTS)):
            return b.node
    return block.node
