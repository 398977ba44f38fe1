"""Why a device was idle: each gap in its busy timeline gets one cause, and a source.

A gap [g0, g1] ends when the next GPU activity A starts; A was launched by a runtime call R.
In order:

1. **data loading** — the part of the gap during which the host was inside
   `enumerate(DataLoader)#...__next__`.
2. **host sync** — the host was blocked in a call that waits for the GPU when the GPU ran
   dry (the call started before g0 and returned after it): `cudaStreamSynchronize`,
   `cudaDeviceSynchronize`, `cudaEventSynchronize`, synchronous `cudaMemcpy`, a
   `cudaMemcpyAsync` from/to pageable memory (the driver stages it synchronously), their
   HIP twins, or a `cuda_sync` record. The sync drained the queue, so the whole gap until the
   host queued new work is its cost.
3. **kernel launch / host CPU work** — R had not finished when the GPU went idle
   (R.end > g0): the GPU waited for the host. This includes R *starting* before g0 and ending
   after it, the back-to-back short-kernel case that a rule "host wait only if the launch
   starts after the previous kernel ends" misfiles as kernel-to-kernel delay. Gaps up to
   LAUNCH_GAP_MAX_US are launch overhead; longer ones mean the host was busy with other work.
4. **GPU-side wait** — A was queued before g0 and still started late: it waited on another
   stream, an event, or the device.
5. **unattributed** — no launch record for A.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from statistics import median

from torchdoctor.model.location import Location
from torchdoctor.trace.events import DATALOADER_PREFIX, RawEvent
from torchdoctor.trace.joins import Joins
from torchdoctor.trace.timeline import Union, gaps, union
from torchdoctor.trace.windows import Window

DATA, SYNC, LAUNCH, HOST, GPU_WAIT, OTHER = (
    "data loading", "host sync", "kernel launch", "host CPU work", "GPU-side wait", "unattributed")
CAUSES = (DATA, SYNC, LAUNCH, HOST, GPU_WAIT, OTHER)

# A gap this short between kernels is the host's per-op cost (PyTorch eager dispatch plus
# cudaLaunchKernel is ~5-20 µs per op); a longer one means the host did other work first.
LAUNCH_GAP_MAX_US = 50.0
# CPU and GPU timestamps come from different clocks that Kineto aligns to a few µs.
CLOCK_TOLERANCE_US = 5.0

# Calls that return only when the GPU has caught up. (Synchronous cudaMemset is not here:
# it is asynchronous to the host unless it targets host memory.)
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpy3D", "cuCtxSynchronize", "cuStreamSynchronize",
    "cuEventSynchronize", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemcpy",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy",
    "hipMemcpyWithStream", "hipMemcpyDtoH", "hipMemcpyHtoD",
})
ASYNC_COPY_CALLS = frozenset({"cudaMemcpyAsync", "cudaMemcpy2DAsync", "cuMemcpyAsync", "cuMemcpyDtoHAsync_v2",
                              "cuMemcpyHtoDAsync_v2", "hipMemcpyAsync", "hipMemcpyDtoHAsync", "hipMemcpyHtoDAsync"})
# Kineto's cuda_sync names for CUPTI synchronization records that block the host;
# "Stream Wait Event" is a GPU-side wait (cudaStreamWaitEvent) and does not.
HOST_WAIT_SYNCS = frozenset({"Event Sync", "Stream Sync", "Context Sync"})
_BLOCKING_CANDIDATES = SYNC_CALLS | ASYNC_COPY_CALLS

_TS, _NAME = attrgetter("ts"), attrgetter("name")


@dataclass
class Blocking:
    """A host call that waits for the GPU."""

    start: float
    end: float
    event: RawEvent  # the runtime call, or the cuda_sync record when no runtime call matches


# sync kinds, from the op chain around the blocking call
ITEM, DATA_DEPENDENT, D2H_COPY, PAGEABLE_COPY, EXPLICIT, OTHER_SYNC = (
    "item", "data-dependent", "device-to-host copy", "pageable copy", "explicit sync", "sync")
ITEM_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"})
COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to"})
# ops whose output size depends on device values: the host must read it back
DATA_DEPENDENT_OPS = frozenset({
    "aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique", "aten::_unique2",
    "aten::unique_consecutive", "aten::unique_dim", "aten::repeat_interleave", "aten::bincount",
    "aten::masked_scatter", "aten::argwhere", "aten::nonzero_numpy",
})


@dataclass
class IdleSite:
    """GPU idle time of one cause traced to one host op and user frame."""

    cause: str
    kind: str  # for host syncs: ITEM, DATA_DEPENDENT, ...; otherwise the cause
    op: str  # the outermost aten op (syncs), the launching op (launch/host), or the kernel waited for
    location: Location | None
    count: int = 0  # gaps
    idle_us: float = 0.0


@dataclass
class IdleResult:
    per_window: list[dict[str, float]]  # cause → µs, one dict per window
    sites: list[IdleSite] = field(default_factory=list)
    launch_gaps_us: list[float] = field(default_factory=list)
    launch_kernel_us: list[float] = field(default_factory=list)
    launch_call_us: list[float] = field(default_factory=list)

    def launch_stats(self) -> dict[str, float | int | None]:
        def med(xs: list[float]) -> float | None:
            return round(median(xs), 3) if xs else None

        return {"gaps": len(self.launch_gaps_us), "median_gap_us": med(self.launch_gaps_us),
                "median_kernel_us": med(self.launch_kernel_us), "median_launch_call_us": med(self.launch_call_us)}


def blocking_calls(joins: Joins) -> list[Blocking]:
    """Host calls that block until the GPU catches up, sorted by end."""
    out: list[Blocking] = []
    seen_corr: set[int] = set()
    runtime = joins.events.runtime
    for rt in compress(runtime, map(_BLOCKING_CANDIDATES.__contains__, map(_NAME, runtime))):
        if rt.name in ASYNC_COPY_CALLS:
            copy = joins.copy_by_corr.get(rt.args.correlation)
            if copy is None or "Pageable" not in copy.name:
                continue
        out.append(Blocking(rt.ts, rt.ts + rt.dur, rt))
        seen_corr.add(rt.args.correlation)
    for s in joins.events.syncs:  # CUPTI sync records without a runtime call in the trace
        if s.args.correlation in seen_corr or s.name not in HOST_WAIT_SYNCS:
            continue
        out.append(Blocking(s.ts, s.ts + s.dur, s))
    out.sort(key=lambda b: b.end)
    return out


def dataloader_union(annotations: list[RawEvent]) -> Union:
    dl = sorted((a for a in annotations if a.name.startswith(DATALOADER_PREFIX)), key=_TS)
    return union([a.ts for a in dl], [a.ts + a.dur for a in dl])


def classify_idle(busy: Union, device_events: list[RawEvent], windows: list[Window], joins: Joins,
                  blocking: list[Blocking], dataloader: Union, span: tuple[float, float] | None = None) -> IdleResult:
    """Attribute every idle stretch inside the windows to a cause (module docstring). `span`:
    where the idle stretches are looked for, when wider than the windows (a streamed trace's
    group of steps: a stretch that crosses into the next group is judged whole)."""
    result = IdleResult(per_window=[defaultdict(float) for _ in windows])
    if not windows:
        return result
    block_ends = [b.end for b in blocking]
    w_starts = [w.start for w in windows]
    w_ends = [w.end for w in windows]
    per_window = result.per_window
    openers = busy.openers
    n_busy, n_win = len(busy), len(windows)
    launch_of, covered = joins.runtime_by_corr.get, dataloader.covered
    pending: list[tuple[str, RawEvent, float, int]] = []  # (cause, host call, idle µs, gaps), resolved below
    gpu_wait: dict[str, list] = {}  # kernel waited for → [gaps, µs]
    w = 0
    lo, hi = span if span is not None else (w_starts[0], w_ends[-1])
    for g0, g1, k in gaps(busy, lo, hi):
        nxt = device_events[openers[k]] if k < n_busy else None
        launch = launch_of(nxt.args.correlation) if nxt is not None else None
        block = _blocking_at(blocking, block_ends, g0, g1) if blocking else None
        if block is not None:
            cause = SYNC
        elif nxt is None:
            cause = HOST  # no more GPU work in the trace: the host is elsewhere
        elif launch is None:
            cause = OTHER
        elif launch.ts + launch.dur > g0 - CLOCK_TOLERANCE_US:
            # the host's own time: the gap less what it spent in the DataLoader
            cause = LAUNCH if (g1 - g0) - covered(g0, g1) <= LAUNCH_GAP_MAX_US else HOST
        else:
            cause = GPU_WAIT
        # split the gap over the windows it spans; data loading first, the cause gets the rest
        while w < n_win and w_ends[w] <= g0:
            w += 1
        not_data = 0.0
        v = w
        while v < n_win and w_starts[v] < g1:
            a = g0 if g0 > w_starts[v] else w_starts[v]
            b = g1 if g1 < w_ends[v] else w_ends[v]
            if b > a:
                data = covered(a, b)
                bucket = per_window[v]
                if data:
                    bucket[DATA] += data
                bucket[cause] += (b - a) - data
                not_data += (b - a) - data
            v += 1
        if not_data <= 0:
            continue
        # a stretch that began before these windows was counted with the windows it began in
        # (a streamed trace's previous group): here it only adds its time
        counted = 1 if g0 >= w_starts[0] else 0
        if cause == SYNC:
            pending.append((SYNC, block.event, not_data, counted))
        elif cause == LAUNCH or (cause == HOST and launch is not None):
            pending.append((cause, launch, not_data, counted))
            if cause == LAUNCH and counted:
                result.launch_gaps_us.append(g1 - g0)
                result.launch_kernel_us.append(nxt.dur)
                result.launch_call_us.append(launch.dur)
        elif cause == GPU_WAIT:
            entry = gpu_wait.setdefault(nxt.name, [0, 0.0])
            entry[0] += counted
            entry[1] += not_data
    sites = _resolve_sites(pending, joins)
    sites.extend(IdleSite(GPU_WAIT, GPU_WAIT, name, None, n, us) for name, (n, us) in gpu_wait.items())
    result.sites = sorted(sites, key=lambda s: -s.idle_us)
    return result


def _blocking_at(blocking: list[Blocking], ends: list[float], g0: float, g1: float) -> Blocking | None:
    """A blocking call that was waiting when the GPU went idle at g0 and returned by g1."""
    i = bisect_left(ends, g0 - CLOCK_TOLERANCE_US)
    while i < len(blocking) and blocking[i].end <= g1 + CLOCK_TOLERANCE_US:
        if blocking[i].start <= g0 + CLOCK_TOLERANCE_US:
            return blocking[i]
        i += 1
    return None


def _resolve_sites(pending: list[tuple[str, RawEvent, float, int]], joins: Joins) -> list[IdleSite]:
    """Join the host calls behind sync and launch gaps to their ops and user frames, and sum
    the idle time per (cause, kind, op, frame)."""
    totals: dict[tuple, list] = {}  # (cause, kind, op, frame) → [location, gaps, µs]
    kinds: dict[tuple, tuple[str, str]] = {}  # (innermost op, call, frame) → sync (kind, op label)
    user_frame, op_of = joins.user_frame, joins.op_of
    for cause, call, idle, counted in pending:
        loc = user_frame(call)
        launcher = op_of(call)
        inner = launcher.name if launcher is not None else call.name
        frame = (loc.path, loc.line, loc.function) if loc is not None else None
        if cause == SYNC:
            copy = joins.copy_by_corr.get(call.args.correlation)
            if copy is None and call.name.endswith("Synchronize"):  # the copy it may wait for (sync_kind)
                copy = joins.copy_launched_before(call, float("-inf"))
            memo = (inner, call.name, copy.name if copy is not None else "", frame)
            if memo not in kinds:
                kinds[memo] = sync_kind(call, joins)
            kind, op = kinds[memo]
        else:
            kind, op = cause, inner
        key = (cause, kind, op, frame)
        entry = totals.get(key)
        if entry is None:
            entry = totals[key] = [loc, 0, 0.0]
        entry[1] += counted
        entry[2] += idle
    return [IdleSite(cause, kind, op, loc, n, us) for (cause, kind, op, _), (loc, n, us) in totals.items()]


def sync_kind(call: RawEvent, joins: Joins) -> tuple[str, str]:
    """What a blocking call was, from the ops around it: (kind, outermost op name)."""
    if call.cat == "cuda_sync":
        return OTHER_SYNC, call.name
    chain = [op for op in joins.op_chain(call) if op.cat != "user_annotation"]
    names = {op.name for op in chain}
    outer = chain[0].name if chain else call.name
    if names & ITEM_OPS:
        return ITEM, outer
    if names & DATA_DEPENDENT_OPS:
        return DATA_DEPENDENT, outer
    copy = joins.copy_by_corr.get(call.args.correlation)
    if copy is not None and copy.name.startswith("Memcpy"):
        if "DtoH" in copy.name:
            return D2H_COPY, outer
        if "Pageable" in copy.name:
            return PAGEABLE_COPY, outer
    if not chain and call.name.endswith("Synchronize"):
        return EXPLICIT, call.name
    if chain and call.name.endswith("Synchronize") and names & COPY_OPS:
        # a copy from pageable memory is a cudaMemcpyAsync then this synchronize, inside one
        # aten::copy_ (seen on the H200): the sync belongs to the copy, not to a user's sync
        launched = joins.copy_launched_before(call, chain[0].ts)
        if launched is not None and "DtoH" in launched.name:
            return D2H_COPY, outer
        if launched is not None and "Pageable" in launched.name:
            return PAGEABLE_COPY, outer
    return OTHER_SYNC, outer
