"""Multi-GPU habits: TD601 grad-accum-no-sync and TD604 dataparallel."""

from __future__ import annotations

import ast
from typing import Iterator

from torchdoctor.model.findings import Severity
from torchdoctor.lint.checks.base import Check, Hit
from torchdoctor.lint.context import nearest_loop
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.names import short_source
from torchdoctor.lint.values import Unknown

_DATAPARALLEL = {"torch.nn.DataParallel", "torch.nn.parallel.data_parallel"}
_DDP = "torch.nn.parallel.DistributedDataParallel"
# Any of these in the file's code means gradient sync is already managed on accumulation steps
# (attributes such as `model.no_sync`, or a framework's keyword); a docstring or comment that
# mentions them manages nothing.
_SYNC_ATTRIBUTES = {"no_sync", "require_backward_grad_sync", "accumulate"}
_SYNC_KEYWORDS = {"gradient_accumulation_steps"}


class DataParallelUsed(Check):
    codes = ("TD604",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        for call, _ in facts.model.calls_named("DataParallel", "data_parallel", *_local_aliases(facts)):
            name = facts.qualify(call.func)
            if name in _DATAPARALLEL:
                yield Hit("TD604", call, "nn.DataParallel instead of DistributedDataParallel",
                          "`nn.DataParallel` replicates the model to every GPU on each forward, runs one "
                          "Python thread per GPU and gathers outputs on GPU 0; one process per GPU with "
                          "DistributedDataParallel is faster, even on one machine", Severity.MEDIUM, {})


def _local_aliases(facts: Facts) -> list[str]:
    return [local for local, full in facts.imports.alias.items()
            if full.endswith("DataParallel") and local not in ("DataParallel", "DistributedDataParallel")]


# Below this, DDP sends many small all-reduces per backward (the default bucket is 25 MB).
SMALL_BUCKET_MB = 5


class DdpSettings(Check):
    """`find_unused_parameters=True` (a graph walk after every forward) and tiny gradient buckets.
    Whether a model needs the former depends on its forward at run time, so it is only noted
    (`info`); a tiny bucket size costs on every backward whatever the model."""

    codes = ("TD603",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        for call, block in facts.model.calls_named("DistributedDataParallel", *_local_aliases(facts)):
            if facts.qualify(call.func) != _DDP:
                continue
            given = {k.arg: k.value for k in call.keywords if k.arg}
            if "find_unused_parameters" in given:
                value = facts.values.evaluate(given["find_unused_parameters"], block.scope)
                if value is True:  # needed by models that skip parameters, which no reading of the call shows
                    yield Hit("TD603", call, "DDP with find_unused_parameters=True",
                              "`find_unused_parameters=True` makes DDP traverse the autograd graph after every "
                              "forward; it is needed only when forward leaves some parameters without gradients, "
                              "which the source alone cannot show. If the model uses them all, DDP warns at run "
                              "time that it \"did not find any unused parameters\"; then turn it off",
                              Severity.INFO, {"setting": "find_unused_parameters=True"})
            if "bucket_cap_mb" in given:
                value = facts.values.evaluate(given["bucket_cap_mb"], block.scope)
                if not isinstance(value, Unknown) and isinstance(value, (int, float)) and 0 < value < SMALL_BUCKET_MB:
                    yield Hit("TD603", call, f"DDP gradient buckets of {value} MB",
                              f"`bucket_cap_mb={value}` splits the gradient all-reduce into many small messages "
                              f"(the default is 25 MB); each pays the collective's latency", Severity.LOW,
                              {"setting": f"bucket_cap_mb={value}"})


class AccumulationWithoutNoSync(Check):
    """Gradient accumulation (backward every iteration, `optimizer.step()` behind `if i % k == 0`)
    on a model the file wraps in DDP, with no `no_sync()` anywhere in the file."""

    codes = ("TD601",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        text = facts.model.text
        if "DistributedDataParallel" not in text and "DDP" not in text:
            return
        if _manages_sync(facts.model.tree):
            return
        wrapped = [call for call, _ in facts.model.calls if facts.qualify(call.func) == _DDP]
        if not wrapped:
            return
        context = facts.context
        for call, block in context.backward_calls:
            loop = nearest_loop(block)
            if loop is None or context.guard_between(block, loop):
                continue
            if self._accumulates(loop, facts) or self._steps_now_and_then(call, facts):
                yield Hit("TD601", call, "DDP all-reduces on every micro-batch of gradient accumulation",
                          f"`{short_source(call, 64)}` runs on every iteration of the loop at line {loop.line} while the "
                          f"optimizer steps only every few iterations; the model is wrapped in "
                          f"DistributedDataParallel (line {wrapped[0].lineno}), so each backward all-reduces the "
                          f"full gradient. Wrap the non-final micro-batches in `model.no_sync()`",
                          Severity.MEDIUM, {"loop_line": loop.line, "ddp_line": wrapped[0].lineno})

    @staticmethod
    def _steps_now_and_then(call: ast.Call, facts: Facts) -> bool:
        """`loss_scaler(loss, optimizer, update_grad=(i + 1) % accum == 0)`: a helper that does the
        backward on every call and the step only when told to."""
        if not any(call is helper for helper, _ in facts.context.steps.helper_steps):
            return False
        return any(facts.context.now_and_then(k.value) for k in call.keywords if k.arg)

    @staticmethod
    def _accumulates(loop, facts: Facts) -> bool:
        """The optimizer steps behind a periodic guard in this loop, or in an enclosing loop."""
        context = facts.context
        for call, block in context.optimizer_steps:
            step_loop = nearest_loop(block)
            if step_loop is loop and context.guard_between(block, loop):
                return True
            if step_loop is not None and step_loop is not loop and any(b is step_loop for b in loop.ancestors()):
                return True  # `for micro in chunks: loss.backward()` nested in the stepping loop
        return False


def _manages_sync(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _SYNC_ATTRIBUTES:
            return True
        if isinstance(node, ast.keyword) and node.arg in _SYNC_KEYWORDS:
            return True
    return False
