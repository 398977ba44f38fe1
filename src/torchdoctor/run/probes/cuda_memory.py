"""CUDA caching-allocator statistics: peak memory, retries, OOMs, fragmentation.

Read once at the end of a run. Never creates a CUDA context (that alone would take
hundreds of MB on the user's GPU) and never raises: no CUDA means no statistics.
"""

from __future__ import annotations

from typing import Any

import torch

from torchdoctor.model.record import CudaMemory

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


# ---- the breakdown's device-level figures and the allocator's memory history ----------------
RESERVED_CURRENT = "reserved_bytes.all.current"
ALLOCATED_CURRENT = "allocated_bytes.all.current"
HISTORY_ENTRIES = 100_000  # alloc/free events kept: enough for the accounted steps of a large model


def device_figures(device_index: int, torch_module: Any = torch) -> dict[str, int] | None:
    """Total, peak allocated and reserved, reserved-but-unallocated, and memory outside PyTorch
    (CUDA context, NCCL, other processes: the device's used memory minus PyTorch's reserve)."""
    try:
        if not _cuda_in_use(torch_module):
            return None
        cuda = torch_module.cuda
        stats = cuda.memory_stats(device_index)
        free, total = cuda.mem_get_info(device_index)
        reserved_now = int(stats.get(RESERVED_CURRENT, 0))
        peak_allocated, peak_reserved = int(stats[PEAK_ALLOCATED]), int(stats[PEAK_RESERVED])
        return {
            "device_total_bytes": int(total),
            "peak_allocated_bytes": peak_allocated,
            "peak_reserved_bytes": peak_reserved,
            "reserved_unused_bytes": max(0, peak_reserved - peak_allocated),
            "outside_pytorch_bytes": max(0, int(total) - int(free) - reserved_now),
            "allocated_now_bytes": int(stats.get(ALLOCATED_CURRENT, 0)),
            "reserved_now_bytes": reserved_now,
            "free_bytes": int(free),
        }
    except Exception:
        return None


def start_history(torch_module: Any = torch) -> bool:
    """Record the allocator's alloc/free events with their Python stacks (for the largest live
    blocks' lines); False where this torch or device cannot."""
    try:
        if not _cuda_in_use(torch_module):
            return False
        torch_module.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES, stacks="python")
        return True
    except Exception:
        return False


def stop_history(torch_module: Any = torch) -> None:
    try:
        torch_module.cuda.memory._record_memory_history(enabled=None)
    except Exception:
        pass


def snapshot(torch_module: Any = torch) -> dict | None:
    try:
        return torch_module.cuda.memory._snapshot() if _cuda_in_use(torch_module) else None
    except Exception:
        return None


def largest_blocks(snap: dict | None, is_user_file, limit: int = 10) -> list[dict]:
    """The largest allocated blocks of an allocator snapshot: bytes and, when the history was
    recording when they were made, the innermost frame `is_user_file` accepts.
    Returns plain dicts {"bytes", "path", "line", "function"} (path None without frames)."""
    if not isinstance(snap, dict):
        return []
    blocks = []
    for segment in snap.get("segments") or []:
        for block in segment.get("blocks") or []:
            if block.get("state") != "active_allocated":
                continue
            size = int(block.get("requested_size") or block.get("size") or 0)
            frame = next((f for f in block.get("frames") or [] if is_user_file(str(f.get("filename", "")))), None)
            blocks.append({"bytes": size, "path": frame.get("filename") if frame else None,
                           "line": int(frame.get("line", 0)) if frame else 0,
                           "function": str(frame.get("name", "")) if frame else ""})
    blocks.sort(key=lambda b: -b["bytes"])
    return blocks[:limit]
