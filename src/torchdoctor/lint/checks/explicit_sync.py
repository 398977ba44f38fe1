"""TD204 explicit-sync: `torch.cuda.synchronize()` / `empty_cache()` on every pass of a loop
that matters, and CUDA_LAUNCH_BLOCKING=1 set in code. A name the file binds to one of those
functions counts as the function: `sync = torch.cuda.synchronize`, or `synchronize =
torch.cuda.synchronize if device_type == "cuda" else lambda: None` (the function under that
condition).

A loop that only times the model (no batches drawn, no loss) must wait for the GPU before it
reads the clock: that is a benchmark, not a habit. A loop that takes batches or computes a loss
is never one, whatever clock its meters read.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from torchdoctor.model.findings import Severity
from torchdoctor.lint.checks.base import Check, Hit
from torchdoctor.lint.context import EVAL, STEP, Region, nearest_loop
from torchdoctor.lint.environment import environment_writes
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.model import Block, enclosing_loops
from torchdoctor.lint.names import call_tail
from torchdoctor.lint.values import Unknown, truthy

_SYNC_CALLS = {
    "torch.cuda.synchronize": "waits for every queued kernel",
    "torch.accelerator.synchronize": "waits for every queued kernel",
    "torch.cuda.current_stream.synchronize": "waits for every queued kernel",
    "torch.cuda.empty_cache": "synchronizes and returns cached blocks, so later allocations go to the driver",
}
_LAUNCH_BLOCKING = "CUDA_LAUNCH_BLOCKING"


class ExplicitSync(Check):
    codes = ("TD204",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        loop_facts = None
        aliases = _SyncAliases(facts)
        for call, block in aliases.calls():
            name, alias = self._qualified(call, facts), aliases.resolve(call, block)
            if alias is not None:
                name = alias.function
            if name not in _SYNC_CALLS:
                continue
            region = facts.context.region(block)
            loop = nearest_loop(block)
            if region.guarded or (loop is not None and facts.context.guard_between(block, loop)):
                continue
            loop_facts = loop_facts or _LoopFacts(facts)
            if loop is not None and not loop_facts.repeats_per_step(call, loop, region):
                continue
            if region.per_step or region.per_eval_batch:
                severity, where = Severity.MEDIUM, region.via
            elif loop is not None:
                severity, where = Severity.LOW, f"the loop at line {loop.line}"
            else:
                continue
            short = name.replace(".current_stream.", ".current_stream().")
            evidence = {"call": short, "where": where}
            if alias is None:
                yield Hit("TD204", call, f"`{short}()` in a loop",
                          f"`{short}()` inside {where} {_SYNC_CALLS[name]} on every iteration; the GPU "
                          f"runs dry while the host waits", severity, evidence)
                continue
            evidence.update(alias=call.func.id, when=alias.when)
            yield Hit("TD204", call, f"`{call.func.id}()`, which is `{short}`, in a loop",
                      f"`{call.func.id}()` inside {where} is `{short}()`{alias.words()}: it "
                      f"{_SYNC_CALLS[name]} on every iteration; the GPU runs dry while the host waits",
                      severity, evidence)
        yield from self._launch_blocking(facts)

    @staticmethod
    def _qualified(call: ast.Call, facts: Facts) -> str | None:
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
            inner = facts.qualify(func.value.func)
            return f"{inner}.{func.attr}" if inner else None
        return facts.qualify(func)

    def _launch_blocking(self, facts: Facts) -> Iterator[Hit]:
        for _, node, value, block in environment_writes(facts, (_LAUNCH_BLOCKING,)):
            result = facts.values.evaluate(value, block.scope)
            if isinstance(result, Unknown):
                yield Hit("TD204", node, "CUDA_LAUNCH_BLOCKING set from a run-time value",
                          f"CUDA_LAUNCH_BLOCKING is set in code; its value {result.why}. If it is 1, every "
                          f"kernel launch waits for the kernel to finish: the runtime check will decide",
                          Severity.INFO, {"variable": _LAUNCH_BLOCKING})
            elif truthy(result) and str(result).strip() not in ("0", "", "False", "false"):
                yield Hit("TD204", node, "CUDA_LAUNCH_BLOCKING=1 set in code",
                          "CUDA_LAUNCH_BLOCKING=1 makes every kernel launch wait until the kernel "
                          "finishes: the host and GPU never overlap. It is a debugging switch; remove it",
                          Severity.HIGH, {"variable": _LAUNCH_BLOCKING, "value": str(result)})


@dataclass(frozen=True)
class _Alias:
    function: str  # the sync function the name holds
    when: str | None  # the condition under which it holds it (None: always)

    def words(self) -> str:
        if not self.when:
            return ""
        return f" when `{self.when}`{' (on CUDA)' if 'cuda' in self.when.lower() else ''}"


class _SyncAliases:
    """Names the file binds to a sync function, plainly or as one branch of a conditional
    expression (the other branch is typically a no-op for the CPU). A call of such a name is
    taken for the function only where the name has that one assignment in sight."""

    def __init__(self, facts: Facts):
        self.facts = facts
        self._held: dict[int, _Alias] = {}  # id(assigned expression) → what it makes the name hold
        self._names: set[str] = set()
        for scope in facts.model.scopes:
            for target, value, how in scope.assigns:
                alias = self._alias(value) if how == "=" and isinstance(target, ast.Name) else None
                if alias is not None:
                    self._held[id(value)] = alias
                    self._names.add(target.id)

    def calls(self) -> Iterator[tuple[ast.Call, Block]]:
        """The calls of the sync functions' own names and of their aliases, each once."""
        names = dict.fromkeys(("synchronize", "empty_cache", *sorted(self._names)))
        return iter(dict.fromkeys(self.facts.model.calls_named(*names)))

    def resolve(self, call: ast.Call, block: Block) -> _Alias | None:
        if not self._held or not isinstance(call.func, ast.Name) or call.func.id not in self._names:
            return None
        found = self.facts.values.definition(call.func.id, block.scope)
        return self._held.get(id(found[0])) if found is not None and found[0] is not None else None

    def _alias(self, value: ast.expr | None) -> _Alias | None:
        if isinstance(value, ast.IfExp):
            for branch, when in ((value.body, value.test), (value.orelse, None)):
                if self._function(branch) in _SYNC_CALLS:
                    return _Alias(self._function(branch), ast.unparse(when) if when else _negated(value.test))
            return None
        function = self._function(value)
        return _Alias(function, None) if function in _SYNC_CALLS else None

    def _function(self, expr: ast.expr | None) -> str | None:
        return self.facts.qualify(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None


def _negated(test: ast.expr) -> str:
    """The condition under which the `else` branch is taken, in the words of the file."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.unparse(test.operand)
    return f"not ({ast.unparse(test)})"


class _LoopFacts:
    """What the sync check asks about loops, worked out once per file."""

    def __init__(self, facts: Facts):
        self.facts = facts
        self.timed = set()  # loops that read a clock on their passes
        for call, block in facts.model.calls_named(*_CLOCK_TAILS):
            if (facts.qualify(call.func) or "") in _CLOCKS or call_tail(call) == "elapsed_time":
                self.timed.update(id(b) for b in enclosing_loops(block))

    def repeats_per_step(self, call: ast.Call, loop: Block, region: Region) -> bool:
        """Whether a sync in `loop` costs something on every pass that matters. Not when the
        loop leaves right after it (`empty_cache(); break` runs once), when the loop's passes
        are whole training runs or epochs (a loop over configurations or epochs around the
        training loop: once per run), or when a loop times the model alone: a benchmark must
        wait for the GPU before it reads the clock. A loop that takes batches from data or
        computes a loss is no benchmark, whatever clock its meters read."""
        context = self.facts.context
        if id(call) in self.facts.model.then_break or id(loop) in context.loops_around_training:
            return False
        if region.kind in (STEP, EVAL) or id(loop) not in self.timed:
            return True
        return any(context.draws_data(b) for b in enclosing_loops(loop))


_CLOCKS = {"time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "time.perf_counter_ns",
           "time.monotonic_ns", "timeit.default_timer"}
_CLOCK_TAILS = sorted({n.rsplit(".", 1)[1] for n in _CLOCKS} | {"elapsed_time"})
