"""This process's memory, as the machine tells it.

- `available_memory_bytes`: how much more it may take: the least of what the machine has available,
  what its cgroup still allows (v2 `memory.max` less `memory.current`) and what its address-space
  limit (`ulimit -v`, RLIMIT_AS) leaves above what it maps already. None where nothing says. The one
  answer for the trace reader's memory budget and a followed run's limit.
- `peak_rss_bytes`: the resident set's high-water mark (what the kernel's OOM killer weighs).
- `heap_in_use_bytes`: what the C allocator has handed out and not been given back (glibc's
  `mallinfo2`). The resident set also holds what the allocator keeps after a free: its free lists
  and the untrimmed top of its heap. That share moves with the order of allocations, not with what
  the program holds. Between two steps a training loop that allocates the same every step has a
  flat figure here, while its RSS can creep with fragmentation.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def available_memory_bytes(cgroup_root: Path = CGROUP_ROOT, meminfo: Path = Path("/proc/meminfo"),
                           status: Path = Path("/proc/self/status")) -> int | None:
    limits = [x for x in (_mem_available(meminfo), _cgroup_left(cgroup_root), _address_space_left(status))
              if x is not None]
    return max(0, min(limits)) if limits else None


def _mem_available(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_left(root: Path) -> int | None:
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((root / "memory.current").read_text())
    except (OSError, ValueError):
        return None


def _address_space_left(status: Path) -> int | None:
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    mapped = 0
    try:
        for line in status.read_text(encoding="ascii").splitlines():
            if line.startswith("VmSize:"):
                mapped = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return soft - mapped


def peak_rss_bytes() -> int | None:
    """The process's resident-set high-water mark (ru_maxrss: KiB on Linux, bytes on macOS)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    try:
        size = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    return int(size) * (1 if sys.platform == "darwin" else 1024)


class _MallInfo2(ctypes.Structure):  # glibc >= 2.33, <malloc.h>: every field a size_t
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


_mallinfo2 = None  # the C function once found; False: this C library has none


def heap_in_use_bytes() -> int | None:
    """Bytes allocated through malloc and not freed, in every arena, the mmap-served large blocks
    included (`uordblks + hblkhd`); None where the C library has no mallinfo2 (musl, macOS, glibc
    before 2.33). Python's own small objects live in arenas that CPython maps itself and are not in
    it: a tensor's storage is. It takes each arena's lock while it walks that arena's free lists,
    tens of microseconds on a training process: read it a few times a second, not per op."""
    global _mallinfo2
    if _mallinfo2 is None:
        _mallinfo2 = False
        if sys.platform.startswith("linux"):
            try:
                function = ctypes.CDLL(None).mallinfo2
                function.restype, function.argtypes = _MallInfo2, []
                _mallinfo2 = function
            except (OSError, AttributeError):
                pass
    if _mallinfo2 is False:
        return None
    info = _mallinfo2()
    return int(info.uordblks) + int(info.hblkhd)
