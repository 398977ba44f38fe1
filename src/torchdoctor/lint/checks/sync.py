"""Host-device synchronization habits: TD201 host-sync, TD202 data-dependent-sync,
TD203 eval-transfer (TD204 explicit-sync is in explicit_sync.py).

A value read on the host (`.item()`, `float(t)`, `print(t)`, `if t:`) makes the CPU wait for
every queued GPU kernel. Once per log line it is harmless; in every training step it keeps
the GPU idle while Python queues the next step, so only per-step code is reported (an
`if step % N == 0:` guard makes it periodic, and silent). The same reads in an evaluation
loop are TD203: per-batch transfers that serialize evaluation.
"""

from __future__ import annotations

import ast
from typing import Iterator

from torchdoctor.rules.value_use import HOST_NEEDS_VALUE
from torchdoctor.model.findings import Severity
from torchdoctor.lint.checks.base import Check, Hit
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.host_tensors import on_host
from torchdoctor.lint.host_uses import HostUses
from torchdoctor.lint.kinds import DATASET, MODULE, OTHER
from torchdoctor.lint.logging_levels import LEVELS, enabled_level, level_of
from torchdoctor.lint.loop_bounds import FEW_PASSES, passes_within
from torchdoctor.lint.model import Block, Scope, enclosing_loops, on_error_path
from torchdoctor.lint.project import helper_read
from torchdoctor.lint.names import call_tail, last_name, short_source
from torchdoctor.lint.torch_api import HOST_READING

_HOST_METHODS = ("item", "tolist", "numpy", "cpu")
# Methods only a module has: `m.cpu().parameters()` moved a model, it read no tensor.
_MODULE_ONLY = {"parameters", "named_parameters", "buffers", "named_buffers", "children", "modules", "state_dict",
                "load_state_dict", "train", "eval", "apply", "named_modules", "zero_grad"}
_CASTS = ("float", "int", "bool", "complex", "str", "repr")  # each reads the value (str/repr to print it)
_COMPARING = ("max", "min")  # Python's max(loss, 1) compares, which is bool(tensor)
_TRACKER_METHODS = ("add_scalar", "add_scalars", "add_histogram", "log")  # TensorBoard, wandb
_SHAPE_DEPENDENT = ("nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount")


def host_reads(facts: Facts, wanted) -> Iterator[tuple[ast.AST, Block, str]]:
    """Every expression that copies a tensor value to the host, (node, block, what it is), among
    those in blocks `wanted(block)` accepts (asked first: it is cheaper than the tensor question).
    Tensors known to live on the CPU are not reads of the device, and neither is code that runs
    only on the way to an exception (a `raise`, an `assert`'s message)."""
    kinds = facts.kinds

    def device_tensor(expr: ast.expr, block: Block) -> bool:
        if not kinds.is_tensor(expr, block.scope):
            return False
        t = type(expr)
        if t is ast.Name and kinds.plain_here(expr, block):
            return False  # `lossf = lossf.item()` earlier in the step: a float by now
        if t is ast.Compare or t is ast.BinOp:  # `lossf > 10`: a tensor only through its operands
            operands = (expr.left, *expr.comparators) if t is ast.Compare else (expr.left, expr.right)
            if any(type(e) is ast.Name and kinds.plain_here(e, block) for e in operands):
                return any(device_tensor(e, block) for e in operands)
        return not on_host(expr, block, facts)

    def candidates(events):
        return ((node, block) for node, block in events if _counted(block, wanted, kinds))
    for call, block in candidates(facts.model.calls_named(*_HOST_METHODS)):
        func = call.func
        if _host_only_numpy(call):
            continue
        if isinstance(func, ast.Attribute) and not call.args and kinds.of(func.value, block.scope) != MODULE \
                and facts.model.method_on_result.get(id(call)) not in _MODULE_ONLY \
                and not on_host(func.value, block, facts):
            yield call, block, f"`{short_source(call)}`"
    for call, block in candidates(facts.model.calls_named("get_scale", "state_dict")):
        func = call.func
        if isinstance(func, ast.Attribute) and not call.args and _grad_scaler(func.value, block, facts):
            yield call, block, (f"`{short_source(call)}` (a GradScaler reads its scale from the device with "
                                f"`.item()`)")
    for call, block in candidates(facts.model.calls_named(*HOST_READING)):
        name = facts.qualify(call.func) or ""
        if name.startswith("torch.") or (isinstance(call.func, ast.Attribute) and name == ""
                                          and kinds.is_tensor(call.func.value, block.scope)):
            if not on_host(call, block, facts):
                yield call, block, f"`{short_source(call)}` (it returns a Python bool read from the device)"
    for call, block in candidates(facts.model.calls_named(*_CASTS)):
        if isinstance(call.func, ast.Name) and len(call.args) == 1 and device_tensor(call.args[0], block):
            yield call, block, f"`{short_source(call)}` on a tensor"
    for call, block in candidates(facts.model.calls_named(*_COMPARING)):
        if isinstance(call.func, ast.Name) and facts.qualify(call.func) is None and any(
                device_tensor(a, block) for a in call.args):
            yield call, block, f"`{short_source(call)}` comparing a tensor in Python"
    log_level = None
    for call, block in candidates(facts.model.calls_named("print", *LEVELS, "log", "format")):
        formatted = _formatted_arguments(call, block, facts)
        if formatted is None:
            continue
        level, args = formatted
        if level is not None:  # logging formats its arguments only for records it emits
            log_level = enabled_level(facts.model, facts.values) if log_level is None else log_level
            if level < log_level:
                continue
        if any(device_tensor(a, block) for a in _formatted(args)):
            yield call, block, f"formatting a tensor in `{short_source(call, 40)}`"
    for node, block in candidates(facts.model.percent_formats):
        if any(device_tensor(a, block) for a in _formatted([node])):
            yield node, block, f"formatting a tensor in `{short_source(node, 40)}`"
    for call, block in candidates(facts.model.calls_named(*_TRACKER_METHODS)):
        if _logs_tensor(call, block, facts):
            yield call, block, f"logging a tensor with `{short_source(call, 40)}`"
    for fstring, block in candidates(facts.model.fstrings):
        for part in fstring.values:
            if isinstance(part, ast.FormattedValue) and device_tensor(part.value, block):
                yield fstring, block, f"formatting tensor `{short_source(part.value)}` in an f-string"
                break
    for test, block in candidates(facts.model.conditions):
        for operand in _truth_tested(test):
            if device_tensor(operand, block):
                yield test, block, f"branching on tensor `{short_source(operand)}`"
                break


def _counted(block: Block, wanted, kinds) -> bool:
    """A read in `block` counts: `wanted` accepts the block (asked first: it is the cheapest), and it
    is neither on the way to an exception nor in a Dataset's code."""
    return wanted(block) and not on_error_path(block) and not in_dataset(block, kinds)


def _host_only_numpy(call: ast.Call) -> bool:
    """`t.numpy()` (not after `.cpu()`, which is the read) raises on a CUDA tensor, so code that
    calls it runs with `t` on the CPU: no device to wait for. `numpy(force=True)` copies from any
    device, and is a read."""
    return call_tail(call) == "numpy" and not any(k.arg == "force" for k in call.keywords)


def _at_call_sites(reads, facts: Facts) -> Iterator[tuple[ast.AST, Block, str]]:
    """A read a small helper returns (`def extract(v): return v.data.tolist()`) happens where the
    helper is called, as often as that call runs. When only some calls run every step (one in
    the step, one behind `if epoch % 100 == 0`, one after training), those calls are the reads
    and the lines to change; when every call does, the helper itself is."""
    context = facts.context
    for node, block, what in reads:
        helper = _reading_helper(node, block, context)
        sites = context.callers(helper) if helper is not None else []
        if all(context.region(site).per_step for _, site in sites):
            yield node, block, what
            continue
        for call, site in sites:
            yield call, site, f"`{short_source(call)}` (it returns {what} at line {node.lineno})"


def _project_helpers(facts: Facts, wanted) -> Iterator[tuple[ast.AST, Block, str]]:
    """Calls, in blocks `wanted` accepts, of a function in another module of the user's project
    that reads a device value on the host (`misc.all_reduce_mean(loss)` in `util/misc.py`): the read
    happens where the call is, as often as it runs."""
    if facts.path is None:
        return
    for call, block in facts.model.calls:
        if type(call.func) is not ast.Attribute and type(call.func) is not ast.Name:
            continue
        if not _counted(block, wanted, facts.kinds):
            continue
        qualified = facts.qualify(call.func)
        read = helper_read(qualified, facts.path) if qualified else None
        if read is not None:
            yield call, block, f"`{short_source(call)}` (it reads {read.what} at {read.path}:{read.line})"


def _reading_helper(node: ast.AST, block: Block, context) -> Scope | None:
    """The function of the file that returns the value `node` reads, when only its callers say how
    often it runs (not a training step, a forward or a Lightning hook of its own)."""
    scope = block.scope
    if scope.kind != "function" or not context.callers(scope) or scope.name in ("forward", *_HOOKS):
        return None
    if id(scope) in context.step_functions:
        return None
    returned = any(node is n for value, _ in scope.returns_at for n in ast.walk(value))
    return scope if returned else None


_HOOKS = ("training_step", "validation_step", "test_step", "predict_step")


def few_batches(block: Block, facts: Facts) -> bool:
    """The evaluation loop around `block` reads a handful of batches at most (`max_batches=10`)."""
    for loop in enclosing_loops(block):
        if id(loop) in facts.context.eval_loops:
            passes = passes_within(block, loop, facts)
            return passes is not None and passes <= FEW_PASSES
    return False


def in_dataset(block: Block, kinds) -> bool:
    """Code of a Dataset's methods (`__getitem__`): it runs in the loader's workers (or the main
    process) on host data; what it reads from tensors it made itself is on the host."""
    scope = block.scope
    while scope is not None and scope.kind != "class":
        scope = scope.parent
    return scope is not None and kinds.class_kind(scope.name) == DATASET


def _grad_scaler(expr: ast.expr, block: Block, facts: Facts) -> bool:
    """`scaler`, `loss_scaler`, `self.grad_scaler`, or a name bound to `torch.amp.GradScaler(...)`."""
    name = last_name(expr).lower()
    if "scaler" in name and not name.startswith(("lr", "sched")):
        return True
    if isinstance(expr, ast.Name):
        found = facts.values.definition(expr.id, block.scope)
        if found is not None and isinstance(found[0], ast.Call):
            return (facts.qualify(found[0].func) or "").endswith(".GradScaler")
    return False


def _formatted_arguments(call: ast.Call, block: Block, facts: Facts) -> tuple[int | None, list[ast.expr]] | None:
    """(logging level or None, the arguments turned into text) of `print(...)`, `"...".format(...)`
    and `logger.info("loss %s", loss)`; None for other calls. The message itself of a logging
    call is not among them: an f-string or `%` there is built eagerly and reported as such."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "print":
        return None, call.args
    if isinstance(func, ast.Attribute) and func.attr == "format" and isinstance(func.value, ast.Constant):
        return None, [*call.args, *(k.value for k in call.keywords)]
    if isinstance(func, ast.Attribute) and "log" in short_source(func.value).lower():
        if func.attr in LEVELS:
            return LEVELS[func.attr], call.args[1:]
        if func.attr == "log" and call.args:  # logger.log(logging.INFO, "loss %s", loss)
            level = level_of(call.args[0], block.scope, facts.values)
            return (level, call.args[2:]) if level is not None else None
    return None


def _logs_tensor(call: ast.Call, block: Block, facts: Facts) -> bool:
    """`writer.add_scalar("loss", loss, step)`, `wandb.log({"loss": loss})`: the tracker converts
    the tensor to a number on the host."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ("add_scalar", "add_histogram") and len(call.args) >= 2:
        values = [call.args[1]]
    elif func.attr == "add_scalars" and len(call.args) >= 2 and isinstance(call.args[1], ast.Dict):
        values = call.args[1].values
    elif func.attr == "log" and facts.qualify(func) == "wandb.log" and call.args and isinstance(call.args[0], ast.Dict):
        values = call.args[0].values
    else:
        return False
    return any(facts.kinds.is_tensor(v, block.scope) for v in values)


def _formatted(args):
    """The values formatted into text: `"%.4f %s" % (loss, x)` formats `loss` and `x`."""
    for arg in args:
        if (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod) and isinstance(arg.left, ast.Constant)
                and isinstance(arg.left.value, str)):
            yield from arg.right.elts if isinstance(arg.right, ast.Tuple) else [arg.right]
        else:
            yield arg


def _truth_tested(test: ast.expr) -> Iterator[ast.expr]:
    """The operands Python calls `bool()` on: `a and not b` tests `a` and `b`."""
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from _truth_tested(value)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _truth_tested(test.operand)
    else:
        yield test


def _per_line(code: str, found: list[tuple], title: str, message: str,
              severity: Severity = Severity.MEDIUM) -> Iterator[Hit]:
    """One finding per line from (node, what, where[, needed by]) items: the leftmost, with the count."""
    by_line: dict[int, list[tuple]] = {}
    for item in found:
        by_line.setdefault(item[0].lineno, []).append(item)
    for line in sorted(by_line):
        group = sorted(by_line[line], key=lambda h: h[0].col_offset)
        node, what, via, *needed = group[0]
        evidence = {"construct": what, "where": via, "on_line": len(group)}
        if needed:
            evidence["needed_by"] = needed[0]
        yield Hit(code, node, title.format(what=_strip(what)),
                  message.format(what=what, via=via, needed=needed[0] if needed else ""), severity, evidence)


class HostSync(Check):
    codes = ("TD201", "TD203")

    def run(self, facts: Facts) -> Iterator[Hit]:
        train, required, evaluation = [], [], []
        context = facts.context
        uses = HostUses(facts)
        hot = lambda block: context.region(block).per_step or context.region(block).per_eval_batch  # noqa: E731
        for node, block, what in (*_at_call_sites(host_reads(facts, hot), facts), *_project_helpers(facts, hot)):
            region = context.region(block)
            if region.per_step:
                needed = uses.needed_by(node, block)
                if needed:
                    required.append((node, what, region.via, needed))
                else:
                    train.append((node, what, region.via))
            elif region.per_eval_batch and not few_batches(block, facts):
                evaluation.append((node, what, region.via))
        yield from _per_line("TD201", train, "{what} in every training step",
                             "{what} inside {via} copies a value to the host every step: on a GPU the host waits "
                             "for all queued kernels before Python can go on")
        yield from _per_line("TD201", required, "{what} in every training step (" + HOST_NEEDS_VALUE + ")",
                             "{what} inside {via} reads a value the program acts on right away (it goes into "
                             "{needed}): " + HOST_NEEDS_VALUE + ", and the sync is the price of acting on it, not a "
                             "habit to drop. Acting on a "
                             "batch at a time (vectorized environments, one `.tolist()` for many values) makes it "
                             "rarer", Severity.INFO)
        yield from _per_line("TD203", evaluation, "{what} for every evaluation batch",
                             "{what} inside {via} moves every batch's result to the host, so evaluation waits for "
                             "the GPU batch by batch; keep results on the device and transfer once")


class DataDependentSync(Check):
    codes = ("TD202",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        found = []
        kinds, context = facts.kinds, facts.context
        for call, block in facts.model.calls_named(*_SHAPE_DEPENDENT, "where", "repeat_interleave"):
            if context.region(block).per_step and self._shape_dependent(call, block, facts):
                found.append((call, f"`{short_source(call)}`", context.region(block).via))
        filled = _masked_fills(facts)
        for sub, block in facts.model.subscripts:
            if id(sub) in filled or not context.region(block).per_step:
                continue
            parts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            if any(kinds.is_bool(p, block.scope) for p in parts):
                found.append((sub, f"boolean-mask indexing `{short_source(sub)}`", context.region(block).via))
        yield from _per_line("TD202", found, "{what}: output size depends on the data",
                             "{what} inside {via} has an output size that depends on tensor values, so the host "
                             "waits for the GPU to count them every step")

    @staticmethod
    def _shape_dependent(call: ast.Call, block: Block, facts: Facts) -> bool:
        func = call.func
        name = facts.qualify(func)
        tail = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        is_torch_function = name is not None and name.startswith("torch.")
        is_method = isinstance(func, ast.Attribute) and name is None
        if not (is_torch_function or is_method):
            return False
        if is_method and facts.kinds.of(func.value, block.scope) == MODULE:
            return False
        if tail == "where":  # torch.where(cond) is nonzero; the 3-argument form is not
            return is_torch_function and len(call.args) == 1 and not call.keywords
        if tail == "repeat_interleave":
            repeats = call.args[1] if is_torch_function and len(call.args) > 1 else (
                call.args[0] if is_method and call.args else None)
            has_size = any(k.arg == "output_size" for k in call.keywords)
            return repeats is not None and not has_size and facts.kinds.is_tensor(repeats, block.scope)
        return True


def _masked_fills(facts: Facts) -> set[int]:
    """Subscript targets of `t[mask] = <Python number>`: with a boolean mask and a scalar, torch
    runs `masked_fill_`, which needs no count of the mask and so no sync. A tensor on the right
    is scattered into the selected places, and that needs the count."""
    found = set()
    for statement, block in facts.model.assignments:
        if isinstance(statement, ast.Assign) and _python_number(statement.value, block, facts):
            found.update(id(t) for t in statement.targets if isinstance(t, ast.Subscript))
    return found


def _python_number(expr: ast.expr, block: Block, facts: Facts) -> bool:
    """`0`, `-1`, `float("-inf")`, `self.bins - 1` with `bins: int`, `math.inf`, `torch.inf`."""
    t = type(expr)
    if t is ast.Constant:
        return isinstance(expr.value, (int, float, bool))
    if t is ast.UnaryOp:
        return _python_number(expr.operand, block, facts)
    if t is ast.BinOp:
        return _python_number(expr.left, block, facts) and _python_number(expr.right, block, facts)
    if t is ast.Call:
        return isinstance(expr.func, ast.Name) and expr.func.id in ("float", "int") and facts.qualify(expr.func) is None
    if t in (ast.Name, ast.Attribute):
        if (facts.qualify(expr) or "") in _NUMBER_CONSTANTS:
            return True
        value = facts.values.evaluate(expr, block.scope)
        return isinstance(value, (int, float)) or facts.kinds.of(expr, block.scope) == OTHER
    return False


_NUMBER_CONSTANTS = {"math.inf", "math.nan", "math.pi", "math.e", "torch.inf", "torch.nan", "numpy.inf", "numpy.nan"}


def _strip(what: str) -> str:
    return what[0].upper() + what[1:] if what and not what.startswith("`") else what
