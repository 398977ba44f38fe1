"""What an argument's value is, when the file says so: literals, simple constants assigned once
(module or function level, or `self.x` in a class), arithmetic on them, `os.cpu_count()`, and
argparse defaults. Anything else is `Unknown`, with the reason in words, and checks then say
nothing or report at `info` severity: a linter that guesses loses its users' trust.

Nothing here executes user code; values are computed from the tree alone.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

from torchdoctor.lint.bindings import argument_for
from torchdoctor.lint.model import FileModel, Scope
from torchdoctor.lint.names import dotted, short_source
from torchdoctor.lint.torch_api import NO_DEFAULT, parameter


class Unknown:
    """A value the source does not fix; `why` completes "the value …". Given a code node, the
    words quote it, written out only when a message asks (most unknown values never reach one)."""

    __slots__ = ("_why", "_node")

    def __init__(self, why: str = "is computed at run time", node: ast.AST | None = None):
        self._why = why
        self._node = node

    @property
    def why(self) -> str:
        if self._node is not None:
            self._why, self._node = f"of `{short_source(self._node)}` {self._why}", None
        return self._why

    def __repr__(self) -> str:
        return f"Unknown({self.why})"


class Marker:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


POSITIVE = Marker("positive")  # a number we cannot compute but know is > 0 (os.cpu_count())
WHEN_CUDA = Marker("when-cuda")  # true exactly when the run uses CUDA (`device == "cuda"`)

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv, ast.Mod: operator.mod}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_CPU_COUNT = {"os.cpu_count", "multiprocessing.cpu_count", "psutil.cpu_count"}
_MAX_DEPTH = 6  # chains of constants longer than this are not worth following
_CALL_SITES = 8  # a parameter passed from more places than this is not followed


@dataclass
class Bound:
    """A call's arguments matched to parameter names, the way Python would match them."""

    args: dict[str, ast.expr] = field(default_factory=dict)
    splat: bool = False  # `*args`/`**kwargs` at the call: missing names may still be passed
    unpacked: set[str] = field(default_factory=set)  # names passed in a `**{"name": value}` literal

    def get(self, name: str) -> ast.expr | None:
        return self.args.get(name)

    @property
    def editable(self) -> bool:
        """Whether --fix may edit the arguments: every name is spelled out, none inside `**{...}`."""
        return not self.splat and not self.unpacked


def bind(call: ast.Call, positional: Sequence[str]) -> Bound:
    bound = Bound()
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            bound.splat = True
            break
        if i < len(positional):
            bound.args[positional[i]] = arg
    for kw in call.keywords:
        if kw.arg is not None:
            bound.args[kw.arg] = kw.value
        elif _string_keys(kw.value):  # `**{"foreach": False}`: as good as keywords
            for key, value in zip(kw.value.keys, kw.value.values):
                bound.args[key.value] = value
                bound.unpacked.add(key.value)
        else:
            bound.splat = True
    return bound


def _string_keys(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Dict) and all(
        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in expr.keys)


def truthy(value: Any) -> bool | None:
    """True/False for a known value, True for WHEN_CUDA/POSITIVE, None when unknown."""
    if isinstance(value, Unknown):
        return None
    if isinstance(value, Marker):
        return True
    return bool(value)


class Values:
    """Constant evaluation over one FileModel."""

    max_depth = _MAX_DEPTH

    def __init__(self, model: FileModel, context=None):
        self.model = model
        self.context = context  # set once the file's calls are linked: parameters are then read at call sites
        self._parameters: dict[tuple[int, str], Any] = {}
        self._singles: dict[int, dict[str, ast.expr | None]] = {}
        self._class_attrs: dict[int, dict[str, list[ast.expr]]] = {}
        self.cli_options = _argparse_options(model)

    def evaluate(self, expr: ast.expr | None, scope: Scope, depth: int = 0) -> Any:
        if expr is None:
            return None
        if depth > self.max_depth:
            return Unknown()
        t = type(expr)
        if t is ast.Constant:
            return expr.value
        if t is ast.Name:
            return self._name(expr.id, scope, depth)
        if t is ast.Attribute:
            return self._attribute(expr, scope, depth)
        if t is ast.UnaryOp:
            value = self.evaluate(expr.operand, scope, depth + 1)
            if isinstance(expr.op, ast.Not):
                known = truthy(value)
                return Unknown() if known is None or value is WHEN_CUDA else not known
            if isinstance(expr.op, ast.USub) and isinstance(value, (int, float)):
                return -value
            return Unknown()
        if t is ast.BinOp:
            return self._binop(expr, scope, depth)
        if t is ast.Compare:
            return self._compare(expr, scope, depth)
        if t is ast.IfExp:
            test = truthy(self.evaluate(expr.test, scope, depth + 1))
            body, other = (self.evaluate(e, scope, depth + 1) for e in (expr.body, expr.orelse))
            if test is not None and not _mentions_cuda(expr.test):
                return body if test else other
            if _mentions_cuda(expr.test) and truthy(body) is True and truthy(other) is False:
                return WHEN_CUDA
            return body if _same(body, other) else Unknown()
        if t is ast.Call:
            return self._call(expr, scope, depth)
        return Unknown()

    # -- pieces ----------------------------------------------------------------------------
    def _name(self, name: str, scope: Scope, depth: int) -> Any:
        found = self.definition(name, scope)
        if found is None:
            return Unknown(f"of `{name}` is not assigned in this file")
        value, where = found
        if value is None and name in where.params and name not in where.bindings and self.context is not None:
            passed = self._parameter(where, name, depth)  # never rebound: what its callers pass
            if not isinstance(passed, Unknown):
                return passed
        if value is None:
            return Unknown(f"of `{name}` changes or comes from a parameter")
        return self.evaluate(value, where, depth + 1)

    def _parameter(self, function: Scope, name: str, depth: int) -> Any:
        """The value every call site of the function passes (or leaves at its default); worked
        out once per parameter (a recursive call sees Unknown while it is)."""
        key = (id(function), name)
        if key not in self._parameters:
            self._parameters[key] = Unknown()
            self._parameters[key] = self._passed(function, name, depth)
        return self._parameters[key]

    def _passed(self, function: Scope, name: str, depth: int) -> Any:
        if function.kind != "function":
            return Unknown()
        sites = self.context.call_sites(function)
        if len(sites) > _CALL_SITES:
            return Unknown()
        values = []
        for call, block in sites:
            argument = argument_for(call, function, name)
            if argument is None and any(isinstance(a, ast.Starred) for a in call.args) or any(
                    k.arg is None for k in call.keywords):
                return Unknown()
            if argument is None:
                argument, block = _default_of(function, name), function.parent.block
            # from depth 1 whatever the depth of the question: the answer is kept for every later one
            values.append(self.evaluate(argument, block.scope, 1) if argument is not None else Unknown())
        if values and all(not isinstance(v, Unknown) and v == values[0] for v in values):
            return values[0]
        return Unknown()

    def definition(self, name: str, scope: Scope) -> tuple[ast.expr | None, Scope] | None:
        """The one expression assigned to `name` as seen from `scope`, and the scope that assigns it.

        None when no scope binds the name; (None, scope) when it is bound several ways.
        """
        current: Scope | None = scope
        while current is not None:
            singles = self._single_assignments(current)
            if name in singles:
                return singles[name], current
            current = current.parent
            while current is not None and current.kind == "class":
                current = current.parent  # methods do not see class-body names
        return None

    def _attribute(self, expr: ast.Attribute, scope: Scope, depth: int) -> Any:
        base = expr.value
        if isinstance(base, ast.Name) and base.id == "self" and scope.class_scope is not None:
            values = self.class_attrs(scope.class_scope).get(expr.attr, [])
            if len(values) == 1:
                return self.evaluate(values[0], scope, depth + 1)
        option = self.cli_options.get(expr.attr)
        if option is not None and isinstance(base, (ast.Name, ast.Attribute)):
            return Unknown(f"comes from the command line ({option})")
        return Unknown("is set at run time", expr)

    def _binop(self, expr: ast.BinOp, scope: Scope, depth: int) -> Any:
        left, right = (self.evaluate(e, scope, depth + 1) for e in (expr.left, expr.right))
        op = _BINOPS.get(type(expr.op))
        if op and _number(left) and _number(right):
            try:
                return op(left, right)
            except (ZeroDivisionError, OverflowError):
                return Unknown()
        if isinstance(expr.op, (ast.Add, ast.Mult)) and _positive(left) and _positive(right):
            return POSITIVE
        return Unknown()

    def _compare(self, expr: ast.Compare, scope: Scope, depth: int) -> Any:
        operands = [self.evaluate(e, scope, depth + 1) for e in (expr.left, *expr.comparators)]
        if not any(isinstance(v, (Unknown, Marker)) for v in operands):
            try:
                return all(_CMPOPS[type(op)](a, b) for op, a, b in zip(expr.ops, operands, operands[1:]))
            except (KeyError, TypeError):
                return Unknown()
        return WHEN_CUDA if _mentions_cuda(expr) else Unknown()

    def _call(self, expr: ast.Call, scope: Scope, depth: int) -> Any:
        name = self.model.imports.qualify(expr.func) or dotted(expr.func) or ""
        if name in _CPU_COUNT or (name == "len" and "sched_getaffinity" in short_source(expr, 200)):
            return POSITIVE
        if name == "torch.cuda.is_available":
            return WHEN_CUDA
        args = [self.evaluate(a, scope, depth + 1) for a in expr.args]
        if name in ("min", "max") and args:
            if all(_number(a) for a in args):
                return (min if name == "min" else max)(args)
            if name == "max" and any(_positive(a) for a in args):
                return POSITIVE
            if name == "min" and all(_positive(a) for a in args):
                return POSITIVE
        if name in ("int", "bool", "float") and len(args) == 1 and not isinstance(args[0], (Unknown, Marker)):
            try:
                return {"int": int, "bool": bool, "float": float}[name](args[0])
            except (TypeError, ValueError):
                return Unknown()
        return Unknown("is computed at run time", expr)

    # -- tables ----------------------------------------------------------------------------
    def _single_assignments(self, scope: Scope) -> dict[str, ast.expr | None]:
        """name → its one assigned expression, or None when assigned several ways (or a parameter)."""
        table = self._singles.get(id(scope))
        if table is not None:
            return table
        table = {p: None for p in scope.params}
        for target, value, how in scope.assigns:
            for name, val in _unpack(target, value if how == "=" else None):
                table[name] = val if name not in table else None
        self._singles[id(scope)] = table
        return table

    def class_attrs(self, class_scope: Scope) -> dict[str, list[ast.expr]]:
        """`self.x = value` assignments in any method of a class: attr → values."""
        table = self._class_attrs.get(id(class_scope))
        if table is None:
            table = {}
            for method in class_scope.functions.values():
                for target, value, how in method.assigns:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        table.setdefault(target.attr, []).append(value if how == "=" else target)
            self._class_attrs[id(class_scope)] = table
        return table


def _default_of(function: Scope, name: str) -> ast.expr | None:
    _, default = parameter(function.node, name)
    return None if default is NO_DEFAULT else default


def _unpack(target: ast.expr, value: ast.expr | None):
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) else None
        for i, element in enumerate(target.elts):
            yield from _unpack(element.value if isinstance(element, ast.Starred) else element,
                               values[i] if values is not None else None)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(value: Any) -> bool:
    return value is POSITIVE or (_number(value) and value > 0)


def _same(a: Any, b: Any) -> bool:
    return not isinstance(a, (Unknown, Marker)) and not isinstance(b, (Unknown, Marker)) and a == b


def _mentions_cuda(expr: ast.expr) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "cuda" in node.value:
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("is_available", "is_cuda", "cuda"):
            return True
    return False


@dataclass(frozen=True)
class CliOption:
    """One `parser.add_argument(...)`: its longest flag, and what it holds when not given."""

    flag: str
    default: ast.expr | None  # the `default=` expression, None when left out
    action: str | None  # "store_true", "store_false", ... when a constant
    type_name: str | None  # "int", "float", ... when `type=` names a builtin

    def __str__(self) -> str:
        if self.default is not None:
            shown = short_source(self.default, 24)
        elif self.action in ("store_true", "store_false"):
            shown = str(self.action == "store_false")
        else:
            shown = "None"
        return f"`{self.flag}`, default {shown}"


def _argparse_options(model: FileModel) -> dict[str, CliOption]:
    """dest → the option, for every `parser.add_argument(...)` in the file."""
    options: dict[str, CliOption] = {}
    for call, _ in model.calls_named("add_argument"):
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not flags:
            continue
        kwargs = {k.arg: k.value for k in call.keywords if k.arg}
        longest = max(flags, key=len)
        dest = kwargs.get("dest")
        dest_name = dest.value if isinstance(dest, ast.Constant) else longest.lstrip("-").replace("-", "_")
        action = kwargs.get("action")
        kind = kwargs.get("type")
        options[dest_name] = CliOption(longest, kwargs.get("default"),
                                       action.value if isinstance(action, ast.Constant) else None,
                                       kind.id if isinstance(kind, ast.Name) else None)
    return options


def device_type(expr: ast.expr, values: Values, scope: Scope) -> str | None:
    """The device type ("cpu", "cuda", "mps", ...) when the file fixes it: `.to("cuda:0")`,
    `torch.device("mps")`, `.to(0)` (a CUDA index), or a name assigned one of those once.
    None when the run decides."""
    if isinstance(expr, ast.Name):
        found = values.definition(expr.id, scope)
        if found is not None and isinstance(found[0], ast.Call):
            expr, scope = found
    if isinstance(expr, ast.Call) and expr.args and dotted(expr.func) in ("torch.device", "device"):
        expr = expr.args[0]
    value = values.evaluate(expr, scope)
    if isinstance(value, str):
        return value.split(":")[0].strip().lower()
    if isinstance(value, int) and not isinstance(value, bool):
        return "cuda"
    return None
