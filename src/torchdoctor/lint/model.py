"""One walk over a module's AST that records where code sits and what the checks look at.

Structure: every node lives in a chain of `Block`s (function, loop, periodic-looking `if`,
`with`, `raise`), innermost first. Events: calls (indexed by the called name), subscripts, branch
conditions, f-strings and assignments, each with its innermost block. The walk decides
nothing; `context.py` later says which loops are training loops, which blocks are guarded.
One pass keeps the linter fast: parsing dominates, and every check reads these lists.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from collections import defaultdict
from typing import Iterator

from torchdoctor.lint.bindings import Binding
from torchdoctor.lint.names import Imports, call_tail

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Methods whose receiver can only be a tensor (or an array): evidence for an unannotated parameter.
TENSOR_EVIDENCE = frozenset({
    "shape", "size", "dim", "ndim", "numel", "unsqueeze", "squeeze", "view", "reshape", "permute", "transpose",
    "contiguous", "detach", "item", "masked_fill", "index_select", "argmax", "softmax", "expand", "index_copy_",
    "scatter_", "gather", "flatten"})
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class Scope:
    """A function, lambda, class body or the module: where names are bound."""

    __slots__ = ("kind", "node", "name", "parent", "class_scope", "block", "functions", "assigns", "returns_at",
                 "bindings", "positions", "tensor_evidence")

    def __init__(self, kind: str, node: ast.AST, name: str, parent: Scope | None, class_scope: Scope | None):
        self.kind = kind
        self.node = node
        self.name = name
        self.parent = parent
        self.class_scope = class_scope  # for methods: the class body they belong to
        self.block: Block | None = None
        self.functions: dict[str, Scope] = {}  # defs directly inside (methods, for a class)
        # (target, value, how): how is "=" for assignments, "+=" etc. for augmented ones,
        # "for" when the target is a loop variable bound from `value` (the iterable)
        self.assigns: list[tuple[ast.expr, ast.expr | None, str]] = []
        # returned expressions, for what a local call gives back, with the block each is returned from
        self.returns_at: list[tuple[ast.expr, Block]] = []
        # name (or "self.attr") → its bindings in source order, for where a value flows
        self.bindings: dict[str, list[Binding]] = {}
        self.positions: dict[str, list[tuple[int, int]]] = {}  # the bindings' positions, made when asked
        self.tensor_evidence: set[str] = set()  # names used as tensors here (`x.shape`, `x.view(...)`)

    @property
    def params(self) -> list[str]:
        if not isinstance(self.node, (*_FUNCTIONS, ast.Lambda)):
            return []
        a = self.node.args
        return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Scope({self.kind} {self.name})"


class Block:
    """A region code runs in: kind is "scope" (a Scope's body), "loop", "if" (a branch of an `if`
    statement or of a conditional expression), "with", or "error" (a `raise` statement or an
    `assert`'s message: code that runs only on the way to an exception)."""

    __slots__ = ("kind", "node", "parent", "scope", "branch")

    def __init__(self, kind: str, node: ast.AST, parent: Block | None, scope: Scope, branch: str = ""):
        self.kind = kind
        self.node = node
        self.parent = parent
        self.scope = scope
        self.branch = branch  # for "if": "body" or "orelse"

    def ancestors(self) -> Iterator[Block]:
        block: Block | None = self
        while block is not None:
            yield block
            block = block.parent

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 1)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Block({self.kind}@{self.line})"


Event = tuple  # (node, block)


class FileModel:
    """Everything one walk learns about a module; checks read it, never the raw tree."""

    def __init__(self, tree: ast.Module, text: str):
        self.tree = tree
        self.text = text
        self.imports = Imports()
        self.calls: list[tuple[ast.Call, Block]] = []
        self.calls_by_tail: dict[str, list[tuple[ast.Call, Block]]] = defaultdict(list)
        self.subscripts: list[tuple[ast.Subscript, Block]] = []
        self.conditions: list[tuple[ast.expr, Block]] = []  # tests of if/while/assert/ifexp
        self.fstrings: list[tuple[ast.JoinedStr, Block]] = []
        self.percent_formats: list[tuple[ast.BinOp, Block]] = []  # `"%s" % x`
        self.assignments: list[tuple[ast.stmt, Block]] = []  # Assign/AugAssign/AnnAssign statements
        self.loops: list[Block] = []
        self.ifs: list[tuple[ast.If, Block]] = []  # every `if` statement, with the block it sits in
        self.then_break: set[int] = set()  # ids of calls that are a statement followed by `break`
        self.with_items: set[int] = set()  # ids of the expressions `with` statements enter
        self.method_on_result: dict[int, str] = {}  # id(call) → the attribute read on its result: `f().x`
        self.scopes: list[Scope] = []
        self._function_lines: list[str | None] | None = None
        self.module = Scope("module", tree, "<module>", None, None)
        self.module.block = Block("scope", tree, None, self.module)
        self.scopes.append(self.module)
        _Walker(self).statements(tree.body, self.module.block)

    def calls_named(self, *tails: str) -> Iterator[tuple[ast.Call, Block]]:
        for tail in tails:
            yield from self.calls_by_tail.get(tail, ())

    def function_at(self, line: int) -> str:
        """The name of the innermost function around `line` ("<module>" outside any)."""
        if self._function_lines is None:
            # Functions in the order they start: an inner one overwrites its part of the outer's lines.
            names: list[str | None] = [None] * (self.text.count("\n") + 2)
            functions = sorted((s for s in self.scopes if s.kind == "function"), key=lambda s: s.node.lineno)
            for scope in functions:
                start, end = scope.node.lineno, min(scope.node.end_lineno or scope.node.lineno, len(names) - 1)
                names[start:end + 1] = [scope.name] * (end + 1 - start)
            self._function_lines = names
        names = self._function_lines
        return (names[line] if 0 <= line < len(names) else None) or "<module>"


class _Walker:
    def __init__(self, model: FileModel):
        self.m = model

    # -- statements -------------------------------------------------------------------------
    def statements(self, body: list[ast.stmt], block: Block) -> None:
        for stmt in body:
            self.statement(stmt, block)
        self.note_breaks(body)

    def note_breaks(self, body: list[ast.stmt]) -> None:
        """A call that is a statement followed by `break` runs once, however long the loop."""
        for statement, following in zip(body, body[1:]):
            if type(following) is ast.Break and type(statement) is ast.Expr:
                self.m.then_break.add(id(statement.value))

    def statement(self, node: ast.stmt, block: Block) -> None:
        t = type(node)
        if t in _FUNCTIONS:
            self.function(node, block)
        elif t is ast.ClassDef:
            self.class_(node, block)
        elif t in (ast.For, ast.AsyncFor):
            self.expr(node.iter, block)
            loop = self.loop_block(node, block)
            self.bind(node.target, node.iter, "for", loop)
            self.expr(node.target, loop)
            self.statements(node.body, loop)
            self.statements(node.orelse, block)
        elif t is ast.While:
            loop = self.loop_block(node, block)
            self.m.conditions.append((node.test, loop))
            self.expr(node.test, loop)  # evaluated on every iteration
            self.statements(node.body, loop)
            self.statements(node.orelse, block)
        elif t is ast.If:
            # An `elif` chain is walked as the flat list it reads as, not as ever deeper `else`
            # blocks: generated dispatch code chains thousands of them.
            while True:
                self.m.conditions.append((node.test, block))
                self.m.ifs.append((node, block))
                self.expr(node.test, block)
                self.statements(node.body, Block("if", node, block, block.scope, "body"))
                orelse = node.orelse
                if len(orelse) == 1 and type(orelse[0]) is ast.If:
                    node = orelse[0]
                    continue
                if orelse:
                    self.statements(orelse, Block("if", node, block, block.scope, "orelse"))
                break
        elif t in (ast.With, ast.AsyncWith):
            for item in node.items:
                self.m.with_items.add(id(item.context_expr))
                self.expr(item.context_expr, block)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, item.context_expr, "with", block)
            inner = Block("with", node, block, block.scope)
            self.statements(node.body, inner)
        elif t is ast.Assign:
            self.m.assignments.append((node, block))
            self.expr(node.value, block)
            for target in node.targets:
                self.bind(target, node.value, "=", block)
                self.expr(target, block)
        elif t is ast.AugAssign:
            self.m.assignments.append((node, block))
            self.expr(node.value, block)
            self.bind(node.target, node.value, type(node.op).__name__, block)
            self.expr(node.target, block)
        elif t is ast.AnnAssign:
            self.m.assignments.append((node, block))
            if node.value is not None:
                self.expr(node.value, block)
                self.bind(node.target, node.value, "=", block)
            self.expr(node.target, block)
        elif t is ast.Assert:
            self.m.conditions.append((node.test, block))
            self.expr(node.test, block)
            if node.msg is not None:  # built only when the assertion fails
                self.expr(node.msg, Block("error", node, block, block.scope))
        elif t is ast.Raise:
            self.generic(node, Block("error", node, block, block.scope))
        elif t in (ast.Import, ast.ImportFrom):
            self.m.imports.add(node)
        elif t in (ast.Expr, ast.Return):
            if node.value is not None:
                self.expr(node.value, block)
                if t is ast.Return:
                    block.scope.returns_at.append((node.value, block))
        elif t in (ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal):
            return
        else:  # try, match, raise, delete, ...: visit what they contain
            self.generic(node, block)

    def generic(self, node: ast.AST, block: Block) -> None:
        for name in ("body", "orelse", "finalbody"):  # try/except, match cases
            statements = getattr(node, name, None)
            if type(statements) is list:
                self.note_breaks(statements)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                self.statement(child, block)
            elif isinstance(child, ast.expr):
                self.expr(child, block)
            else:  # handlers, match cases, withitems: containers of the above
                self.generic(child, block)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, block: Block) -> None:
        for dec in node.decorator_list:
            self.expr(dec, block)
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if default is not None:
                self.expr(default, block)
        parent = block.scope
        class_scope = parent if parent.kind == "class" else None
        scope = self.new_scope("function", node, node.name, parent, class_scope, block)
        parent.functions.setdefault(node.name, scope)
        self.statements(node.body, scope.block)

    def class_(self, node: ast.ClassDef, block: Block) -> None:
        for expr in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
            self.expr(expr, block)
        scope = self.new_scope("class", node, node.name, block.scope, None, block)
        block.scope.functions.setdefault(node.name, scope)
        self.statements(node.body, scope.block)

    def new_scope(self, kind, node, name, parent, class_scope, block) -> Scope:
        scope = Scope(kind, node, name, parent, class_scope)
        scope.block = Block("scope", node, block, scope)
        self.m.scopes.append(scope)
        return scope

    def loop_block(self, node: ast.AST, block: Block) -> Block:
        loop = Block("loop", node, block, block.scope)
        self.m.loops.append(loop)
        return loop

    def bind(self, target: ast.expr, value: ast.expr | None, how: str, block: Block) -> None:
        block.scope.assigns.append((target, value, how))
        bindings = block.scope.bindings
        if type(target) is ast.Name:
            bindings.setdefault(target.id, []).append(Binding(target, value, how, block, None))
        elif type(target) is ast.Attribute and type(target.value) is ast.Name and target.value.id == "self":
            bindings.setdefault("self." + target.attr, []).append(Binding(target, value, how, block, None))
        elif type(target) in (ast.Tuple, ast.List):
            literal = type(value) in (ast.Tuple, ast.List) and len(value.elts) == len(target.elts) and not any(
                type(e) is ast.Starred for e in target.elts)
            for index, element in enumerate(target.elts):
                if type(element) is ast.Starred:
                    element = element.value
                if type(element) in (ast.Name, ast.Attribute, ast.Tuple, ast.List):
                    if literal:
                        self.bind_nested(element, value.elts[index], how, block)
                    else:
                        self.bind_element(element, value, how, block, index)

    def bind_nested(self, target: ast.expr, value: ast.expr, how: str, block: Block) -> None:
        """`a, b = x, y`: each name is bound to its own element (recorded once, in `assigns` already)."""
        assigns = block.scope.assigns
        self.bind(target, value, how, block)
        assigns.pop()  # the whole statement is in `assigns` already

    def bind_element(self, target: ast.expr, value: ast.expr | None, how: str, block: Block, index: int) -> None:
        bindings = block.scope.bindings
        if type(target) is ast.Name:
            bindings.setdefault(target.id, []).append(Binding(target, value, how, block, index))
        elif type(target) is ast.Attribute and type(target.value) is ast.Name and target.value.id == "self":
            bindings.setdefault("self." + target.attr, []).append(Binding(target, value, how, block, index))
        elif type(target) in (ast.Tuple, ast.List):  # `(a, b), c = value`: deeper parts are not followed
            for element in target.elts:
                self.bind_element(element.value if type(element) is ast.Starred else element, None, how, block, 0)

    # -- expressions ------------------------------------------------------------------------
    def expr(self, root: ast.expr, block: Block) -> None:
        m = self.m
        evidence = block.scope.tensor_evidence
        stack = [root]
        while stack:
            node = stack.pop()
            t = type(node)
            if t is ast.Name or t is ast.Constant:
                continue
            if t is ast.Call:
                m.calls.append((node, block))
                m.calls_by_tail[call_tail(node)].append((node, block))
            elif t is ast.Attribute:
                if node.attr in TENSOR_EVIDENCE and type(node.value) is ast.Name:
                    evidence.add(node.value.id)
                elif type(node.value) is ast.Call:
                    m.method_on_result[id(node.value)] = node.attr
            elif t is ast.Subscript:
                m.subscripts.append((node, block))
            elif t is ast.JoinedStr:
                m.fstrings.append((node, block))
            elif t is ast.BinOp and type(node.op) is ast.Mod and type(node.left) is ast.Constant \
                    and isinstance(node.left.value, str):
                m.percent_formats.append((node, block))
            elif t is ast.IfExp:
                m.conditions.append((node.test, block))
                if _may_be_periodic(node.test):  # `loss.item() if step % 100 == 0 else None`: as an `if`
                    self.expr(node.test, block)
                    self.expr(node.body, Block("if", node, block, block.scope, "body"))
                    self.expr(node.orelse, Block("if", node, block, block.scope, "orelse"))
                    continue
            elif t is ast.Lambda:
                scope = self.new_scope("lambda", node, "<lambda>", block.scope, None, block)
                scope.returns_at.append((node.body, scope.block))
                self.expr(node.body, scope.block)
                continue
            elif t in _COMPREHENSIONS:
                self.comprehension(node, block)
                continue
            elif t is ast.NamedExpr:
                self.bind(node.target, node.value, "=", block)
            for name in _child_fields(t):  # what ast.iter_child_nodes does, minus ctx/op nodes
                child = getattr(node, name)
                if type(child) is list:
                    stack.extend(c for c in child if c is not None)
                elif child is not None:
                    stack.append(child)

    def comprehension(self, node: ast.AST, block: Block) -> None:
        """A comprehension is a loop: `[t.item() for t in losses]` reads every element."""
        first, *rest = node.generators
        self.expr(first.iter, block)
        loop = self.loop_block(node, block)
        for gen in (first, *rest):
            if gen is not first:
                self.expr(gen.iter, loop)
            self.bind(gen.target, gen.iter, "for", loop)
            for cond in gen.ifs:
                self.expr(cond, loop)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self.expr(part, loop)


# Fields of expression nodes that hold other nodes worth visiting (no ctx, operators, names).
_SKIPPED_FIELDS = {"ctx", "op", "ops", "type_comment", "kind", "id", "attr", "arg", "conversion", "is_async"}
_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(t: type) -> tuple[str, ...]:
    fields = _FIELDS.get(t)
    if fields is None:
        fields = _FIELDS[t] = tuple(f for f in t._fields if f not in _SKIPPED_FIELDS)
    return fields


def _may_be_periodic(test: ast.expr) -> bool:
    """Cheap pre-filter: only tests with `%` or `==` can be `if step % N == 0` guards."""
    t = type(test)
    if t is ast.BinOp:
        return isinstance(test.op, ast.Mod)
    if t is ast.Compare:
        return any(isinstance(op, ast.Eq) for op in test.ops) or any(
            _may_be_periodic(e) for e in (test.left, *test.comparators))
    if t is ast.BoolOp:
        return any(_may_be_periodic(v) for v in test.values)
    if t is ast.UnaryOp:
        return _may_be_periodic(test.operand)
    return False


def on_error_path(block: Block) -> bool:
    """Inside a `raise` or an `assert` message (in the same function): runs only when failing."""
    for b in block.ancestors():
        if b.kind == "scope":
            return False
        if b.kind == "error":
            return True
    return False


def loop_targets(loop: Block) -> list[ast.expr]:
    node = loop.node
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.target]
    if isinstance(node, _COMPREHENSIONS):
        return [g.target for g in node.generators]
    return []


def enclosing_loops(block: Block) -> Iterator[Block]:
    """The loops around `block` (itself included), innermost first, up to its function's edge."""
    for b in block.ancestors():
        if b.kind == "scope":
            return
        if b.kind == "loop":
            yield b


def loop_variables(loop: Block) -> set[str]:
    """The names a loop binds on each pass: `i` and `layer` in `for i, layer in enumerate(...)`."""
    return set().union(*(names_in(target) for target in loop_targets(loop)))


def loop_iter(loop: Block) -> ast.expr | None:
    node = loop.node
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return node.iter
    if isinstance(node, _COMPREHENSIONS):
        return node.generators[0].iter
    return None


def is_comprehension(loop: Block) -> bool:
    return isinstance(loop.node, _COMPREHENSIONS)


def names_in(expr: ast.AST) -> set[str]:
    """Every name read or written in `expr` (what `ast.walk` would find, without its overhead)."""
    found = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is ast.Name:
            found.add(node.id)
            continue
        if t is ast.Constant:
            continue
        for name in _child_fields(t):
            child = getattr(node, name, None)
            if type(child) is list:
                stack.extend(c for c in child if isinstance(c, ast.AST))
            elif isinstance(child, ast.AST):
                stack.append(child)
    return found


def statement_of(node: ast.AST, block: Block, lines: dict[int, list[int]]) -> ast.stmt | None:
    """The statement holding `node`, found by line among the statements of its block (and of a
    `try` or `match` in them, which make no block of their own); `lines` keeps each statement
    list's first lines, so a long module body is indexed once per file."""
    while block.kind == "loop" and not isinstance(block.node, _LOOPS):
        block = block.parent  # a comprehension: its statement is in the block around it
        if block is None:
            return None
    owner = block.node
    if block.kind == "if":
        body = owner.body if block.branch == "body" else owner.orelse
    elif block.kind == "error":
        return owner if isinstance(owner, ast.stmt) else None
    else:
        body = getattr(owner, "body", None)
    line = node.lineno
    while isinstance(body, list) and body:
        starts = lines.get(id(body))
        if starts is None:
            starts = lines[id(body)] = [s.lineno for s in body]
        index = bisect_right(starts, line) - 1
        if index < 0:
            return None
        statement = body[index]
        if isinstance(statement, (ast.Try, ast.Match)) or type(statement).__name__ == "TryStar":
            body = _inner_body(statement, line)
            continue
        return statement if (statement.end_lineno or statement.lineno) >= line else None
    return None


def _inner_body(statement: ast.stmt, line: int) -> list[ast.stmt] | None:
    """The list of statements of a `try`/`match` part that holds `line`."""
    parts = [getattr(statement, name, []) for name in ("body", "orelse", "finalbody")]
    parts += [h.body for h in getattr(statement, "handlers", [])] + [c.body for c in getattr(statement, "cases", [])]
    for part in parts:
        if part and part[0].lineno <= line <= (part[-1].end_lineno or part[-1].lineno):
            return part
    return None
