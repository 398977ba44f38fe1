"""Every rank of a DDP batch-size trial reaches the same verdict.

Under `torch.distributed.run` each rank ran the script at the same batch size. A rank whose
script failed (ran out of memory) does not come here: it exits with its record written, and the
launcher stops the other ranks (they would otherwise wait for it in the gradient all-reduce),
so no rank is left behind. The ranks that finished agree here on one gloo group of torchdoctor's
own, apart from the script's (which may be gone, or NCCL): all fit = all_reduce(MIN) of each
rank's "fits", peaks (the step's and each phase's) = all_reduce(MAX), and rank 0 writes the
verdict: a size fits when it fits on the fullest rank.
"""

from __future__ import annotations

import datetime
import os

from torchdoctor.model.memory_record import PHASES
from torchdoctor.model.record import RunRecord

COMM_TAG = "memory"  # the group's store prefix: torchdoctor/comm/memory
TIMEOUT = datetime.timedelta(seconds=120)


def fits(record: RunRecord) -> bool:
    memory = record.memory
    return bool(record.steps) and record.run.status in ("step-limit", "completed") and (
        memory is None or memory.failure is None)


def agree(record: RunRecord, rank: int, world: int) -> dict | None:
    """The verdict every rank agrees on (None where the group could not be formed)."""
    import torch
    import torch.distributed as dist

    memory = record.memory
    comm = _communicator(rank, world)
    try:
        everyone = torch.tensor([1 if fits(record) else 0, rank if not fits(record) else world], dtype=torch.int64)
        phases = memory.phase_peaks if memory else {}
        largest = torch.tensor([memory.peak_bytes or 0 if memory else 0,
                                memory.peak_reserved_bytes or 0 if memory else 0,
                                *(phases.get(phase, -1) for phase in PHASES)], dtype=torch.int64)
        comm.all_reduce(everyone, dist.ReduceOp.MIN)
        comm.all_reduce(largest, dist.ReduceOp.MAX)
        comm.group.barrier().wait()
    finally:
        if hasattr(comm.group, "shutdown"):
            comm.group.shutdown()
    all_fit, first_failed = bool(everyone[0]), int(everyone[1])
    return {"all_fit": all_fit, "first_failed_rank": None if all_fit else first_failed, "world_size": world,
            "max_peak_bytes": int(largest[0]), "max_device_peak_bytes": int(largest[1]) or None,
            "max_phase_peaks": {phase: int(v) for phase, v in zip(PHASES, largest[2:].tolist()) if v >= 0}}


def _communicator(rank: int, world: int):
    """A gloo group (comm/bench.py's `Communicator`) on the launcher's store, under a tag of its
    own so that nothing of the script's group is touched.

    The store is opened here, not with run/ranks/identity.py's `agent_store` (which gives up
    when the launcher shares no store): only when the launcher shares its own
    (TORCHELASTIC_USE_AGENT_STORE=True: torch.distributed.run's c10d rendezvous on recent
    torch, unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; older torch shares none) is there a
    store at MASTER_ADDR:MASTER_PORT to join; otherwise rank 0 tries to host one there (which
    fails with EADDRINUSE while the script's own store still holds that port: a known gap)."""
    import torch.distributed as dist

    from torchdoctor.comm.bench import open_communicator

    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=not agent_store and rank == 0, timeout=TIMEOUT)
    return open_communicator(store, rank, world, "gloo", TIMEOUT.total_seconds(), tag=COMM_TAG)
