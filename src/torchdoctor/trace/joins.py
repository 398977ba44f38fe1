"""Joins between a trace's layers: GPU activity ↔ launch ↔ aten op ↔ the user's Python frame.

- A kernel/memcpy and the runtime call that launched it share `args.correlation`.
- The runtime call (and the kernel) carry `args["External id"]` of the innermost aten op or
  annotation that was running when it launched.
- With `with_stack=True`, `python_function` events nest on each thread; the innermost one
  enclosing a host time whose file is the user's (not torch's, not the standard library's)
  is the user frame behind it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from itertools import repeat
from dataclasses import dataclass, field
from functools import lru_cache
from operator import add, attrgetter

from torchdoctor.model.location import Location
from torchdoctor.trace.events import KERNEL_CATS, RawEvent, TraceEvents, is_user_frame, parse_frame

_TS, _DUR, _NAME = attrgetter("ts"), attrgetter("dur"), attrgetter("name")
_ARGS = attrgetter("args")
_PY_ID, _PY_PARENT = attrgetter("python_id"), attrgetter("python_parent")
OP_LOOKBACK = 16  # ops looked back through for the ones enclosing a host call
_CORR = attrgetter("correlation")
_EXT = attrgetter("external_id")


@lru_cache(maxsize=65536)
def frame_location(name: str) -> Location | None:
    """The user Location a python_function name stands for, or None for library frames."""
    parsed = parse_frame(name)
    if parsed is None or not is_user_frame(parsed[0]):
        return None
    path, line, func = parsed
    return Location(path=path, line=line, function=func)


class Nesting:
    """Intervals of one thread that nest (Python frames, aten ops), sorted by start, with
    each one's parent: the innermost interval around a time is one bisection and a short
    walk up the parents away."""

    def __init__(self, events: list[RawEvent]):
        events = sorted(events, key=_TS)
        self.events = events
        self.starts = list(map(_TS, events))
        self.ends = [s + d for s, d in zip(self.starts, map(_DUR, events))]
        self.parent = [-1] * len(events)
        starts, ends, parent, stack = self.starts, self.ends, self.parent, []
        for i, s in enumerate(starts):
            e = ends[i]
            moved: list[int] = []  # open intervals that start with this one but end earlier
            while stack:
                top = stack[-1]
                if ends[top] < s or (ends[top] == s and e > s):
                    stack.pop()  # finished before this one started
                elif e > ends[top] and starts[top] == s:
                    moved.append(stack.pop())  # same start, shorter: a child of this one
                elif e > ends[top]:
                    stack.pop()  # overlaps without nesting (clock jitter): treat as finished
                else:
                    break
            parent[i] = stack[-1] if stack else -1
            stack.append(i)
            if moved:
                # intervals starting in the same microsecond arrive in any order: re-nest
                # the shorter ones under this one
                moved.reverse()
                parent[moved[0]] = i
                stack.extend(moved)

    def innermost(self, t: float) -> int:
        """Index of the innermost interval containing t, or -1."""
        i = bisect_right(self.starts, t) - 1
        ends, parent = self.ends, self.parent
        while i >= 0 and ends[i] < t:
            i = parent[i]
        return i

    def chain(self, i: int) -> list[RawEvent]:
        """The interval and its ancestors, outermost first."""
        out = []
        while i >= 0:
            out.append(self.events[i])
            i = self.parent[i]
        out.reverse()
        return out


class FrameIndex:
    """Per thread, Python frames sorted by start, to find the user frame around a time.

    The innermost frame around t descends from the last frame starting before t, so the
    answer is a bisection and a walk up the parents. Kineto gives each frame its parent
    (`Python id` / `Python parent id`), so no pass over all frames is needed; traces without
    the ids get the parents from a nesting sweep. Each frame's nearest user frame is
    memoised as it is found.
    """

    def __init__(self, python: list[RawEvent]):
        by_tid: dict[int | str, list[RawEvent]] = defaultdict(list)
        for f in python:
            by_tid[f.tid].append(f)
        self.threads = {tid: _ThreadFrames(frames) for tid, frames in by_tid.items()}

    def user_frame(self, tid: int | str, t: float) -> Location | None:
        thread = self.threads.get(tid)
        return thread.user_frame(t) if thread is not None else None


class _ThreadFrames:
    def __init__(self, frames: list[RawEvent]):
        frames.sort(key=_TS)
        self.frames = frames
        self.starts = list(map(_TS, frames))
        self.ends = list(map(add, self.starts, map(_DUR, frames)))
        args = list(map(_ARGS, frames))
        ids = list(map(_PY_ID, args))
        if -1 in ids:  # no Python ids: nest by time
            self.parent = Nesting(frames).parent
        else:
            index = dict(zip(ids, range(len(ids))))
            self.parent = list(map(index.get, map(_PY_PARENT, args), repeat(-1)))
        self._user: dict[int, Location | None] = {}

    def user_frame(self, t: float) -> Location | None:
        i = bisect_right(self.starts, t) - 1
        ends, parent = self.ends, self.parent
        while i >= 0 and ends[i] < t:
            i = parent[i]
        return self._nearest_user(i)

    def _nearest_user(self, i: int) -> Location | None:
        path = []
        memo, parent, frames = self._user, self.parent, self.frames
        found = None
        while i >= 0:
            if i in memo:
                found = memo[i]
                break
            path.append(i)
            loc = frame_location(frames[i].name)
            if loc is not None:
                found = loc
                break
            i = parent[i]
        for k in path:
            memo[k] = found
        return found


@dataclass
class Joins:
    events: TraceEvents
    runtime_by_corr: dict[int, RawEvent] = field(default_factory=dict)
    copy_by_corr: dict[int, RawEvent] = field(default_factory=dict)  # memcpy/memset by correlation
    _op_by_ext: dict[int, RawEvent] | None = None
    _frames: FrameIndex | None = None
    _ops: dict[int | str, tuple[list[float], list[RawEvent]]] | None = None
    _runtime: dict[int | str, tuple[list[float], list[RawEvent]]] | None = None

    @classmethod
    def build(cls, events: TraceEvents) -> "Joins":
        j = cls(events)
        rt = events.runtime
        j.runtime_by_corr = dict(zip(map(_CORR, map(_ARGS, rt)), rt))
        j.runtime_by_corr.pop(-1, None)
        copies = [e for e in events.gpu if e.cat not in KERNEL_CATS]
        j.copy_by_corr = dict(zip(map(_CORR, map(_ARGS, copies)), copies))
        j.copy_by_corr.pop(-1, None)
        return j

    @property
    def op_by_ext(self) -> dict[int, RawEvent]:
        if self._op_by_ext is None:
            # annotations first: an aten op with the same id (never in Kineto) would win
            self._op_by_ext = {}
            for group in (self.events.annotations, self.events.ops):
                self._op_by_ext.update(zip(map(_EXT, map(_ARGS, group)), group))
            self._op_by_ext.pop(-1, None)
        return self._op_by_ext

    def launch_of(self, gpu_event: RawEvent) -> RawEvent | None:
        return self.runtime_by_corr.get(gpu_event.args.correlation)

    def op_of(self, event: RawEvent) -> RawEvent | None:
        """The innermost aten op (or annotation) a runtime call or GPU event came from."""
        ext = event.args.external_id
        return self.op_by_ext.get(ext) if ext >= 0 else None

    def user_frame(self, host_event: RawEvent | None) -> Location | None:
        """The innermost user Python frame running when a host event started."""
        if host_event is None or not self.events.python:
            return None
        if self._frames is None:
            self._frames = FrameIndex(self.events.python)
        return self._frames.user_frame(host_event.tid, host_event.ts)

    def op_chain(self, host_event: RawEvent) -> list[RawEvent]:
        """Ops enclosing a host event on its thread, outermost first (e.g. aten::item →
        aten::_local_scalar_dense for a sync). aten ops nest shallowly and close together,
        so a bounded look back over the ops that started before it finds them."""
        if self._ops is None:
            self._ops = by_thread(self.events.ops)
        starts, ops = self._ops.get(host_event.tid, ((), ()))
        t = host_event.ts
        i = bisect_right(starts, t)
        chain = [op for op in ops[max(0, i - OP_LOOKBACK): i] if op.ts + op.dur >= t]
        return chain

    def copy_launched_before(self, host_event: RawEvent, since: float) -> RawEvent | None:
        """The memcpy of the last copy call on the host event's thread that started in
        [since, host_event.ts): the copy a `cudaStreamSynchronize` inside `aten::copy_` waits for."""
        if self._runtime is None:
            self._runtime = by_thread(rt for rt in self.events.runtime if "memcpy" in rt.name.lower())
        starts, calls = self._runtime.get(host_event.tid, ((), ()))
        i = bisect_right(starts, host_event.ts) - 1
        if i < 0 or calls[i].ts < since or calls[i] is host_event:
            return None
        return self.copy_by_corr.get(calls[i].args.correlation)


def by_thread(events) -> dict[int | str, tuple[list[float], list[RawEvent]]]:
    """Per thread, its events sorted by start, with the starts (for bisection)."""
    grouped: dict[int | str, list[RawEvent]] = defaultdict(list)
    for event in events:
        grouped[event.tid].append(event)
    out = {}
    for tid, group in grouped.items():
        group.sort(key=_TS)
        out[tid] = (list(map(_TS, group)), group)
    return out
