"""One trace file per rank in, one TraceSummary out: load, cut into steps, analyse each device.

Only each file's summary is kept. Several rank files are analysed in parallel processes, the
memory budget shared between them; a file whose events would not fit its budget is streamed
(trace/streamed.py): its memory is then bounded whatever its size.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
import gc
from collections import defaultdict
from contextlib import contextmanager
from itertools import compress
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

from torchdoctor.errors import InputError
from torchdoctor.trace.events import DATALOADER_PREFIX, TraceEvents
from torchdoctor.trace.idle import (
    CAUSES, DATA_DEPENDENT_OPS, ITEM_OPS, blocking_calls, classify_idle, dataloader_union,
)
from torchdoctor.trace.joins import Joins
from torchdoctor.trace.kernels import (
    COMM, COMPUTE, COPY, CollectiveCall, collective_calls, collective_stats, kernel_kind, kernel_totals,
)
from torchdoctor.machine.cpus import usable_cpus
from torchdoctor.trace.loader import LoadedTrace, TraceTooLarge, default_memory_budget, fits_in_memory, load_trace
from torchdoctor.model.trace_summary import (
    Breakdown, DeviceSummary, HostSummary, IdleSiteSummary, LateRank, RankSummary, StepSummary, TraceSummary,
)
from torchdoctor.trace.timeline import DeviceUnions, Union, merge, union
from torchdoctor.trace.transfers import transfers
from torchdoctor.trace.windows import Window, Windows, step_windows

_TS, _DUR = attrgetter("ts"), attrgetter("dur")
# A collective where no rank waited longer than this for the last one: they arrived together
# (kernel start jitter is a few µs).
LATE_MIN_WAIT_US = 10.0
# ops that make the host wait for the device; counted on CPU-only traces as hazards
HOST_SYNC_OPS = ITEM_OPS | DATA_DEPENDENT_OPS


@dataclass
class _RankResult:
    summary: RankSummary
    calls: list[tuple[str, CollectiveCall]] = field(default_factory=list)  # (step label, call)
    declared_rank: int | None = None
    device_calls: dict[int, list[CollectiveCall]] = field(default_factory=dict)  # per device: a streamed merge


def analyze_trace_files(paths: list[Path], *, max_memory_bytes: int | None = None,
                        jobs: int | None = None) -> TraceSummary:
    """Analyse one Kineto trace per rank (one file is fine). Several files are analysed in
    parallel processes (`jobs`, default: one per usable CPU), the memory budget shared between
    them; a file larger than its budget is streamed (trace/streamed.py). Raises InputError for
    unreadable files and for rank sets that cannot belong to one run."""
    if not paths:
        raise InputError("no trace file given; usage: torchdoctor trace TRACE.json[.gz] [MORE_RANKS...]")
    budget = max_memory_bytes if max_memory_bytes is not None else default_memory_budget()
    workers = min(len(paths), jobs if jobs is not None else usable_cpus() or 1)
    if workers > 1:
        results = _in_parallel([Path(p) for p in paths], budget // workers, workers)
    else:
        results = [analyze_path(Path(p), budget) for p in paths]
    summary = TraceSummary(ranks=[r.summary for r in results])
    _assign_ranks(results, summary)
    if len(results) > 1:
        summary.late_ranks = _late_ranks(results)
    return summary


@contextmanager
def _collector_paused():
    """The cyclic garbage collector off while millions of acyclic events live: its passes
    would walk the event lists again and again for nothing (~5 % of the time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def analyze_path(path: Path, budget: int) -> _RankResult:
    """One rank's file: decoded whole when its events fit the budget, else streamed."""
    try:
        fits = fits_in_memory(path, budget)
    except OSError:  # missing, unreadable: load_trace says so in one line
        fits = True
    if fits:
        try:
            with _collector_paused():
                return _analyze_file(load_trace(path, max_memory_bytes=budget))
        except TraceTooLarge:  # more events than its size suggested: stream it after all
            pass
    from torchdoctor.trace.streamed import analyze_streamed  # a module of this floor, loaded when needed

    return analyze_streamed(path, budget)


def _in_parallel(paths: list[Path], budget_each: int, workers: int) -> list[_RankResult]:
    """One process per file at a time, `workers` at once; results in the order given. A
    failure in one (an InputError) is raised as it would be in this process."""
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    # spawn: the parent may hold threads (a live progress line) that fork would copy half-way
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(analyze_path, paths, [budget_each] * len(paths)))


def _analyze_file(loaded: LoadedTrace) -> _RankResult:
    return analyze_events(loaded, step_windows(loaded.events))


def analyze_events(loaded: LoadedTrace, wins: Windows, t0: float | None = None,
                   own: tuple[float, float] | None = None, span: tuple[float, float] | None = None) -> _RankResult:
    """The trace's analysis over the step windows `wins` (all of the trace's, or a group of
    them when it is streamed: `t0` is then the first window's start of the whole trace, and
    only GPU events starting in `own` count in the totals; the others are context, for the
    idle time at the group's edges, judged over `span`)."""
    events = loaded.events
    dist = loaded.distributed
    declared = _as_int(dist.rank) if dist is not None else None
    world = _as_int(dist.world_size) if dist is not None else None
    rank = RankSummary(path=str(loaded.path), rank=declared if declared is not None else 0, world_size=world,
                       events=events.events, window_kind=wins.kind, steps=len(wins.windows),
                       cpu_only=not events.gpu, has_stacks=bool(events.python), notes=list(wins.notes))
    joins = Joins.build(events)
    if t0 is None:
        t0 = wins.windows[0].start if wins.windows else 0.0  # step start times are shown from here
    rank.host = _host_summary(events, joins, wins.windows)
    result = _RankResult(rank, declared_rank=declared)
    if not events.gpu:
        rank.notes.insert(0, "CPU-only trace: no GPU activity was recorded, so the GPU breakdown, idle causes, "
                             "copies and kernels are not available; profile with ProfilerActivity.CUDA to get them")
    else:
        props = {p.id: p for p in loaded.device_properties}
        if not loaded.device_properties:
            rank.notes.append("no deviceProperties in the trace: the GPU model and compute capability are unknown, "
                              "so fp32 matmuls are not judged against tensor cores (TD402)")
        by_device: dict[int, list] = defaultdict(list)
        for e in events.gpu:
            by_device[max(e.args.device, 0)].append(e)  # no args.device (very old traces): device 0
        blocking = blocking_calls(joins)
        dataloader = dataloader_union(events.annotations)
        for device, device_events in sorted(by_device.items()):
            dev, calls = _analyze_device(device, device_events, props.get(device), wins.windows, joins, blocking,
                                         dataloader, t0, own, span)
            rank.devices.append(dev)
            result.calls.extend(calls)
            result.device_calls[device] = [c for _, c in calls]
    if not rank.has_stacks:
        rank.notes.append("no python_function events (recorded without with_stack=True): causes are traced to "
                          "aten ops, not to source lines")
    if events.skipped_no_time:
        rank.notes.append(f"{events.skipped_no_time} events without a timestamp were skipped")
    if events.skipped_bad_time:
        rank.notes.append(f"{events.skipped_bad_time} events with a negative, infinite or NaN time or duration "
                          "were dropped (a damaged trace?)")
    return result


def _analyze_device(device: int, evs: list, props, windows: list[Window], joins: Joins, blocking, dataloader: Union,
                    t0: float, own: tuple[float, float] | None = None, span: tuple[float, float] | None = None
                    ) -> tuple[DeviceSummary, list[tuple[str, CollectiveCall]]]:
    evs.sort(key=_TS)
    starts = list(map(_TS, evs))
    ends = [s + d for s, d in zip(starts, map(_DUR, evs))]
    kinds = [kernel_kind(e.cat, e.name) for e in evs]
    busy = union(starts, ends)
    compute = union(starts, ends, [i for i, k in enumerate(kinds) if k == COMPUTE])
    comm = union(starts, ends, [i for i, k in enumerate(kinds) if k == COMM])
    unions = DeviceUnions(compute=compute, compute_comm=merge(compute, comm) if len(comm) else compute,
                          busy=busy, comm=comm)
    cap = [props.computeMajor, props.computeMinor] if props is not None and props.computeMajor is not None else None
    dev = DeviceSummary(device=device, name=props.name if props is not None else None, compute_capability=cap,
                        total=Breakdown(), busy_us=busy.total() if own is None else busy.covered(*own),
                        comm_total_us=comm.total() if own is None else comm.covered(*own),
                        comm_overlap=unions.comm_overlap())
    owned = evs if own is None else [e for e in evs if own[0] <= e.ts < own[1]]
    idle = classify_idle(busy, evs, windows, joins, blocking, dataloader, span)
    per_window_kernels = _kernels_per_window(starts, evs, kinds, windows)
    for w, causes, (count, med) in zip(windows, idle.per_window, per_window_kernels):
        b = unions.breakdown(w.start, w.end)
        b.idle_by_cause_us = {c: causes.get(c, 0.0) for c in CAUSES}
        dev.steps.append(StepSummary(label=w.label, start_us=w.start - t0, breakdown=b,
                                     dataloader_us=dataloader.covered(w.start, w.end), kernels=count,
                                     median_kernel_us=med))
        add_breakdown(dev.total, b)
    dev.idle_sites = [IdleSiteSummary(cause=s.cause, kind=s.kind, op=s.op, location=s.location, count=s.count,
                                      idle_us=s.idle_us) for s in idle.sites]
    dev.launch = idle.launch_stats()
    dev.transfers = transfers(owned, joins)
    totals = kernel_totals(owned)
    dev.top_kernels, dev.kernels = totals.top, totals.kernels
    dev.matmul_fp32_us, dev.matmul_lowp_us = totals.matmul_us["fp32"], totals.matmul_us["low"]
    dev.matmul_unknown_us = totals.matmul_us["unknown"]
    calls = collective_calls(owned)
    dev.collectives = collective_stats(calls)
    return dev, [(_window_of_launch(c, joins, windows), c) for c in calls]


def add_breakdown(total: Breakdown, b: Breakdown) -> None:
    """Adds one window's (or one group of steps') breakdown to a running total."""
    total.window_us += b.window_us
    total.compute_us += b.compute_us
    total.comm_us += b.comm_us
    total.copy_us += b.copy_us
    total.idle_us += b.idle_us
    for c, v in b.idle_by_cause_us.items():
        total.idle_by_cause_us[c] = total.idle_by_cause_us.get(c, 0.0) + v


def _kernels_per_window(starts: list[float], evs: list, kinds: list[str], windows: list[Window]):
    """(kernel count, median kernel µs) for the kernels starting in each window."""
    durs_all = list(map(_DUR, evs))
    kernel = [k != COPY for k in kinds]
    out = []
    for w in windows:
        i, j = bisect_left(starts, w.start), bisect_left(starts, w.end)
        durs = sorted(compress(durs_all[i:j], kernel[i:j]))
        n = len(durs)
        out.append((n, (durs[n // 2] + durs[(n - 1) // 2]) / 2 if n else None))
    return out


def _window_of_launch(call: CollectiveCall, joins: Joins, windows: list[Window]) -> str:
    """The step a collective belongs to: the window its launch happened in (the kernel
    itself may start later, in the next window, when the GPU lags behind the host)."""
    launch = joins.runtime_by_corr.get(call.correlation)
    t = launch.ts if launch is not None else call.start
    i = bisect_right([w.start for w in windows], t) - 1
    return windows[i].label if 0 <= i < len(windows) and t < windows[i].end else ""


def _host_summary(events: TraceEvents, joins: Joins, windows: list[Window]) -> HostSummary:
    host = HostSummary(steps=[w.label for w in windows], step_us=[w.end - w.start for w in windows])
    dl = dataloader_union(events.annotations)
    host.dataloader_us = [dl.covered(w.start, w.end) for w in windows]
    if not windows:
        return host
    lo, hi = windows[0].start, windows[-1].end
    first: dict[str, object] = {}
    outer_end: dict = {}  # tid → end of the last counted sync op: its inner ops are not counted again
    for op in sorted((o for o in events.ops if o.name in HOST_SYNC_OPS and lo <= o.ts < hi), key=_TS):
        if op.ts < outer_end.get(op.tid, float("-inf")):
            continue  # aten::_local_scalar_dense inside aten::item
        outer_end[op.tid] = op.ts + op.dur
        host.sync_ops[op.name] = host.sync_ops.get(op.name, 0) + 1
        first.setdefault(op.name, op)
    dl_first = min((a for a in events.annotations if a.name.startswith(DATALOADER_PREFIX)), key=_TS, default=None)
    for name, op in first.items():
        loc = joins.user_frame(op)
        if loc is not None:
            host.sync_locations[name] = loc
    host.dataloader_location = joins.user_frame(dl_first)
    return host


def _as_int(value) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


# --- several ranks ---------------------------------------------------------------------------

def _assign_ranks(results: list[_RankResult], summary: TraceSummary) -> None:
    declared = [r.declared_rank for r in results]
    paths = [r.summary.path for r in results]
    if len(results) > 1 and any(d is None for d in declared) and any(d is not None for d in declared):
        missing = paths[declared.index(None)]
        raise InputError(f"{missing} has no rank (no distributedInfo) while other files do: pass the traces of "
                         f"one distributed run, one file per rank")
    if all(d is None for d in declared):
        for i, r in enumerate(results):
            r.summary.rank = i
        if len(results) > 1:
            summary.notes.append("no distributedInfo in the traces: ranks are numbered in the order the files were given")
        return
    seen: dict[int, str] = {}
    for d, p in zip(declared, paths):
        if d in seen:
            raise InputError(f"{seen[d]} and {p} both say they are rank {d}: pass one trace per rank")
        seen[d] = p
    worlds = {r.summary.world_size for r in results if r.summary.world_size is not None}
    if len(worlds) > 1:
        raise InputError(f"the traces disagree on the world size ({', '.join(map(str, sorted(worlds)))}): "
                         f"pass the traces of one distributed run")
    world = worlds.pop() if worlds else None
    if world is not None and any(d >= world for d in declared):
        raise InputError(f"a trace says rank {max(declared)} but the world size is {world}: "
                         f"pass the traces of one distributed run")
    if world is not None and len(results) < world:
        summary.notes.append(f"{len(results)} of {world} ranks given; the late-rank check only compares those")
    summary.ranks.sort(key=lambda r: r.rank)


def _late_ranks(results: list[_RankResult]) -> list[LateRank]:
    """Match each collective across ranks (same step, same process group, same order) and
    name the rank that arrived last: its kernel is the shortest, since every rank's kernel
    ends when the last has joined. Clock offsets between hosts do not matter."""
    keyed: dict[tuple[str, str], dict[int, dict[str, list[CollectiveCall]]]] = defaultdict(lambda: defaultdict(dict))
    for r in results:
        for step, call in r.calls:
            keyed[(call.collective, call.process_group)][r.summary.rank].setdefault(step, []).append(call)
    out = []
    for (name, pg), per_rank in sorted(keyed.items()):
        if len(per_rank) < 2:
            continue
        late = LateRank(collective=name, process_group=pg, calls=0)
        steps = set.intersection(*(set(s) for s in per_rank.values()))
        for step in sorted(steps):
            lists = {rank: calls[step] for rank, calls in per_rank.items()}
            for i in range(min(len(c) for c in lists.values())):
                durs = {rank: calls[i].dur for rank, calls in lists.items()}
                last = min(durs, key=durs.get)
                waits = [d - durs[last] for rank, d in durs.items() if rank != last]
                late.calls += 1
                if max(waits) < LATE_MIN_WAIT_US:
                    continue  # the ranks arrived together
                key = str(last)
                late.late_counts[key] = late.late_counts.get(key, 0) + 1
                late.wait_caused_us[key] = late.wait_caused_us.get(key, 0.0) + sum(waits) / len(waits)
        if late.calls:
            out.append(late)
    return out
