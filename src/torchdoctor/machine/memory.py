"""How much more memory this process may take: the least of what the machine has available,
what its cgroup still allows (v2 `memory.max` less `memory.current`) and what its address-space
limit (`ulimit -v`, RLIMIT_AS) leaves above what it maps already. None where nothing says.

The one answer for the trace reader's memory budget (a trace larger than it is streamed)."""

from __future__ import annotations

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
