"""What kind of object an expression holds — a tensor, a boolean tensor, a module, a DataLoader,
an optimizer — as far as the file shows it. `float(loss)` only syncs if `loss` is a tensor, and
`x[mask]` only needs a sync if `mask` is boolean, so the sync checks ask here first.

The inference is small and local: assignments in the scope (and enclosing scopes), loop
variables drawn from a DataLoader, `self.x` attributes set in the class, what local functions
return, parameters of `forward`, and how a parameter is used (`x.shape` means a tensor).
"""

from __future__ import annotations

import ast

from torchdoctor.lint.bindings import visible_bindings
from torchdoctor.lint.model import Block, FileModel, Scope
from torchdoctor.lint.names import last_name
from torchdoctor.lint.torch_api import (
    BOOL, BOOL_METHODS, DATASET, FORWARD_NAMES, LOADER, META_ATTRS, MODULE, MODULE_METHODS, NO_DEFAULT, OPTIMIZER,
    OTHER, PLAIN_METHODS, TENSOR, TENSOR_ATTRS, combine, declared, fallback_kind, qualified_kind,
)
from torchdoctor.lint.values import Values

__all__ = ["Kinds", "TENSOR", "BOOL", "MODULE", "LOADER", "OPTIMIZER", "DATASET", "OTHER"]

class Kinds:
    def __init__(self, model: FileModel, values: Values):
        self.model = model
        self.values = values
        self._instances: dict[str, list[tuple[ast.Call, Scope]]] | None = None
        self._names: dict[tuple[int, str], str | None] = {}
        self._active: set[tuple[int, str]] = set()
        self._classes: dict[str, str | None] = {}
        self._bound: dict[int, dict[str, list]] = {}
        self._self_attrs: dict[int, dict[str, list]] = {}

    # -- public questions ------------------------------------------------------------------
    def is_tensor(self, expr: ast.expr, scope: Scope) -> bool:
        return self.of(expr, scope) in (TENSOR, BOOL)

    def is_bool(self, expr: ast.expr, scope: Scope) -> bool:
        return self.of(expr, scope) == BOOL

    def plain_here(self, name: ast.Name, block: Block) -> bool:
        """The name holds a plain value where it is read: every binding that reaches this point
        gives one, and one of them certainly ran (`lossf = lossf.item()` after a loop that summed
        tensors into `lossf`). The kind of the name as a whole (`of`) is a tensor if any binding is."""
        scope, bindings, certain = visible_bindings(name.id, block, (name.lineno, name.col_offset))
        if scope is not block.scope or not certain:
            return False
        return all(b.how == "=" and b.index is None and b.value is not None and self.of(b.value, scope) == OTHER
                   for b in bindings)

    def of(self, expr: ast.expr, scope: Scope) -> str | None:
        t = type(expr)
        if t is ast.Name:
            return self.name(expr.id, scope)
        if t is ast.Attribute:
            return self._attribute(expr, scope)
        if t is ast.Call:
            return self._call(expr, scope)
        if t is ast.BinOp:
            kinds = {self.of(expr.left, scope), self.of(expr.right, scope)}
            if kinds <= {BOOL} and isinstance(expr.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
                return BOOL
            return TENSOR if kinds & {TENSOR, BOOL} else None
        if t is ast.UnaryOp:
            inner = self.of(expr.operand, scope)
            if isinstance(expr.op, ast.Not):
                return OTHER
            return inner if inner in (TENSOR, BOOL) else None
        if t is ast.Compare:
            operands = (expr.left, *expr.comparators)
            if any(isinstance(op, (ast.In, ast.NotIn, ast.Is, ast.IsNot)) for op in expr.ops):
                return OTHER
            return BOOL if any(self.is_tensor(e, scope) for e in operands) else OTHER
        if t is ast.Subscript:
            base = self.of(expr.value, scope)
            return base if base in (TENSOR, BOOL, MODULE) else None  # `self.layers[i]` is a module
        if t is ast.Starred:
            return self.of(expr.value, scope)
        if t is ast.IfExp:  # `train_data if split == "train" else val_data`
            return combine([self.of(expr.body, scope), self.of(expr.orelse, scope)])
        if t in (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
                 ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Lambda):
            return OTHER
        return None

    def name(self, name: str, scope: Scope) -> str | None:
        current: Scope | None = scope
        while current is not None:
            if name in self._names_bound(current):
                return self._local(name, current) or fallback_kind(name)
            current = current.parent
        return fallback_kind(name)

    def _names_bound(self, scope: Scope) -> dict[str, list[tuple[ast.expr, ast.expr | None, str]]]:
        """name → the assignments that bind it in `scope` (parameters map to no assignment)."""
        bound = self._bound.get(id(scope))
        if bound is None:
            bound = {p: [] for p in scope.params}
            for assign in scope.assigns:
                for name in _target_names(assign[0]):
                    bound.setdefault(name, []).append(assign)
            self._bound[id(scope)] = bound
        return bound

    def class_kind(self, class_name: str) -> str | None:
        """MODULE for nn.Module subclasses, DATASET for Dataset subclasses defined in the file."""
        if class_name not in self._classes:
            self._classes[class_name] = None  # cycle guard (class A(B), class B(A))
            scope = self.model.module.functions.get(class_name)
            kind = None
            if scope is not None and scope.kind == "class":
                for base in scope.node.bases:
                    kind = self._base_kind(base)
                    if kind:
                        break
            self._classes[class_name] = kind
        return self._classes[class_name]

    # -- pieces ----------------------------------------------------------------------------
    def _local(self, name: str, scope: Scope) -> str | None:
        key = (id(scope), name)
        if key in self._names:
            return self._names[key]
        if key in self._active:
            return None  # `x = x.to(device)`: the other assignments decide
        self._active.add(key)
        kinds = [self._bound_kind(name, t, v, how, scope) for t, v, how in self._names_bound(scope).get(name, ())]
        if name in scope.params:
            kinds.append(self._param_kind(name, scope))
        self._active.discard(key)
        result = combine(kinds)
        self._names[key] = result
        return result

    def _bound_kind(self, name: str, target: ast.expr, value: ast.expr | None, how: str, scope: Scope) -> str | None:
        if value is None:
            return None
        if how == "for":
            return self._element(target, name, value, scope)
        if how == "with":
            return None
        if isinstance(target, ast.Name):
            if how == "=":
                return self.of(value, scope)
            value_kind = self.of(value, scope)  # augmented: `acc += (p == y).sum()` makes a tensor
            return TENSOR if value_kind in (TENSOR, BOOL) else None
        if isinstance(target, (ast.Tuple, ast.List)) and how == "=":
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for element, item in zip(target.elts, value.elts):
                    if _binds(element, name):
                        return self._bound_kind(name, element, item, how, scope)
            return TENSOR if self.of(value, scope) == TENSOR else None  # `a, b = model(x)`; split
        return None

    def _element(self, target: ast.expr, name: str, iterable: ast.expr, scope: Scope) -> str | None:
        """Kind of `name` bound by `for target in iterable`."""
        if isinstance(iterable, ast.Call):
            func = last_name(iterable.func)
            if func == "enumerate" and iterable.args and isinstance(target, ast.Tuple) and len(target.elts) == 2:
                return None if _binds(target.elts[0], name) else self._element(target.elts[1], name, iterable.args[0], scope)
            if func == "zip" and isinstance(target, ast.Tuple) and len(target.elts) == len(iterable.args):
                for element, source in zip(target.elts, iterable.args):
                    if _binds(element, name):
                        return self._element(element, name, source, scope)
                return None
            if func in ("tqdm", "iter", "islice", "prefetch", "cycle") and iterable.args:
                return self._element(target, name, iterable.args[0], scope)
        source = self.of(iterable, scope)
        if source in (LOADER, TENSOR):
            return TENSOR  # batches from a DataLoader, rows of a tensor
        if source == MODULE:
            return MODULE  # a module that can be iterated holds modules (ModuleList, Sequential)
        return None

    def _param_kind(self, name: str, scope: Scope) -> str | None:
        if name in ("self", "cls"):
            return None
        annotated, default = declared(name, scope.node)
        if annotated is not None:
            return annotated
        if scope.name in FORWARD_NAMES and self._is_module_method(scope):
            # inputs of forward / a Lightning step: what the file passes decides (`model(x, mask)`);
            # otherwise a required input is a tensor, an option with a default is not assumed one
            passed = [self.of(a, s) for a, s in self._arguments_for(name, scope)]
            if passed and all(k == BOOL for k in passed):
                return BOOL
            if passed and any(k in (TENSOR, BOOL) for k in passed):
                return TENSOR
            if default is NO_DEFAULT:
                return TENSOR
        if default is not NO_DEFAULT and isinstance(default, ast.Constant) and default.value is not None:
            return OTHER
        return TENSOR if name in scope.tensor_evidence else None

    def _is_module_method(self, scope: Scope) -> bool:
        """A method of an nn.Module subclass (not an autograd.Function's static `forward(ctx, ...)`)."""
        if scope.class_scope is None or not isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        if any(last_name(d) == "staticmethod" for d in scope.node.decorator_list):
            return False
        return self.class_kind(scope.class_scope.name) == MODULE

    def instance_class(self, expr: ast.expr, scope: Scope, depth: int = 0) -> str | None:
        """The file's own class `expr` is an instance of: `model` after `model = Net().to(device)`."""
        if depth > 4:
            return None
        if isinstance(expr, ast.Name):
            found = self.values.definition(expr.id, scope)
            if found is None or found[0] is None:
                return None
            return self.instance_class(found[0], found[1], depth + 1)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            if scope.class_scope is not None:
                values = self.values.class_attrs(scope.class_scope).get(expr.attr, [])
                if len(values) == 1:
                    return self.instance_class(values[0], scope, depth + 1)
            return None
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Name) and self.class_kind(func.id) == MODULE:
                return func.id
            if isinstance(func, ast.Attribute) and func.attr in MODULE_METHODS:
                return self.instance_class(func.value, scope, depth + 1)
            if expr.args and last_name(func) in ("compile", "DistributedDataParallel", "DDP", "DataParallel"):
                return self.instance_class(expr.args[0], scope, depth + 1)
        return None

    def _arguments_for(self, param: str, forward: Scope) -> list[tuple[ast.expr, Scope]]:
        """What the file passes for `param` wherever it calls an instance of forward's class."""
        if self._instances is None:
            self._instances = {}
            for call, block in self.model.calls:
                if isinstance(call.func, (ast.Name, ast.Attribute)):
                    owner = self.instance_class(call.func, block.scope)
                    if owner is not None:
                        self._instances.setdefault(owner, []).append((call, block.scope))
        params = forward.params[1:]  # without self
        passed = []
        for call, scope in self._instances.get(forward.class_scope.name, []):
            for i, arg in enumerate(call.args):
                if i < len(params) and params[i] == param and not isinstance(arg, ast.Starred):
                    passed.append((arg, scope))
            passed += [(k.value, scope) for k in call.keywords if k.arg == param]
        return passed

    def _attribute(self, expr: ast.Attribute, scope: Scope) -> str | None:
        if expr.attr in META_ATTRS:
            return OTHER
        base = expr.value
        # `self.T = T` in a data loader is a number: what the class assigns decides before the
        # name does (`x.T`, `layer.weight` are tensors only when the class says nothing)
        own = isinstance(base, ast.Name) and base.id == "self" and scope.class_scope is not None and (
            expr.attr in self._self_assignments(scope.class_scope))
        if expr.attr in TENSOR_ATTRS and not own:
            return TENSOR
        if isinstance(base, ast.Name) and base.id == "self" and scope.class_scope is not None:
            key = (id(scope.class_scope), "self." + expr.attr)
            if key not in self._names:
                if key in self._active:
                    return None
                self._active.add(key)
                kinds = [self.of(v, m) if how == "=" else None
                         for m, v, how in self._self_assignments(scope.class_scope).get(expr.attr, ())
                         if v is not None]
                self._active.discard(key)
                self._names[key] = combine(kinds) or fallback_kind(expr.attr)
            return self._names[key]
        return fallback_kind(expr.attr) if self.of(base, scope) != TENSOR else None

    def _self_assignments(self, class_scope: Scope) -> dict[str, list[tuple[Scope, ast.expr | None, str]]]:
        """attr → (method, value, how) for every `self.attr = value` in the class's methods."""
        key = id(class_scope)
        if key not in self._self_attrs:
            table: dict[str, list] = {}
            for method in class_scope.functions.values():
                for target, value, how in method.assigns:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == "self":
                        table.setdefault(target.attr, []).append((method, value, how))
            self._self_attrs[key] = table
        return self._self_attrs[key]

    def _call(self, call: ast.Call, scope: Scope) -> str | None:
        qualified = self.model.imports.qualify(call.func)
        if qualified is not None:
            return qualified_kind(qualified, call, lambda e: self.of(e, scope))
        func = call.func
        if isinstance(func, ast.Name):
            local = self.model.module.functions.get(func.id)
            if local is not None and local.kind == "class":
                return self.class_kind(func.id) or OTHER
            if func.id in ("float", "int", "bool", "len", "str", "repr", "list", "dict", "tuple", "range",
                           "enumerate", "zip", "print", "isinstance", "sum", "max", "min", "round", "abs"):
                return OTHER
            if local is not None:
                return self.returned(local)
        if isinstance(func, ast.Attribute):
            receiver = self.of(func.value, scope)
            method = func.attr
            if receiver in (TENSOR, BOOL):
                if method in PLAIN_METHODS or method.startswith("is_"):
                    return OTHER
                return BOOL if method in BOOL_METHODS else TENSOR
            if receiver == MODULE:
                return MODULE if method in MODULE_METHODS else None
            if isinstance(func.value, ast.Name) and func.value.id == "self" and scope.class_scope is not None:
                method_scope = scope.class_scope.functions.get(method)
                if method_scope is not None and method_scope.kind == "function":
                    return self.returned(method_scope)
        if self.of(func, scope) == MODULE:
            return TENSOR  # calling a model or a loss module gives a tensor
        return None

    def returned(self, function: Scope) -> str | None:
        """What a function of this file returns (None while it is being worked out: recursion)."""
        key = (id(function), "<return>")
        if key not in self._names:
            self._names[key] = None
            self._names[key] = combine([self.of(r, function) for r, _ in function.returns_at])
        return self._names[key]

    def _base_kind(self, base: ast.expr) -> str | None:
        qualified = self.model.imports.qualify(base) or ""
        name = last_name(base)
        if qualified == "torch.nn.Module" or name.endswith("Module") or name.endswith("Model"):
            return MODULE
        if qualified.startswith("torch.utils.data.") and "Dataset" in qualified or name.endswith("Dataset"):
            return DATASET
        if isinstance(base, ast.Name):
            return self.class_kind(base.id)
        return None


def _binds(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds(e, name) for e in target.elts)
    if isinstance(target, ast.Starred):
        return _binds(target.value, name)
    return False


def _target_names(target: ast.expr):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _target_names(element)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)
