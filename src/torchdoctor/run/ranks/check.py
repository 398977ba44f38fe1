"""The short communication check a multi-rank run makes after the script: the all-reduce
table of `torchdoctor comm` at the sizes that matter for this job (DDP's 25 MiB bucket and the
model's whole gradient), and the path between the ranks, so the scaling verdict has a
measured link.

Every rank that ended cleanly joins it, on a process group of its own (never the script's,
whose last collectives may still be pending); a rank that does not arrive within
CHECK_TIMEOUT_S leaves the check out with a note, never a hang.
"""

from __future__ import annotations

import torch

from torchdoctor.model.units import MIB
from torchdoctor.comm.bench import DDP_BUCKET_BYTES, measure_all_reduce
from torchdoctor.model.record import ProbeNote, RunRecord
from torchdoctor.run.ranks.identity import LaunchEnv

CHECK_TIMEOUT_S = 20.0
CHECK_BUDGET_S = 6.0  # the sizes stop here; a step's data is in the record already
MIN_BYTES, MAX_BYTES = 4 * MIB, 256 * MIB


def check_sizes(grad_bytes: int) -> list[int]:
    whole = min(MAX_BYTES, max(MIN_BYTES, -(-grad_bytes // MIB) * MIB)) if grad_bytes else None
    return sorted({MIN_BYTES, DDP_BUCKET_BYTES, *([whole] if whole else [])})


def communication_check(record: RunRecord, store, launch: LaunchEnv) -> None:
    info = record.distributed
    if info is None or launch.world_size < 2:
        return
    if not info.ddp and not info.collectives and info.identity.backend is None:
        return  # the script never communicated: nothing to size
    if store is None:
        record.probe_notes.append(ProbeNote("comm", "no store to meet the other ranks on: the communication "
                                                    "check after the script did not run"))
        return
    backend = "nccl" if "nccl" in (info.identity.backend or "") and torch.cuda.is_available() else "gloo"
    grad_bytes = max((m.grad_bytes for m in info.ddp), default=0)
    try:
        gpus = [torch.cuda.current_device()] if backend == "nccl" else None
        info.comm = measure_all_reduce(store, launch.rank, launch.world_size, backend, check_sizes(grad_bytes),
                                       timeout_s=CHECK_TIMEOUT_S, tag="check", warmup=1, repeats=3,
                                       budget_s=CHECK_BUDGET_S, gpus=gpus)
    except Exception as exc:  # another rank never came, or the backend refused: say so, keep the run
        record.probe_notes.append(ProbeNote(
            "comm", f"the communication check after the script did not finish: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:200] if str(exc) else ''}"))
