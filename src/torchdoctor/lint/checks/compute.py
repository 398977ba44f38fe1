"""Compute-path settings: TD403 no-tf32 (TF32 switched off explicitly) and TD405
recompilation (`torch.compile` called inside a loop or the step).

Compiling a different object on each pass of a setup loop (`for i, layer in enumerate(layers):
layers[i] = torch.compile(layer)`, a dict of models) compiles each once: that is regional
compilation, not recompilation. Only a loop whose passes compile the same object again, or the
training step itself, is reported."""

from __future__ import annotations

import ast
from typing import Iterator

from torchdoctor.model.findings import Severity
from torchdoctor.lint.checks.base import Check, Hit
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.model import Block, enclosing_loops, loop_variables, names_in
from torchdoctor.lint.names import dotted, last_name
from torchdoctor.lint.values import Unknown

# Settings that turn TF32 off when given these values. `fp32_precision` is the API of torch ≥ 2.9.
_TF32_FLAGS = {
    "torch.backends.cuda.matmul.allow_tf32": (False, "matmuls"),
    "torch.backends.cudnn.allow_tf32": (False, "convolutions"),
    "torch.backends.cuda.matmul.fp32_precision": ("ieee", "matmuls"),
    "torch.backends.cudnn.fp32_precision": ("ieee", "convolutions"),
    "torch.backends.cudnn.conv.fp32_precision": ("ieee", "convolutions"),
    "torch.backends.cudnn.rnn.fp32_precision": ("ieee", "RNNs"),
    "torch.backends.fp32_precision": ("ieee", "matmuls and convolutions"),
}


class Tf32Off(Check):
    """TF32 switched off, except by code that toggles it: a function (or an if/else) that also
    switches the same TF32 setting on, in code or in a code string it hands to a benchmark
    Timer, is comparing the two or replaying a recorded precision, not training without TF32."""

    codes = ("TD403",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        for node, block, spelled, what in self._switched_off(facts):
            if not _toggled_nearby(node, block, what, facts):
                yield self._hit(node, spelled, what)
        yield from never_on(facts)

    @staticmethod
    def _switched_off(facts: Facts) -> Iterator[tuple[ast.AST, Block, str, str]]:
        for statement, block in facts.model.assignments:
            if not isinstance(statement, ast.Assign):
                continue
            for target in statement.targets:
                name = facts.qualify(target) if isinstance(target, ast.Attribute) else None
                if name in _TF32_FLAGS:
                    off, what = _TF32_FLAGS[name]
                    value = facts.values.evaluate(statement.value, block.scope)
                    if not isinstance(value, Unknown) and value == off:
                        yield statement, block, f"`{name} = {value!r}`", what
        for call, block in facts.model.calls_named("set_float32_matmul_precision"):
            if facts.qualify(call.func) != "torch.set_float32_matmul_precision" or not call.args:
                continue
            value = facts.values.evaluate(call.args[0], block.scope)
            if value == "highest":
                yield call, block, "`torch.set_float32_matmul_precision(\"highest\")`", "matmuls"

    @staticmethod
    def _hit(node: ast.AST, spelled: str, what: str) -> Hit:
        return Hit("TD403", node, f"TF32 turned off for {what}",
                   f"{spelled} keeps fp32 {what} off the TF32 tensor cores of Ampere and newer GPUs, "
                   f"several times slower for a precision most training does not need",
                   Severity.MEDIUM, {"setting": spelled})


def never_on(facts: Facts) -> Iterator[Hit]:
    """TF32 matmuls left off (torch's default) in a script that trains on the GPU when there is
    one, with fp32 matmuls (linear layers, `@`) and no autocast or half precision: on Ampere and
    newer GPUs they run several times slower than `torch.set_float32_matmul_precision("high")`
    lets them. Said where the file turns TF32 on behind an option that is off by default, else
    (low: the GPU generation and the matmuls' share are not in the source) where it picks the
    GPU. Not for convolutional models (cuDNN uses TF32 by default) or models whose every linear
    layer the file sizes at 256 wide or less (a small MLP policy is launch-bound, not matmul-bound)."""
    context = facts.context
    if not (context.step_loops or context.step_functions):
        return
    off = facts.off_by_default
    picks_gpu = [call for call, _ in facts.model.calls_named("is_available")
                 if facts.qualify(call.func) == "torch.cuda.is_available" and off.reason(call) is None]
    if not picks_gpu or not _matmul_bound(facts):
        return
    enabling = [(node, block) for node, block in _switches_on(facts, "matmuls")]
    if any(off.reason(node) is None for node, _ in enabling):
        return
    if enabling:  # the author weighed TF32 and left it to an option
        node, block = enabling[0]
        guard = block.node if block.kind == "if" else node
        yield Hit("TD403", guard, "TF32 matmuls only when an option is changed",
                  f"TF32 is turned on for matmuls at line {node.lineno} only when an option changes: "
                  f"{off.reason(node)}; by default fp32 matmuls run at full precision, several times slower "
                  f"on Ampere and newer GPUs", Severity.MEDIUM, {"enabled_at_line": node.lineno})
        return
    if _reduced_precision(facts):
        return
    yield Hit("TD403", picks_gpu[0], "TF32 never enabled for fp32 matmuls",
              "the script trains on the GPU when there is one, with fp32 matmuls (linear layers) and no "
              "autocast, and never enables TF32: torch leaves fp32 matmuls at full precision, several times "
              "slower on Ampere and newer GPUs than with `torch.set_float32_matmul_precision(\"high\")`",
              Severity.LOW, {"setting": "default (TF32 off for matmuls)"})


def _switches_on(facts: Facts, what: str) -> Iterator[tuple[ast.AST, Block]]:
    for statement, block in facts.model.assignments:
        if what in _switched_on(statement, facts):
            yield statement, block
    for call, block in facts.model.calls_named("set_float32_matmul_precision"):
        if what in _switched_on(call, facts):
            yield call, block


_REDUCED = ("autocast", "bfloat16", "float16", ".half()", "GradScaler")


def _reduced_precision(facts: Facts) -> bool:
    """Autocast, `.half()`, bf16/fp16 anywhere in the file (its text: a dtype option's choices
    too): its matmuls may not be fp32, and the finding would be a guess."""
    return any(word in facts.model.text for word in _REDUCED)


_SMALL_WIDTH = 256


def _matmul_bound(facts: Facts) -> bool:
    """The file's layers are linear (no convolutions), and not all sized small."""
    if any(tail.startswith("Conv") for tail in facts.model.calls_by_tail):
        return False
    widths, unknown = [], False
    for call, block in facts.model.calls_named("Linear"):
        if facts.qualify(call.func) != "torch.nn.Linear":
            continue
        for arg in call.args[:2]:
            value = facts.values.evaluate(arg, block.scope)
            if isinstance(value, int) and not isinstance(value, bool):
                widths.append(value)
            else:
                unknown = True
    if not widths and not unknown:
        return False
    return not widths or max(widths) > _SMALL_WIDTH


def _toggled_nearby(node: ast.AST, block: Block, what: str, facts: Facts) -> bool:
    """The function around `node` (at module level: the if/else around it) also turns TF32 on
    for the same `what`."""
    if block.scope.kind == "function":
        region = block.scope.node
    else:
        region = _innermost_if(node, facts.model.tree)
        if region is None:
            return False
    return any(what in _switched_on(n, facts) for n in ast.walk(region))


def _innermost_if(node: ast.AST, tree: ast.Module) -> ast.If | None:
    line = node.lineno
    around = [n for n in ast.walk(tree) if isinstance(n, ast.If) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return max(around, key=lambda n: n.lineno, default=None)


def _switched_on(node: ast.AST, facts: Facts) -> set[str]:
    """What TF32 `node` turns on: an assignment of the on value, `set_float32_matmul_precision`
    below "highest", or such code inside a string (`Timer(setup="...allow_tf32 = True")`)."""
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
        on = set()
        for target in node.targets:
            name = facts.qualify(target) or dotted(target) if isinstance(target, ast.Attribute) else None
            if name in _TF32_FLAGS and node.value.value != _TF32_FLAGS[name][0] and node.value.value in (True, "tf32"):
                on.add(_TF32_FLAGS[name][1])
        return on
    if isinstance(node, ast.Call) and last_name(node.func) == "set_float32_matmul_precision" and node.args:
        arg = node.args[0]
        return {"matmuls"} if isinstance(arg, ast.Constant) and arg.value in ("high", "medium") else set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and any(
            word in node.value for word in ("tf32", "fp32_precision")):
        try:
            code = ast.parse(node.value)
        except (SyntaxError, ValueError):
            return set()
        return set().union(*(_switched_on(n, facts) for n in ast.walk(code)))
    return set()


class CompileInLoop(Check):
    codes = ("TD405",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        for call, block in facts.model.calls_named("compile"):
            if facts.qualify(call.func) != "torch.compile":
                continue
            region = facts.context.region(block)
            loop = _repeating_loop(call, block, facts)
            if region.kind in ("step", "forward"):
                where, severity = region.via, Severity.MEDIUM
            elif loop is not None:
                where, severity = f"the loop at line {loop.line}", Severity.MEDIUM
            else:
                continue
            yield Hit("TD405", call, "torch.compile called inside a loop",
                      f"`torch.compile` inside {where} wraps and compiles again on every iteration; compile "
                      f"once before the loop and reuse the compiled module", severity, {"where": where})


def _repeating_loop(call: ast.Call, block: Block, facts: Facts) -> Block | None:
    """The innermost loop around the call (in its function) whose passes compile the same
    object: the compiled expression does not change with that loop's variables."""
    compiled = names_in(call.args[0]) if call.args else set()
    return next((loop for loop in enclosing_loops(block)
                 if not compiled & facts.batches.derived(loop_variables(loop), loop.scope, loop)), None)
