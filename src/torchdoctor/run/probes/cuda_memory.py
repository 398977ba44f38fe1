"""CUDA caching-allocator statistics: peak memory, retries, OOMs, fragmentation.

Read once at the end of a run. Never creates a CUDA context (that alone would take
hundreds of MB on the user's GPU) and never raises: no CUDA means no statistics.
"""

from __future__ import annotations

from typing import Any

import torch

from torchdoctor.record import CudaMemory

PEAK_ALLOCATED = "allocated_bytes.all.peak"
PEAK_RESERVED = "reserved_bytes.all.peak"
ALLOC_RETRIES = "num_alloc_retries"
OOMS = "num_ooms"
INACTIVE_SPLIT = "inactive_split_bytes.all.current"


def _cuda_in_use(torch_module: Any) -> bool:
    cuda = torch_module.cuda
    return bool(cuda.is_available() and cuda.is_initialized())


def read_cuda_memory(device_index: int, torch_module: Any = torch) -> CudaMemory | None:
    """Allocator statistics for `device_index`, or None when CUDA was not used."""
    try:
        if not _cuda_in_use(torch_module):
            return None
        cuda = torch_module.cuda
        stats = cuda.memory_stats(device_index)
        # Without the peaks (an allocator backend that does not report them) zeros would
        # read as "the run used no memory": report nothing rather than a wrong number.
        if PEAK_ALLOCATED not in stats or PEAK_RESERVED not in stats:
            return None
        return CudaMemory(
            device_total_bytes=int(cuda.get_device_properties(device_index).total_memory),
            peak_allocated_bytes=int(stats[PEAK_ALLOCATED]),
            peak_reserved_bytes=int(stats[PEAK_RESERVED]),
            alloc_retries=int(stats.get(ALLOC_RETRIES, 0)),
            ooms=int(stats.get(OOMS, 0)),
            inactive_split_bytes=int(stats.get(INACTIVE_SPLIT, 0)),
        )
    except Exception:
        return None


def reset_peak(device_index: int, torch_module: Any = torch) -> bool:
    """Start peak tracking afresh (so peaks cover the measured run); False when not possible."""
    try:
        if not _cuda_in_use(torch_module):
            return False
        torch_module.cuda.reset_peak_memory_stats(device_index)
        return True
    except Exception:
        return False
