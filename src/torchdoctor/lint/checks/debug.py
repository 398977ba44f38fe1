"""TD704 debug-leftover: debugging aids that stay on in training.

Only settings the file turns on with a value it spells out are reported; a switch driven by a
flag (`set_detect_anomaly(args.debug)`) is already the recommended fix.

An aid costs training time only where training runs with it on: in the training step (or a
function the step calls), in a function that itself trains, or at the top level of a script
that trains. Elsewhere it is a tool's own business: test helpers that wrap one `gradcheck`,
a deterministic switch restored around one call, a context manager's `__enter__`. Anomaly
mode with `check_nan=False` is how tracers record where each op came from, on purpose.
"""

from __future__ import annotations

import ast
from typing import Iterator

from torchdoctor.model.findings import Severity
from torchdoctor.lint.checks.base import Check, Hit
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.model import Block
from torchdoctor.lint.training import trains_where
from torchdoctor.lint.values import Unknown, bind, truthy

# qualified name → (parameter order, the switch parameter, severity, what it costs)
_SWITCHES = {
    "torch.autograd.set_detect_anomaly": (("mode", "check_nan"), "mode", Severity.HIGH,
                                          "records a traceback for every op and checks every gradient for NaN"),
    "torch.set_anomaly_enabled": (("enabled", "check_nan"), "enabled", Severity.HIGH,
                                  "records a traceback for every op and checks every gradient for NaN"),
    "torch.use_deterministic_algorithms": (("mode", "warn_only"), "mode", Severity.LOW,
                                           "swaps in slower deterministic kernels (and errors where none exist)"),
}
_CONTEXTS = {"torch.autograd.detect_anomaly": "records a traceback for every op and checks every gradient for NaN"}
_GRADCHECKS = {"torch.autograd.gradcheck", "torch.autograd.gradgradcheck"}
_DETERMINISTIC_FLAG = "torch.backends.cudnn.deterministic"
# A context manager's own methods: turning a switch on in `__enter__` is what `with` scopes.
_CONTEXT_METHODS = {"__enter__", "__exit__", "__aenter__", "__aexit__"}


class DebugLeftover(Check):
    codes = ("TD704",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        tails = {n.rsplit(".", 1)[1] for n in (*_SWITCHES, *_CONTEXTS, *_GRADCHECKS)}
        for call, block in facts.model.calls_named(*sorted(tails)):
            name = facts.qualify(call.func)
            if name not in (*_SWITCHES, *_CONTEXTS, *_GRADCHECKS) or not _during_training(block, facts):
                continue
            if name in _SWITCHES:
                order, switch, severity, cost = _SWITCHES[name]
                args = bind(call, order)
                expr = args.get(switch)
                value = facts.values.evaluate(expr, block.scope) if expr is not None else None
                traces_only = _records_traces(args.get("check_nan"), block, facts)
                if not isinstance(value, Unknown) and truthy(value) and not traces_only:
                    yield _hit(call, f"`{ast.unparse(call)}`", cost, severity)
            elif name in _CONTEXTS:
                if not _records_traces(bind(call, ("check_nan",)).get("check_nan"), block, facts):
                    yield _hit(call, f"`{ast.unparse(call)}`", _CONTEXTS[name], Severity.HIGH)
            else:
                yield _hit(call, f"`{name.rsplit('.', 1)[1]}` in a training script",
                           "runs the function many times in float64 with finite differences", Severity.MEDIUM)
        for statement, block in facts.model.assignments:
            if isinstance(statement, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and facts.qualify(t) == _DETERMINISTIC_FLAG for t in statement.targets):
                if facts.values.evaluate(statement.value, block.scope) is True and _during_training(block, facts):
                    yield _hit(statement, f"`{_DETERMINISTIC_FLAG} = True`",
                               "restricts cuDNN to deterministic (often slower) algorithms", Severity.LOW)


def _during_training(block: Block, facts: Facts) -> bool:
    if block.scope.name in _CONTEXT_METHODS and block.scope.class_scope is not None:
        return False
    return trains_where(block, facts.context)


def _records_traces(check_nan: ast.expr | None, block: Block, facts: Facts) -> bool:
    """`check_nan=False`: anomaly mode kept only for the traceback of each op (tracers, debug
    modes that record stack traces), not left on to hunt NaNs."""
    return check_nan is not None and facts.values.evaluate(check_nan, block.scope) is False


def _hit(node: ast.AST, spelled: str, cost: str, severity: Severity) -> Hit:
    return Hit("TD704", node, f"Debugging aid left on: {spelled}",
               f"{spelled} {cost}; useful while debugging, a cost on every step of a real run",
               severity, {"setting": spelled})
