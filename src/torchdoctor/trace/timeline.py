"""Interval arithmetic on one device's timeline: unions, coverage of a window, breakdowns.

A union is kept as parallel lists (`starts`, `ends`, sorted and disjoint) plus prefix sums
of the lengths, so the time it covers inside any window is two bisections away. Unions are
built by sorting on start and keeping a running maximum of ends: O(n log n), one pass.
Times are float µs throughout; nothing is rounded.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterable, Sequence

from torchdoctor.model.trace_summary import Breakdown


@dataclass
class Union:
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    openers: list[int] = field(default_factory=list)  # index (in the input) of the first interval of each
    _prefix: list[float] | None = None

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def prefix(self) -> list[float]:
        """prefix[k] = total length of the first k intervals."""
        if self._prefix is None:
            self._prefix = [0.0, *accumulate(e - s for s, e in zip(self.starts, self.ends))]
        return self._prefix

    def total(self) -> float:
        return self.prefix[-1]

    def covered(self, lo: float, hi: float) -> float:
        """Length of the union inside [lo, hi]."""
        if hi <= lo or not self.starts:
            return 0.0
        i = bisect_right(self.ends, lo)  # first interval ending after lo
        j = bisect_left(self.starts, hi)  # first interval starting at or after hi
        if i >= j:
            return 0.0
        prefix = self._prefix if self._prefix is not None else self.prefix
        inside = prefix[j] - prefix[i]
        inside -= max(0.0, lo - self.starts[i])  # trim the part before lo
        inside -= max(0.0, self.ends[j - 1] - hi)  # and after hi
        return max(0.0, inside)


def union(starts: Sequence[float], ends: Sequence[float], order: Iterable[int] | None = None) -> Union:
    """Merge intervals [starts[i], ends[i]] visited in `order` (ascending start; defaults to
    0..n-1, i.e. already sorted). Touching intervals merge: no idle time between them."""
    out = Union()
    s_out, e_out, o_out = out.starts, out.ends, out.openers
    cur_s = cur_e = None
    for i in (range(len(starts)) if order is None else order):
        s, e = starts[i], ends[i]
        if cur_e is not None and s <= cur_e:
            if e > cur_e:
                cur_e = e
            continue
        if cur_e is not None:
            s_out.append(cur_s)
            e_out.append(cur_e)
        cur_s, cur_e = s, e
        o_out.append(i)
    if cur_e is not None:
        s_out.append(cur_s)
        e_out.append(cur_e)
    return out


def merge(a: Union, b: Union) -> Union:
    """Union of two unions (linear in their interval counts; openers are dropped)."""
    starts = a.starts + b.starts
    ends = a.ends + b.ends
    order = sorted(range(len(starts)), key=starts.__getitem__)
    merged = union(starts, ends, order)
    merged.openers = []
    return merged


def gaps(u: Union, lo: float, hi: float) -> list[tuple[float, float, int]]:
    """Idle stretches of [lo, hi] not covered by `u`: (start, end, k) where k is the index of
    the union interval that ends the gap (len(u) when no GPU work follows inside the range)."""
    out: list[tuple[float, float, int]] = []
    k = bisect_right(u.ends, lo)
    cursor = lo
    n = len(u)
    starts, ends = u.starts, u.ends
    while k < n and starts[k] < hi:
        if starts[k] > cursor:
            out.append((cursor, starts[k], k))
        if ends[k] > cursor:
            cursor = ends[k]
        k += 1
    if cursor < hi:
        out.append((cursor, hi, k))
    return out


@dataclass
class DeviceUnions:
    """The unions a device's breakdown needs: compute, compute+comm, everything."""

    compute: Union
    compute_comm: Union
    busy: Union
    comm: Union

    def breakdown(self, lo: float, hi: float) -> Breakdown:
        window = max(0.0, hi - lo)
        compute = self.compute.covered(lo, hi)
        compute_comm = self.compute_comm.covered(lo, hi)
        busy = self.busy.covered(lo, hi)
        return Breakdown(window_us=window, compute_us=compute, comm_us=compute_comm - compute,
                         copy_us=busy - compute_comm, idle_us=window - busy)

    def comm_overlap(self) -> float | None:
        """Share of communication time during which a compute kernel also ran (HTA's
        communication/computation overlap)."""
        comm = self.comm.total()
        if comm <= 0:
            return None
        overlapped = comm + self.compute.total() - self.compute_comm.total()
        return max(0.0, min(1.0, overlapped / comm))
