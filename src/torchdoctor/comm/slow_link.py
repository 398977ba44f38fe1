"""A slow link, simulated: the test hook that makes every collective as slow as a link of a
given bandwidth, so the distributed rules can be tested on one CPU machine.

    TORCHDOCTOR_SIMULATED_LINK_GBPS=0.2 torchdoctor run --nproc-per-node 2 train.py

With the variable set, in every rank: the `torch.distributed` collectives (`all_reduce`,
`all_gather_into_tensor`, `reduce_scatter_tensor`, `broadcast`, and the object variants that
use them) finish no earlier than a ring over a link of that bus bandwidth would let them
(time = bytes * 2(n-1)/n / bandwidth, the busbw definition nccl-tests use); DDP's gradient
all-reduces go through `torch.distributed.all_reduce` (the probe registers DDP's own default
`allreduce_hook` when the script registered none, which behaves as DDP without a hook), and
the communication check after the script is delayed the same way. The transfer time is added
after the real collective completes, which happens on every rank at once (when the last rank
has joined), so the ranks stay in step as on a real link. An asynchronous collective is
delayed on its future, so communication still overlaps backward as on a real slow link.

Everything a simulated run reports says the link was simulated. The variable is a test hook,
not a knob: it makes training slower, never faster.
"""

from __future__ import annotations

import os
import time

ENV = "TORCHDOCTOR_SIMULATED_LINK_GBPS"
DELAYED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "all_gather",
           "reduce_scatter")


def simulated_gbps() -> float | None:
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None


def transfer_s(nbytes: int, world_size: int, gbps: float, op: str = "all_reduce") -> float:
    """How long `nbytes` (the op's full data per rank) take over a ring at bus bandwidth
    `gbps`: all-reduce moves 2(n-1)/n of it per rank, all-gather and reduce-scatter (n-1)/n,
    broadcast all of it (nccl-tests' bus-bandwidth factors)."""
    n = max(1, world_size)
    if op == "all_reduce":
        share = 2 * (n - 1) / n if n > 1 else 1.0
    elif op == "broadcast":
        share = 1.0
    else:
        share = (n - 1) / n if n > 1 else 1.0
    return nbytes * share / (gbps * 1e9)


def tensor_bytes(value) -> int:
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    try:
        return int(value.numel() * value.element_size())
    except AttributeError:
        return 0


class DelayedWork:
    """A collective's Work that completes the simulated transfer time after the real one."""

    def __init__(self, work, seconds: float) -> None:
        self._work, self._seconds = work, seconds
        self._done_at: float | None = None

    def _transfer(self) -> None:
        if self._done_at is None:
            self._done_at = time.perf_counter() + self._seconds
        left = self._done_at - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        self._transfer()
        return result

    def get_future(self):
        def after(fut):
            self._transfer()
            return fut.value()
        return self._work.get_future().then(after)

    def is_completed(self) -> bool:
        return self._work.is_completed() and self._done_at is not None and time.perf_counter() >= self._done_at

    def __getattr__(self, name):
        return getattr(self._work, name)


def delayed(original, op: str, gbps: float, world_size, nbytes_of) -> object:
    """`original` (the torch.distributed collective `op`) slowed to `gbps`; `nbytes_of(op,
    args, kwargs)` gives the bytes it moves, `world_size()` the group's size."""
    def collective(*args, **kwargs):
        seconds = transfer_s(nbytes_of(op, args, kwargs), world_size(), gbps, op)
        work = original(*args, **kwargs)
        if work is None:  # a blocking call has finished on every rank: the transfer follows
            time.sleep(seconds)
            return None
        return DelayedWork(work, seconds)
    return collective
