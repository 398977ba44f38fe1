"""The kernel's out-of-memory killer, as this process's memory cgroup counts it: a process that
ends by SIGKILL with no Python exception was killed from outside, and this count tells whether
the killer was the host or cgroup running out of memory (not PyTorch's allocator)."""

from __future__ import annotations

from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def oom_kills(root: Path = _CGROUP_ROOT) -> int | None:
    """The OOM kills counted so far in this process's memory cgroup (v2 `memory.events`, v1
    `memory.oom_control`); None where neither can be read (not Linux, no permission)."""
    for events in (root / "memory.events", root / "memory" / "memory.oom_control"):
        try:
            text = events.read_text(encoding="ascii")
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def killed_words(signal_number: int, kills_during: int | None) -> str:
    """Why a process ended by `signal_number` with no Python exception, as far as we can tell."""
    if signal_number != 9:
        return f"killed by signal {signal_number}"
    if kills_during:
        return (f"killed by SIGKILL with no Python exception: the kernel's out-of-memory killer ended {kills_during} "
                "process(es) of this memory cgroup during the run: the host or container ran out of RAM, not "
                "PyTorch's allocator")
    known = " (this memory cgroup counted no OOM kill, so perhaps the host's, or another sender)" \
        if kills_during == 0 else ""
    return ("killed by SIGKILL with no Python exception: most often the kernel's out-of-memory killer (the host or "
            f"container out of RAM, not PyTorch's allocator){known}; `dmesg | grep -i oom` says which")
