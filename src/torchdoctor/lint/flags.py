"""Code that is off by default: the branch of an `if` that does not run when every command-line
option keeps its argparse default and every field of the file's own config classes keeps its
class default. `if args.synchronize_step: torch.cuda.synchronize()` with `--synchronize-step`
a `store_true` flag costs nothing unless the user asks for it; `nn.parallel.data_parallel(...)`
under `if self.ngpu > 1:` with `--ngpu` defaulting to 1 never runs by default.

Findings there are kept at `info` (hidden by default), naming the option that turns the code on.
A default the file itself overrides (`args.ngpu = 4`, `Config(debug=True)`, `set_defaults(...)`)
decides nothing. Options that pick the device (`--cuda`, `--no-cuda`, `--gpu 0`, `--device`) are
not read as off: every GPU habit sits behind them, and GPU users set them (a count such as
`--ngpu` is read).

Nor is a choice among named alternatives: an `if`/`elif` chain that compares one option with
two or more strings (`if args.type == "transformer": ... elif args.type == "rnn": model =
RNN(config)`). Each branch is a configuration the script offers on an equal footing, and whoever
picks one runs its code every step: the RNN's Python loop over time steps is that model's cost,
not an extra the user opted into the way `--sync-step` is. A lone `if args.mode == "profile":`
stays a toggle, off by default.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_right
from typing import Any

from torchdoctor.lint.model import Scope
from torchdoctor.lint.names import dotted
from torchdoctor.lint.torch_api import parameter
from torchdoctor.lint.values import CliOption, Unknown, Values, truthy

# Options that pick the device rather than count or tune: `--cuda`, `--no-cuda`, `--gpu 0`, `--device`.
_DEVICE_OPTION = re.compile(r"^(use_|no_|enable_|disable_)?(cuda|gpu|gpus|cpu|device|devices|gpu_ids?|device_ids?)$")
_MAX_DEPTH = 12


class DefaultValues(Values):
    """Values as they are when every option and config field keeps its default; `consulted`
    lists the options and fields an evaluation read."""

    max_depth = _MAX_DEPTH  # an option reaches a guard through a few more names (`self.ngpu` ← `ngpu` ← `opt.ngpu`)

    def __init__(self, base: Values, context):
        super().__init__(base.model, context)
        self.cli_options = base.cli_options
        self.consulted: list[str] = []
        self._assigned_attrs = _assigned_attributes(base.model)
        self._overridden = "set_defaults" in base.model.calls_by_tail or "parse_known_args" in base.model.calls_by_tail

    def evaluate(self, expr, scope, depth=0):
        if type(expr) is ast.BoolOp and depth <= self.max_depth:
            values = [truthy(self.evaluate(v, scope, depth + 1)) for v in expr.values]
            deciding = not isinstance(expr.op, ast.And)  # `and` is decided by a False, `or` by a True
            if deciding in values:
                return deciding
            return Unknown() if None in values else not deciding
        return super().evaluate(expr, scope, depth)

    def _attribute(self, expr: ast.Attribute, scope: Scope, depth: int) -> Any:
        base = expr.value
        if isinstance(base, ast.Name) and base.id == "self" and scope.class_scope is not None:
            bindings = [(method, b) for method in scope.class_scope.functions.values() if method.kind == "function"
                        for b in method.bindings.get("self." + expr.attr, ())]
            if len(bindings) == 1 and bindings[0][1].how == "=" and bindings[0][1].index is None:
                method, binding = bindings[0]
                return self.evaluate(binding.value, method, depth + 1)
            return Unknown()
        if expr.attr in self._assigned_attrs:
            return Unknown()  # the file sets it itself somewhere
        option = self.cli_options.get(expr.attr)
        if option is not None and isinstance(base, (ast.Name, ast.Attribute)) and not self._overridden:
            if _DEVICE_OPTION.match(expr.attr.lower()):
                return Unknown()
            value = _option_default(option, self, depth)
            if not isinstance(value, Unknown):
                self.consulted.append(str(option))
            return value
        field = self._config_field(base, expr.attr, scope, depth)
        return field if field is not None else Unknown()

    def _config_field(self, base: ast.expr, attr: str, scope: Scope, depth: int) -> Any:
        """`cfg.debug_sync` where `cfg` is an instance of the file's own class (a dataclass, a plain
        config class) that no instantiation in the file sets `debug_sync` on."""
        cls = self._instance_class(base, scope)
        if cls is None:
            return None
        for call, _ in self.context.instantiations(cls):
            if any(k.arg in (attr, None) for k in call.keywords) or call.args:
                return None
        for statement in cls.node.body:
            target = statement.target if isinstance(statement, ast.AnnAssign) else (
                statement.targets[0] if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id == attr and statement.value is not None:
                value = self.evaluate(statement.value, cls, depth + 1)
                if not isinstance(value, Unknown):
                    self.consulted.append(f"`{cls.name}.{attr}`, default {value!r}")
                return value
        return None

    def _instance_class(self, base: ast.expr, scope: Scope) -> Scope | None:
        if not isinstance(base, ast.Name):
            return None
        found = self.definition(base.id, scope)
        if found is None:
            return None
        value, where = found
        if value is None and base.id in where.params:
            annotation = _annotation(where, base.id)
            name = dotted(annotation) if annotation is not None else None
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            name = value.func.id
        else:
            return None
        cls = self.model.module.functions.get(name or "")
        return cls if cls is not None and cls.kind == "class" else None


class OffByDefault:
    """The branches that do not run by default, as position intervals, and why."""

    def __init__(self, facts):
        self.values = DefaultValues(facts.values, facts.context)
        spans: list[tuple[tuple[int, int], tuple[int, int], str]] = []
        choices = _choice_chains(facts.model.ifs)
        for node, block in facts.model.ifs:
            if not _mentions_attribute(node.test) or id(node) in choices:
                continue
            self.values.consulted = []
            value = truthy(self.values.evaluate(node.test, block.scope))
            if value is None or not self.values.consulted:
                continue
            reason = _reason(self.values.consulted, node.test, value)
            off = node.body if value is False else node.orelse
            if off:
                spans.append((_start(off[0]), _end(off[-1]), reason))
        spans.sort()
        self._starts = [s for s, _, _ in spans]
        self._spans = spans
        self._parents = _parents(spans)
        self._context = facts.context
        self._class_reasons: dict[int, str | None] = {}
        # innermost first: a class nested in another is found before its outer class
        self._classes = sorted((s for s in facts.model.scopes if s.kind == "class"), key=lambda c: -c.node.lineno)
        self._model = facts.model
        self._handed: set[str] | None = None

    def reason(self, node: ast.AST) -> str | None:
        """Why `node` does not run by default, or None when it does (or may)."""
        if not self._spans:
            return None
        at = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        i = bisect_right(self._starts, at) - 1
        while i >= 0:
            if self._spans[i][1] >= at:
                return self._spans[i][2]
            i = self._parents[i]
        return self._class_reason(at[0])

    def _class_reason(self, line: int) -> str | None:
        """Code of a class the file makes only in branches that are off by default (`elif
        args.type == "rnn": model = RNN(config)` with `--type` defaulting to "transformer") does not
        run by default either, nor does that of the classes only it makes."""
        cls = next((c for c in self._classes if c.node.lineno <= line <= (c.node.end_lineno or c.node.lineno)), None)
        if cls is None:
            return None
        key = id(cls)
        if key not in self._class_reasons:
            self._class_reasons[key] = None  # cycle guard: a class that makes itself
            self._class_reasons[key] = self._made_only_when_off(cls)
        return self._class_reasons[key]

    def _made_only_when_off(self, cls: Scope) -> str | None:
        made = self._context.instantiations(cls)
        if not made:
            return None  # never made here: another module may make it
        reasons = [self.reason(call) for call, _ in made]
        if any(r is None for r in reasons):
            return None
        if self._handed is None:  # made once, when a class is first found made only in off code
            self._handed = _names_handed_around(self._model)
        if cls.name in self._handed:
            return None  # `factory = RNN`, `build(RNN)`: it may be made anywhere
        return f"`{cls.name}` is made only in code that is off by default: {reasons[0]}"


def _names_handed_around(model) -> set[str]:
    """Names used as values rather than called: assigned (`factory = RNN`, `{"rnn": RNN}`), passed
    (`build(RNN)`) or returned."""
    values = [value for scope in model.scopes for _, value, how in scope.assigns if value is not None and how != "for"]
    values += [a for call, _ in model.calls for a in (*call.args, *(k.value for k in call.keywords))]
    values += [value for scope in model.scopes for value, _ in scope.returns_at]
    found: set[str] = set()
    for value in values:
        stack = [value]
        while stack:
            node = stack.pop()
            if type(node) is ast.Name:
                found.add(node.id)
            elif type(node) is ast.Call:
                stack.extend((*node.args, *(k.value for k in node.keywords)))  # not what is called
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.IfExp, ast.BoolOp)):
                stack.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))
    return found


def _choice_chains(ifs) -> set[int]:
    """The `if`s of chains that pick among named alternatives: `if args.type == "a": ... elif
    args.type == "b": ...`, one option compared with two or more distinct strings."""
    found: set[int] = set()
    for node, _ in ifs:
        if id(node) in found:
            continue
        chain, picked = [], set()
        subject = _choice_subject(node.test, picked)
        current = node
        while subject is not None and isinstance(current, ast.If) and _choice_subject(current.test, picked) == subject:
            chain.append(current)
            current = current.orelse[0] if len(current.orelse) == 1 else None
        if len(chain) >= 2 and len(picked) >= 2:
            found.update(id(n) for n in chain)
    return found


def _choice_subject(test: ast.expr, picked: set) -> str | None:
    """`args.type == "rnn"` or `args.type in ("gru", "lstm")`: the option's dotted name (the
    strings are added to `picked`), or None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.In))):
        return None
    subject, other = test.left, test.comparators[0]
    if isinstance(subject, ast.Constant) and isinstance(test.ops[0], ast.Eq):
        subject, other = other, subject
    if not isinstance(subject, ast.Attribute):
        return None
    options = other.elts if isinstance(other, (ast.Tuple, ast.List, ast.Set)) else [other]
    if not options or not all(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in options):
        return None
    picked.update(o.value for o in options)
    return dotted(subject)


def _parents(spans) -> list[int]:
    """For each span (sorted by start, nested or apart), the nearest earlier span holding it."""
    parents, stack = [], []
    for i, (start, end, _) in enumerate(spans):
        while stack and spans[stack[-1]][1] < start:
            stack.pop()
        parents.append(stack[-1] if stack else -1)
        stack.append(i)
    return parents


def _reason(consulted: list[str], test: ast.expr, value: bool) -> str:
    shown = "; ".join(dict.fromkeys(consulted))
    branch = "this branch" if value is False else "this `else` branch"
    return f"{branch} runs only when the defaults change ({shown}), so it is off by default"


def _option_default(option: CliOption, values: DefaultValues, depth: int) -> Any:
    if option.default is None:
        if option.action in ("store_true", "store_false"):
            return option.action == "store_false"
        return None if option.action in (None, "store") else Unknown()
    value = values.evaluate(option.default, values.model.module, depth + 1)
    if isinstance(value, str) and option.type_name in ("int", "float"):
        try:
            return int(value) if option.type_name == "int" else float(value)
        except ValueError:
            return Unknown()
    return value


def _annotation(function: Scope, name: str) -> ast.expr | None:
    arg, _ = parameter(function.node, name)
    return arg.annotation if arg is not None else None


def _assigned_attributes(model) -> set[str]:
    """Attribute names the file assigns on anything but `self` (`args.gpu = gpu`, `setattr(opt, ...)`)."""
    found = set()
    for scope in model.scopes:
        for target, _, _ in scope.assigns:
            for node in ast.walk(target):
                if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                    found.add(node.attr)
    for call, _ in model.calls_named("setattr"):
        if len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
            found.add(call.args[1].value)
    return found


def _mentions_attribute(test: ast.expr) -> bool:
    return any(isinstance(n, ast.Attribute) for n in ast.walk(test))


def _start(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _end(node: ast.AST) -> tuple[int, int]:
    return node.end_lineno or node.lineno, node.end_col_offset or 0


__all__ = ["DefaultValues", "OffByDefault"]
