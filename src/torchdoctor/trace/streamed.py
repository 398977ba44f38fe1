"""A trace larger than the memory it may use, analysed in bounded memory.

Three passes over the file, each holding one decoded chunk (~8 MiB of JSON) at a time:

1. scan: the step annotations (`ProfilerStep#N`, `Optimizer.step#...`) and the trace's time
   span give the step windows (trace/windows.py, as for a trace in memory) and the event count;
2. spill: every event is written (msgpack, to a temporary folder) to each group of consecutive
   windows it overlaps, widened by one window on each side (the launch of a kernel that runs in
   the next group, the Python frame around a whole loop, the kernel running when a group
   begins); a GPU event counts in the totals of the group its start falls in only;
3. analyse: each group is read back alone and analysed over its own windows like a trace in
   memory (analyze.analyze_events), and the groups' summaries are merged.

Groups hold at most a share of the budget's events, so peak memory depends on the budget and
the longest step, not on the file. What merges exactly: per-step breakdowns, totals, busy and
matmul time, idle sites, transfers, host sync counts, collectives (recomputed from every call).
What merges approximately, and is said in the rank's notes: the top kernels (each group keeps
its own top list; a kernel's median is the count-weighted mean of its groups' medians) and the
launch-gap medians.
"""

from __future__ import annotations

import tempfile
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Union

import msgspec

from torchdoctor.errors import InputError
from torchdoctor.model.trace_summary import (Breakdown, DeviceSummary, HostSummary, IdleSiteSummary, KernelStat,
                                             RankSummary, TransferSummary)
from torchdoctor.trace.analyze import _RankResult, add_breakdown, analyze_events
from torchdoctor.trace.events import (KEPT_TYPES, OPTIMIZER_STEP_PREFIX, STEP_RE, Annotation, CpuOp, Kernel,
                                      TraceEvents, group_events)
from torchdoctor.trace.kernels import collective_stats
from torchdoctor.trace.loader import MEMORY_PER_EVENT, LoadedTrace, stream_trace
from torchdoctor.trace.windows import Window, Windows, step_windows

GROUP_SHARE = 0.4  # a group's events may take this share of the budget; the analysis's lists the rest
_GROUPS = ("gpu", "runtime", "ops", "annotations", "python", "syncs")
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(list[Union[KEPT_TYPES]])  # type: ignore[valid-type]


@dataclass
class _Scan:
    """Pass 1: what the step windows are cut from, and nothing else."""

    steps: list = field(default_factory=list)  # step and optimizer annotations
    first_host: float | None = None
    gpu_start: float | None = None
    gpu_end: float | None = None
    host_end: float | None = None
    has_gpu: bool = False
    has_python: bool = False

    def add(self, chunk: TraceEvents) -> None:
        self.steps += [a for a in chunk.annotations
                       if STEP_RE.match(a.name) or a.name.startswith(OPTIMIZER_STEP_PREFIX)]
        host = [e for g in (chunk.ops, chunk.annotations, chunk.runtime) for e in g]
        if host:
            first, last = min(e.ts for e in host), max(e.ts + e.dur for e in host)
            self.first_host = first if self.first_host is None else min(self.first_host, first)
            self.host_end = last if self.host_end is None else max(self.host_end, last)
        if chunk.gpu:
            self.has_gpu = True
            first, last = min(e.ts for e in chunk.gpu), max(e.ts + e.dur for e in chunk.gpu)
            self.gpu_start = first if self.gpu_start is None else min(self.gpu_start, first)
            self.gpu_end = last if self.gpu_end is None else max(self.gpu_end, last)
        self.has_python = self.has_python or bool(chunk.python)

    def windows(self) -> Windows:
        """The windows step_windows would cut from the whole trace: it reads only the step
        annotations, the first host time and the GPU work's span, which stand in here."""
        stand_in = TraceEvents(annotations=list(self.steps))
        if self.first_host is not None:
            stand_in.ops = [CpuOp(name="", ts=self.first_host, dur=(self.host_end or self.first_host) - self.first_host)]
        if self.gpu_start is not None:
            stand_in.gpu = [Kernel(name="", ts=self.gpu_start, dur=self.gpu_end - self.gpu_start)]
        return step_windows(stand_in)


class _Spill:
    """Pass 2: each event to the file of its group(s)."""

    def __init__(self, folder: Path, groups: list[list[Window]]) -> None:
        self.starts = [g[0].start for g in groups]
        self.ends = [g[-1].end for g in groups]
        # host events are copied into the neighbouring group when they lie within a window of it
        lengths = [w.end - w.start for g in groups for w in g]
        self.margin = max(lengths) if lengths else 0.0
        self.files = [open(folder / f"group-{i}.msgpack", "wb") for i in range(len(groups))]  # noqa: SIM115
        self.counts = [0] * len(groups)

    def add(self, chunk: TraceEvents) -> None:
        out: list[list] = [[] for _ in self.files]
        last = len(self.files) - 1
        starts, ends, margin = self.starts, self.ends, self.margin
        for g in _GROUPS:  # GPU events count in the group they start in (analyze_events' `own`)
            for e in getattr(chunk, g):
                lo = bisect_right(ends, e.ts - margin)  # first group ending after the event starts
                hi = bisect_right(starts, e.ts + e.dur + margin) - 1  # last group starting before it ends
                for i in range(max(0, lo), min(last, max(hi, 0)) + 1):
                    out[i].append(e)
        for i, events in enumerate(out):
            if events:
                data = _ENCODER.encode(events)
                self.files[i].write(len(data).to_bytes(8, "little"))
                self.files[i].write(data)
                self.counts[i] += len(events)

    def close(self) -> None:
        for f in self.files:
            f.close()

    def load(self, folder: Path, i: int) -> TraceEvents:
        events: list = []
        with open(folder / f"group-{i}.msgpack", "rb") as fh:
            while head := fh.read(8):
                events += _DECODER.decode(fh.read(int.from_bytes(head, "little")))
        return group_events(events)


def analyze_streamed(path: Path, budget: int) -> _RankResult:
    scan = _Scan()
    meta = stream_trace(path, scan.add)
    wins = scan.windows()
    total = meta.events.events
    if not wins.windows:
        raise InputError(f"{path} has no events with a time to analyse; re-export the trace")
    per_group_events = max(1, int(budget * GROUP_SHARE / MEMORY_PER_EVENT))
    per_group = max(1, int(len(wins.windows) * per_group_events / max(1, total)))
    groups = [wins.windows[i:i + per_group] for i in range(0, len(wins.windows), per_group)]
    t0 = wins.windows[0].start
    parts = []
    with tempfile.TemporaryDirectory(prefix="torchdoctor-trace-") as tmp:
        folder = Path(tmp)
        spill = _Spill(folder, groups)
        try:
            stream_trace(path, spill.add)
        finally:
            spill.close()
        for i, group in enumerate(groups):
            events = spill.load(folder, i)
            loaded = LoadedTrace(path=path, events=events, device_properties=meta.device_properties,
                                 distributed=meta.distributed, base_time_ns=meta.base_time_ns)
            own = (group[0].start if i else float("-inf"), groups[i + 1][0].start if i + 1 < len(groups) else float("inf"))
            # idle stretches crossing into a neighbouring group are judged whole, as in memory, and
            # like it never before the first window nor after the last
            span = (max(group[0].start - spill.margin, t0), min(group[-1].end + spill.margin, wins.windows[-1].end))
            parts.append(analyze_events(loaded, Windows(wins.kind, group, list(wins.notes)), t0=t0, own=own,
                                        span=span))
            del events, loaded
    merged = merge_parts(parts, total, wins)
    merged.summary.notes.append(
        f"streamed: the trace's events would not fit the memory budget, so it was analysed in {len(groups)} groups "
        f"of up to {per_group} steps, one at a time; the top kernels' medians and the launch-gap medians are "
        f"merged from the groups' (approximate), everything else is exact")
    if meta.events.skipped_no_time:
        merged.summary.notes.append(f"{meta.events.skipped_no_time} events without a timestamp were skipped")
    return merged


# --- merging the groups' summaries ---------------------------------------------------------------

def merge_parts(parts: list[_RankResult], events: int, wins: Windows) -> _RankResult:
    first = parts[0].summary
    rank = RankSummary(path=first.path, rank=first.rank, world_size=first.world_size, events=events,
                       window_kind=wins.kind, steps=len(wins.windows), cpu_only=all(p.summary.cpu_only for p in parts),
                       has_stacks=any(p.summary.has_stacks for p in parts))
    for p in parts:
        rank.notes += [n for n in p.summary.notes if n not in rank.notes and "without a timestamp" not in n]
    rank.host = _merge_hosts([p.summary.host for p in parts])
    by_device: dict[int, list[DeviceSummary]] = {}
    for p in parts:
        for d in p.summary.devices:
            by_device.setdefault(d.device, []).append(d)
    calls: dict[int, list] = {}
    for p in parts:
        for device, cs in p.device_calls.items():
            calls.setdefault(device, []).extend(cs)
    rank.devices = [_merge_devices(ds, calls.get(dev, [])) for dev, ds in sorted(by_device.items())]
    out = _RankResult(rank, declared_rank=parts[0].declared_rank)
    for p in parts:
        out.calls += p.calls
    return out


def _merge_hosts(hosts: list[HostSummary]) -> HostSummary:
    out = HostSummary()
    for h in hosts:
        out.steps += h.steps
        out.step_us += h.step_us
        out.dataloader_us += h.dataloader_us
        for name, n in h.sync_ops.items():
            out.sync_ops[name] = out.sync_ops.get(name, 0) + n
        for name, loc in h.sync_locations.items():
            out.sync_locations.setdefault(name, loc)
        out.dataloader_location = out.dataloader_location or h.dataloader_location
    return out


def _merge_devices(parts: list[DeviceSummary], calls: list) -> DeviceSummary:
    first = parts[0]
    out = DeviceSummary(device=first.device, name=first.name, compute_capability=first.compute_capability,
                        total=Breakdown())
    sites: dict[tuple, IdleSiteSummary] = {}
    moves: dict[tuple, TransferSummary] = {}
    kernels: dict[str, list[KernelStat]] = {}
    comm_overlapped = 0.0
    for d in parts:
        out.steps += d.steps
        add_breakdown(out.total, d.total)
        out.kernels += d.kernels
        out.busy_us += d.busy_us
        out.matmul_fp32_us += d.matmul_fp32_us
        out.matmul_lowp_us += d.matmul_lowp_us
        out.matmul_unknown_us += d.matmul_unknown_us
        out.comm_total_us += d.comm_total_us
        comm_overlapped += (d.comm_overlap or 0.0) * d.comm_total_us
        for s in d.idle_sites:
            key = (s.cause, s.kind, s.op, _loc(s.location))
            if key in sites:
                sites[key].count += s.count
                sites[key].idle_us += s.idle_us
            else:
                sites[key] = IdleSiteSummary(s.cause, s.kind, s.op, s.location, s.count, s.idle_us)
        for t in d.transfers:
            key = (t.direction, t.memory, t.op, _loc(t.location))
            if key in moves:
                moves[key].count += t.count
                moves[key].bytes += t.bytes
                moves[key].busy_us += t.busy_us
            else:
                moves[key] = TransferSummary(**{f: getattr(t, f) for f in TransferSummary.__dataclass_fields__})
        for k in d.top_kernels:
            kernels.setdefault(k.name, []).append(k)
    out.comm_overlap = comm_overlapped / out.comm_total_us if out.comm_total_us else first.comm_overlap
    out.idle_sites = sorted(sites.values(), key=lambda s: -s.idle_us)
    out.transfers = sorted(moves.values(), key=lambda t: -t.busy_us)
    merged = []
    for name, ks in kernels.items():
        count = sum(k.count for k in ks)
        merged.append(KernelStat(name=name, kind=ks[0].kind, count=count, total_us=sum(k.total_us for k in ks),
                                 median_us=sum(k.median_us * k.count for k in ks) / count if count else 0.0,
                                 precision=ks[0].precision))
    merged.sort(key=lambda k: -k.total_us)
    out.top_kernels = merged[:max((len(d.top_kernels) for d in parts), default=0)]
    out.collectives = collective_stats(calls)
    out.launch = _merge_launch([d.launch for d in parts])
    return out


def _loc(location) -> tuple | None:
    return None if location is None else (location.path, location.line, location.function)


def _merge_launch(stats: list[dict]) -> dict:
    gaps = sum(s.get("gaps") or 0 for s in stats)
    out: dict = {"gaps": gaps}
    for key in ("median_gap_us", "median_kernel_us", "median_launch_call_us"):
        weighted = [(s[key], s.get("gaps") or 0) for s in stats if s.get(key) is not None]
        weight = sum(w for _, w in weighted)
        out[key] = (round(sum(v * w for v, w in weighted) / weight, 3) if weight else
                    (round(median(v for v, _ in weighted), 3) if weighted else None))
    return out
