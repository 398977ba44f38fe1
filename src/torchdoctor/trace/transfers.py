"""Copies between host and device: bytes, time and bandwidth, traced to the op and line.

CUPTI names every copy `Memcpy <kind> (<source memory> -> <destination memory>)`, e.g.
`Memcpy HtoD (Pageable -> Device)`. A pageable source means the driver first copies the
data into a pinned staging buffer and the host waits for it: the `pin_memory=True` case.
"""

from __future__ import annotations

import re

from torchdoctor.trace.events import MEMCPY_CATS, MEMSET_CATS, RawEvent
from torchdoctor.trace.joins import Joins
from torchdoctor.model.trace_summary import TransferSummary

_MEMCPY = re.compile(r"Memcpy (\w+) \((\w+) -> (\w+)\)")


def copy_kind(name: str) -> tuple[str, str]:
    """("HtoD", "Pageable -> Device") from a CUPTI copy name; memsets are ("Memset", ...)."""
    m = _MEMCPY.match(name)
    if m:
        return m.group(1), f"{m.group(2)} -> {m.group(3)}"
    if name.startswith("Memset"):
        return "Memset", name[len("Memset"):].strip(" ()") or "Device"
    return "copy", name


def transfers(device_events: list[RawEvent], joins: Joins) -> list[TransferSummary]:
    copies = [e for e in device_events if e.cat in MEMCPY_CATS or e.cat in MEMSET_CATS]
    if not copies:
        return []
    groups: dict[tuple, TransferSummary] = {}
    labels: dict[tuple, str] = {}  # (innermost op, frame) → outermost op: one chain walk each
    for copy in copies:
        rt = joins.launch_of(copy)
        loc = joins.user_frame(rt)
        direction, memory = copy_kind(copy.name)
        op = ""
        if rt is not None:
            inner = joins.op_of(rt)
            memo = (inner.name if inner is not None else rt.name, loc and (loc.path, loc.line))
            if memo not in labels:
                chain = joins.op_chain(rt)
                labels[memo] = chain[0].name if chain else memo[0]
            op = labels[memo]
        key = (direction, memory, op, loc.path if loc else None, loc.line if loc else None)
        t = groups.get(key)
        if t is None:
            t = groups[key] = TransferSummary(direction=direction, memory=memory, op=op, location=loc,
                                              count=0, bytes=0, busy_us=0.0)
        t.count += 1
        t.bytes += copy.args.bytes
        t.busy_us += copy.dur
    return sorted(groups.values(), key=lambda t: -t.busy_us)
