"""Tensors that live on the CPU whatever device the run trains on, so reading one on the host
waits for no GPU work:

- a PackedSequence's `batch_sizes` (torch keeps it on the CPU by contract; RNN code reads it
  as `int(batch_sizes[0])`), also under the name `batch_sizes` it is unpacked to;
- a tensor a function builds with `torch.tensor`/`torch.as_tensor` (or a legacy
  `torch.LongTensor`) from Python values or shapes, or with a factory (`torch.randint`,
  `torch.randperm`, `torch.arange`, `torch.zeros`, ...), with no `device=`;
- a result moved there: `(pred == y).cpu()`, `x.to("cpu")`;
- the batches a torch DataLoader of the file yields, until the loop moves them (`x.to(device)`
  binds a new tensor), and the elements a loop takes from any of these;
- what torch computes from those alone (`torch.prod(torch.tensor(x.shape))`, `sizes.sum()`).

A name holds what its last binding before the point of use gave it (`reaching_bindings`), so
`y` is on the host before `y = y.to(device)` and on the device after it.

A process that changed the default device (`torch.set_default_device("cuda")`, or a
`with torch.device("cuda"):` block) would put the built tensors on the GPU; a file that does so
gets no such exemption.
"""

from __future__ import annotations

import ast

from torchdoctor.lint.bindings import Binding, visible_bindings
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.kinds import OTHER
from torchdoctor.lint.model import Block, Scope, names_in
from torchdoctor.lint.values import device_type

_PACKED_SIZES = "batch_sizes"
_BUILDERS = {"torch.tensor", "torch.as_tensor", "torch.LongTensor", "torch.IntTensor", "torch.FloatTensor",
             "torch.DoubleTensor", "torch.BoolTensor"}
# Factories that make a new tensor on the default device (the CPU) unless given `device=`.
_FACTORIES = {f"torch.{name}" for name in (
    "randint", "randperm", "arange", "zeros", "ones", "empty", "full", "rand", "randn", "eye", "linspace",
    "logspace", "bernoulli", "multinomial_from_counts")}
_MOVES = {"to", "cuda", "mps", "xpu", "npu"}  # methods that may take a tensor off the CPU
_MAX_DEPTH = 6


def on_host(expr: ast.expr, where: Block | Scope, facts: Facts, depth: int = 0) -> bool:
    """`expr`, evaluated in `where` (a block: the point of use is known; a scope: it is not), is a
    tensor (or a value of one) known to live on the CPU."""
    if depth > _MAX_DEPTH or facts.default_device_changed:
        return False
    t = type(expr)
    if t is ast.Subscript:
        return on_host(expr.value, where, facts, depth + 1)
    if t is ast.Attribute:
        return expr.attr == _PACKED_SIZES
    if t is ast.Name:
        return _name_on_host(expr, where, facts, depth)
    if t is ast.Call:
        return _call_on_host(expr, where, facts, depth)
    if t is ast.BinOp:
        return _only_host_tensors((expr.left, expr.right), where, facts, depth)
    if t is ast.Compare:
        return _only_host_tensors((expr.left, *expr.comparators), where, facts, depth)
    if t is ast.UnaryOp:
        return on_host(expr.operand, where, facts, depth + 1)
    return False


def _scope(where: Block | Scope) -> Scope:
    return where.scope if isinstance(where, Block) else where


def _name_on_host(name_node: ast.Name, where: Block | Scope, facts: Facts, depth: int) -> bool:
    name = name_node.id
    scope = _scope(where)
    if name == _PACKED_SIZES:
        return _packed_sizes(name, scope, facts, depth)
    if isinstance(where, Block):
        binder, bindings, certain = visible_bindings(name, where, (name_node.lineno, name_node.col_offset))
        if binder is not None and binder.bindings.get(name):
            if not certain and name in binder.params:
                return False  # a parameter may hold anything
            return all(_binding_on_host(b, facts, depth) for b in bindings) and not meets_a_module(name, binder, facts)
    found = facts.values.definition(name, scope)
    return found is not None and found[0] is not None and on_host(found[0], found[1], facts, depth + 1) and (
        not meets_a_module(name, found[1], facts))


def meets_a_module(name: str, scope: Scope, facts: Facts) -> bool:
    """`name` is handed as it is to a module of the file's (`model(x)`, `criterion(out, y)`): it
    meets the parameters in an op, so in a GPU run it is on the GPU, wherever it was made (a
    `torch.randint` input without `device=` runs on a CPU-only script or a default device)."""
    return name in facts.handed_to_modules(scope)


def _binding_on_host(binding: Binding, facts: Facts, depth: int) -> bool:
    value = binding.value
    if binding.how == "for":
        loop = binding.block
        if facts.loaders.yields_host_batches(loop):
            return True  # batches of a torch DataLoader are made on the host
        return value is not None and on_host(value, loop.parent or loop, facts, depth + 1)
    if binding.how != "=" or value is None:
        return False
    return on_host(value, binding.block, facts, depth + 1)


def _packed_sizes(name: str, scope: Scope, facts: Facts, depth: int) -> bool:
    """`batch_sizes` as a parameter, unpacked from a PackedSequence (`data, batch_sizes, *_ = x`)
    or read from one: every plain assignment to it must be None or a host tensor."""
    current: Scope | None = scope
    while current is not None and name not in current.params and not any(
            name in names_in(target) for target, _, _ in current.assigns):
        current = current.parent
    if current is None:
        return False
    for target, value, how in current.assigns:
        if name not in names_in(target):
            continue
        if how != "=":
            return False
        if isinstance(target, ast.Name) and not (isinstance(value, ast.Constant) and value.value is None) \
                and not on_host(value, current, facts, depth + 1):
            return False
    return True


def _call_on_host(call: ast.Call, where: Block | Scope, facts: Facts, depth: int) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("cpu", "to"):
        target = _destination(call)
        if func.attr == "cpu" or (target is not None and device_type(target, facts.values, _scope(where)) == "cpu"):
            return True  # `(pred == y).cpu()`: a copy on the host, whatever it came from
    if any(k.arg == "device" for k in call.keywords):
        return False
    name = facts.qualify(func) or ""
    if name in _BUILDERS:
        data = call.args[0] if call.args else None
        return data is None or _python_data(data, where, facts) or on_host(data, where, facts, depth + 1)
    if name in _FACTORIES:
        return True
    if name.startswith("torch."):
        return _only_host_tensors(call.args, where, facts, depth)
    if isinstance(func, ast.Attribute) and name == "" and func.attr not in _MOVES:
        return on_host(func.value, where, facts, depth + 1)
    return False


def _destination(call: ast.Call) -> ast.expr | None:
    """Where `.to(...)` sends a tensor: its first argument or `device=`."""
    keyword = next((k.value for k in call.keywords if k.arg == "device"), None)
    return keyword if keyword is not None else (call.args[0] if call.args else None)


def _python_data(expr: ast.expr, where: Block | Scope, facts: Facts) -> bool:
    """Plain Python values a tensor can be built from: literals, `x.shape[1:]`, `x.size()`,
    names the file shows are not tensors. An argument of unknown kind may be a GPU tensor
    (`torch.as_tensor` keeps its device), so it does not count."""
    if isinstance(expr, ast.Subscript):
        return _python_data(expr.value, where, facts)
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in ("size", "tolist"):
            return True
        if isinstance(func, ast.Name) and func.id in ("range", "len", "list", "tuple") and facts.qualify(func) is None:
            return True
    return facts.kinds.of(expr, _scope(where)) == OTHER


def _only_host_tensors(operands, where: Block | Scope, facts: Facts, depth: int) -> bool:
    """At least one operand is a host tensor and every other one is known not to be a tensor
    (`batch_sizes[0] > 1`, `torch.prod(sizes)`); an operand of unknown kind may be on the GPU."""
    found_host = False
    for operand in _flattened(operands):
        if on_host(operand, where, facts, depth + 1):
            found_host = True
        elif facts.kinds.of(operand, _scope(where)) != OTHER:
            return False
    return found_host


def _flattened(operands):
    """`torch.cat([a, b])` reads `a` and `b`."""
    for operand in operands:
        if isinstance(operand, (ast.List, ast.Tuple)):
            yield from _flattened(operand.elts)
        else:
            yield operand


def default_device_changed(facts: Facts) -> bool:
    """`torch.set_default_device(...)` anywhere, or `with torch.device(...):` around code (asked
    once per file, through `facts.default_device_changed`)."""
    return "set_default_device" in facts.model.calls_by_tail or any(
        facts.qualify(call.func) == "torch.device" for call, _ in facts.model.calls_named("device")
        if id(call) in facts.model.with_items)
