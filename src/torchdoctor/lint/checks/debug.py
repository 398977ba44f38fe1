"""TD704 debug-leftover: debugging aids that stay on in training.

Only settings the file turns on with a value it spells out are reported; a switch driven by a
flag (`set_detect_anomaly(args.debug)`) is already the recommended fix.
"""

from __future__ import annotations

import ast
from typing import Iterator

from torchdoctor.findings import Severity
from torchdoctor.lint.checks.base import Check, Hit
from torchdoctor.lint.facts import Facts
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


class DebugLeftover(Check):
    codes = ("TD704",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        trains = bool(facts.context.step_loops or facts.context.step_functions)
        tails = {n.rsplit(".", 1)[1] for n in (*_SWITCHES, *_CONTEXTS, *_GRADCHECKS)}
        for call, block in facts.model.calls_named(*sorted(tails)):
            name = facts.qualify(call.func)
            if name in _SWITCHES:
                order, switch, severity, cost = _SWITCHES[name]
                expr = bind(call, order).get(switch)
                value = facts.values.evaluate(expr, block.scope) if expr is not None else None
                if not isinstance(value, Unknown) and truthy(value):
                    yield _hit(call, f"`{ast.unparse(call)}`", cost, severity)
            elif name in _CONTEXTS:
                enabled = next((k.value for k in call.keywords if k.arg == "mode"), None)
                if enabled is None or truthy(facts.values.evaluate(enabled, block.scope)):
                    yield _hit(call, f"`{ast.unparse(call)}`", _CONTEXTS[name], Severity.HIGH)
            elif name in _GRADCHECKS and (trains or facts.context.region(block).per_step):
                yield _hit(call, f"`{name.rsplit('.', 1)[1]}` in a training script",
                           "runs the function many times in float64 with finite differences", Severity.MEDIUM)
        for statement, block in facts.model.assignments:
            if isinstance(statement, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and facts.qualify(t) == _DETERMINISTIC_FLAG for t in statement.targets):
                if facts.values.evaluate(statement.value, block.scope) is True:
                    yield _hit(statement, f"`{_DETERMINISTIC_FLAG} = True`",
                               "restricts cuDNN to deterministic (often slower) algorithms", Severity.LOW)


def _hit(node: ast.AST, spelled: str, cost: str, severity: Severity) -> Hit:
    return Hit("TD704", node, f"Debugging aid left on: {spelled}",
               f"{spelled} {cost}; useful while debugging, a cost on every step of a real run",
               severity, {"setting": spelled})
