"""Tensors that live on the CPU whatever device the run trains on, so reading one on the host
waits for no GPU work:

- a PackedSequence's `batch_sizes` (torch keeps it on the CPU by contract; RNN code reads it
  as `int(batch_sizes[0])`), also under the name `batch_sizes` it is unpacked to;
- a tensor a function builds with `torch.tensor`/`torch.as_tensor` (or a legacy
  `torch.LongTensor`) from Python values or shapes, with no `device=`;
- what torch computes from those alone (`torch.prod(torch.tensor(x.shape))`, `sizes.sum()`).

A process that changed the default device (`torch.set_default_device("cuda")`) would put the
built tensors on the GPU; a file that does so gets no such exemption.
"""

from __future__ import annotations

import ast

from torchdoctor.lint.facts import Facts
from torchdoctor.lint.kinds import OTHER
from torchdoctor.lint.model import Scope, names_in

_PACKED_SIZES = "batch_sizes"
_BUILDERS = {"torch.tensor", "torch.as_tensor", "torch.LongTensor", "torch.IntTensor", "torch.FloatTensor",
             "torch.DoubleTensor", "torch.BoolTensor"}
_MOVES = {"to", "cuda", "mps", "xpu", "npu"}  # methods that may take a tensor off the CPU
_MAX_DEPTH = 6


def on_host(expr: ast.expr, scope: Scope, facts: Facts, depth: int = 0) -> bool:
    """`expr` is a tensor (or a value of one) known to live on the CPU."""
    if depth > _MAX_DEPTH or _default_device_changed(facts):
        return False
    t = type(expr)
    if t is ast.Subscript:
        return on_host(expr.value, scope, facts, depth + 1)
    if t is ast.Attribute:
        return expr.attr == _PACKED_SIZES
    if t is ast.Name:
        return _name_on_host(expr.id, scope, facts, depth)
    if t is ast.Call:
        return _call_on_host(expr, scope, facts, depth)
    if t is ast.BinOp:
        return _only_host_tensors((expr.left, expr.right), scope, facts, depth)
    if t is ast.Compare:
        return _only_host_tensors((expr.left, *expr.comparators), scope, facts, depth)
    if t is ast.UnaryOp:
        return on_host(expr.operand, scope, facts, depth + 1)
    return False


def _name_on_host(name: str, scope: Scope, facts: Facts, depth: int) -> bool:
    if name == _PACKED_SIZES:
        return _packed_sizes(name, scope, facts, depth)
    found = facts.values.definition(name, scope)
    return found is not None and found[0] is not None and on_host(found[0], found[1], facts, depth + 1)


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


def _call_on_host(call: ast.Call, scope: Scope, facts: Facts, depth: int) -> bool:
    if any(k.arg == "device" for k in call.keywords):
        return False
    func = call.func
    name = facts.qualify(func) or ""
    if name in _BUILDERS:
        data = call.args[0] if call.args else None
        return data is None or _python_data(data, scope, facts) or on_host(data, scope, facts, depth + 1)
    if name.startswith("torch."):
        return _only_host_tensors(call.args, scope, facts, depth)
    if isinstance(func, ast.Attribute) and name == "" and func.attr not in _MOVES:
        return on_host(func.value, scope, facts, depth + 1)
    return False


def _python_data(expr: ast.expr, scope: Scope, facts: Facts) -> bool:
    """Plain Python values a tensor can be built from: literals, `x.shape[1:]`, `x.size()`,
    names the file shows are not tensors. An argument of unknown kind may be a GPU tensor
    (`torch.as_tensor` keeps its device), so it does not count."""
    if isinstance(expr, ast.Subscript):
        return _python_data(expr.value, scope, facts)
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in ("size", "tolist"):
            return True
        if isinstance(func, ast.Name) and func.id in ("range", "len", "list", "tuple") and facts.qualify(func) is None:
            return True
    return facts.kinds.of(expr, scope) == OTHER


def _only_host_tensors(operands, scope: Scope, facts: Facts, depth: int) -> bool:
    """At least one operand is a host tensor and every other one is known not to be a tensor
    (`batch_sizes[0] > 1`, `torch.prod(sizes)`); an operand of unknown kind may be on the GPU."""
    found_host = False
    for operand in _flattened(operands):
        if on_host(operand, scope, facts, depth + 1):
            found_host = True
        elif facts.kinds.of(operand, scope) != OTHER:
            return False
    return found_host


def _flattened(operands):
    """`torch.cat([a, b])` reads `a` and `b`."""
    for operand in operands:
        if isinstance(operand, (ast.List, ast.Tuple)):
            yield from _flattened(operand.elts)
        else:
            yield operand


def _default_device_changed(facts: Facts) -> bool:
    return "set_default_device" in facts.model.calls_by_tail
