"""Whether code runs while a model trains, for settings whose cost is paid by every step they
stay on (anomaly mode, deterministic kernels): not only code inside the step, but a function
that turns a switch on and then trains, and the top level of a script that trains.

A function *trains* when it is a step function, holds a training loop of its own, or calls a
function of the same file that does (one call deep: `main()` calling `train()`).
"""

from __future__ import annotations

from torchdoctor.lint.context import Context
from torchdoctor.lint.model import Block, Scope

_CALL_DEPTH = 1


def trains_where(block: Block, context: Context) -> bool:
    """Training runs while code in `block` has effect: in the step, in a function that trains,
    or at the top level of a script that trains anywhere."""
    if context.region(block).per_step:
        return True
    scope = block.scope
    if scope.kind == "module":
        return bool(context.step_loops or context.step_functions)
    return scope.kind == "function" and function_trains(scope, context)


def function_trains(function: Scope, context: Context, depth: int = 0) -> bool:
    if id(function) in context.step_functions:
        return True
    if any(loop.scope is function and id(loop) in context.step_loops for loop in context.model.loops):
        return True
    if depth >= _CALL_DEPTH:
        return False
    return any(callee is not function and function_trains(callee, context, depth + 1)
               for callee in _local_callees(function, context))


def _local_callees(function: Scope, context: Context) -> list[Scope]:
    callees = []
    for call, block in context.model.calls:
        if block.scope is function:
            callee = context.local_callee(call, block)
            if callee is not None:
                callees.append(callee)
    return callees
