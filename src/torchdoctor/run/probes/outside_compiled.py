"""Doctor code that can start in the middle of the script's compiled call: a signal handler (the
line sampler's timer), a weakref callback (the memory ledger's freed storages).

While compiled code runs, Dynamo's frame callback is set, and every Python frame that starts
then is handed to Dynamo the first time its code is seen: the script's counters show one more
compiled frame (`torch._dynamo.utils.counters["frames"]`) than the script alone makes. The
doctor's own code objects are marked to run as they are (compile probe, `_skip_own_code`), but
a standard-library function they call is not (`Counter.__missing__`, `weakref.finalize`). An
entry point wrapped here clears the callback for its duration and puts it back, as
`torch._dynamo.disable` does; two C calls, about a tenth of a microsecond.
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

try:  # a C function of torch's own extension: importing it does not import torch._dynamo
    from torch._C._dynamo.eval_frame import set_eval_frame
except Exception:  # noqa: BLE001 - a torch without Dynamo: nothing compiles, nothing to step out of
    set_eval_frame = None

F = TypeVar("F", bound=Callable)


def outside_compiled(fn: F) -> F:
    """`fn`, run with Dynamo's frame callback cleared: nothing it calls is compiled or counted."""
    if set_eval_frame is None:
        return fn

    @functools.wraps(fn)
    def run_outside(*args, **kwargs):
        prior = set_eval_frame(None)
        try:
            return fn(*args, **kwargs)
        finally:
            set_eval_frame(prior)

    return run_outside  # type: ignore[return-value]
