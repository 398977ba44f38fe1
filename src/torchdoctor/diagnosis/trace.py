"""TraceSummary → Report: the findings plus the tables behind them (per-step breakdown, idle
causes, copies, kernels, collectives, late ranks). Cells are formatted here; renderers only
lay them out."""

from __future__ import annotations

import re

from torchdoctor.diagnosis.environment import environment_table
from torchdoctor.model.units import MIB
from torchdoctor.version import __version__
from torchdoctor.model.findings import Report, Table
from torchdoctor.model.location import Location
from torchdoctor.report.common import fmt_share
from torchdoctor.trace import idle
from torchdoctor.trace.rules import trace_findings
from torchdoctor.model.trace_summary import RankSummary, TraceSummary

MAX_STEP_ROWS = 8  # per device; more steps are summarized in the "all" row
MAX_SITE_ROWS = 10
KERNEL_NAME_CHARS = 70
IDLE_COLUMNS = (idle.DATA, idle.SYNC, idle.LAUNCH, idle.HOST, idle.GPU_WAIT, idle.OTHER)


def trace_report(summary: TraceSummary) -> Report:
    report = Report(source="trace", tool_version=__version__, findings=trace_findings(summary))
    gpu_ranks = [r for r in summary.ranks if r.devices]
    if gpu_ranks:
        report.tables += [_steps_table(gpu_ranks), _causes_table(gpu_ranks), _idle_table(gpu_ranks)]
        report.tables += [t for t in (_copies_table(gpu_ranks), _kernels_table(gpu_ranks),
                                      _collectives_table(gpu_ranks), _late_table(summary)) if t.rows]
    host_only = [r for r in summary.ranks if r.cpu_only]
    if host_only:
        report.tables.append(_host_table(host_only))
    report.environment = environment_table(trace=summary)
    multi = len(summary.ranks) > 1
    for r in summary.ranks:
        report.notes += [f"rank {r.rank}: {n}" if multi else n for n in r.notes]
    report.notes += summary.notes
    return report.ranked()


def _ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1e3, 3)


def _pct(part: float, whole: float) -> str:
    return fmt_share(part / whole if whole > 0 else None)


def _where(loc: Location | None) -> str:
    return f"{loc.path}:{loc.line} ({loc.function})" if loc is not None else "—"


def short_kernel(name: str) -> str:
    """`void at::native::foo<4, ...>(int, ...)` → `at::native::foo<4, ...>`, at most 70 chars."""
    if name.startswith(("Memcpy", "Memset")):
        return name
    name = re.sub(r"^void ", "", name)
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # drop the argument list: the first "(" outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    name = name[:cut]
    return name if len(name) <= KERNEL_NAME_CHARS else name[: KERNEL_NAME_CHARS - 1] + "…"


def _devices(ranks: list[RankSummary]):
    """(rank, device, steps) for every device of every rank; steps is at least 1."""
    for r in ranks:
        for d in r.devices:
            yield r, d, max(1, len(d.steps))


def _steps_table(ranks: list[RankSummary]) -> Table:
    rows = []
    for r, d, n in _devices(ranks):
        label = f"{r.rank}" if len(r.devices) == 1 else f"{r.rank}/gpu{d.device}"
        shown = d.steps if len(d.steps) <= MAX_STEP_ROWS else d.steps[:MAX_STEP_ROWS - 1]
        rows += [_step_row(label, s.label, s.breakdown, s.kernels, s.median_kernel_us) for s in shown]
        if n > 1:
            medians = [s.median_kernel_us for s in d.steps if s.median_kernel_us is not None]
            rows.append(_step_row(label, f"mean of {n}", d.total, d.kernels / n,
                                  sorted(medians)[len(medians) // 2] if medians else None, per=n))
    return Table(
        title="GPU time per step",
        columns=["rank", "step", "step ms", "compute", "comm", "copy", "idle", "main idle cause", "kernels",
                 "median kernel µs"],
        rows=rows,
        caption=("Shares of each step's wall time on the GPU timeline (union of all streams; compute counts first "
                 "where kernels overlap, then communication, then copies)."))


def _step_row(rank: str, label: str, b, kernels, median_us, per: int = 1) -> list:
    w = b.window_us
    cause = max(IDLE_COLUMNS, key=lambda c: b.idle_by_cause_us.get(c, 0.0))
    main = f"{cause} {_pct(b.idle_by_cause_us[cause], w)}" if b.idle_by_cause_us.get(cause) else "—"
    return [rank, label, _ms(w / per), _pct(b.compute_us, w), _pct(b.comm_us, w), _pct(b.copy_us, w),
            _pct(b.idle_us, w), main, round(kernels, 1) if isinstance(kernels, float) else kernels,
            None if median_us is None else round(median_us, 3)]


def _causes_table(ranks: list[RankSummary]) -> Table:
    rows = []
    for r, d, n in _devices(ranks):
        t = d.total
        for cause in IDLE_COLUMNS:
            us = t.idle_by_cause_us.get(cause, 0.0)
            if us > 0:
                rows.append([r.rank, cause, _ms(us / n), _pct(us, t.window_us), _pct(us, t.idle_us)])
        for label, us in (("communication (not overlapped)", t.comm_us), ("copies (not overlapped)", t.copy_us)):
            if us > 0:
                rows.append([r.rank, label, _ms(us / n), _pct(us, t.window_us), "—"])
    return Table(
        title="GPU time not spent computing, by cause",
        columns=["rank", "cause", "ms/step", "of step", "of idle"], rows=rows,
        caption=("Idle gaps are blamed on what the host was doing when the GPU ran out of work: in the DataLoader, "
                 "blocked in a sync, still launching the next kernel (gaps up to 50 µs: launch overhead; longer: "
                 "other host CPU work), or the next kernel was queued but waited on the GPU side."))


def _idle_table(ranks: list[RankSummary]) -> Table:
    rows = []
    for r, d, n in _devices(ranks):
        step = d.total.window_us / n
        for s in d.idle_sites[:MAX_SITE_ROWS]:
            rows.append([r.rank, s.cause, s.kind if s.kind != s.cause else "", s.op if len(s.op) < 60 else
                         short_kernel(s.op), _where(s.location), round(s.count / n, 2), _ms(s.idle_us / n),
                         _pct(s.idle_us / n, step)])
    return Table(
        title="GPU idle time by source",
        columns=["rank", "cause", "kind", "op / kernel", "where", "per step", "idle ms/step", "of step"],
        rows=rows,
        caption=("The host op behind each idle gap and the innermost user Python frame around it (the file:line "
                 "where that function starts), when the trace has stacks."))


def _copies_table(ranks: list[RankSummary]) -> Table:
    rows = []
    for r, d, n in _devices(ranks):
        for t in d.transfers:
            rows.append([r.rank, t.direction, t.memory, t.op, _where(t.location), round(t.count / n, 2),
                         round(t.bytes / n / MIB, 3), None if t.gbps is None else round(t.gbps, 2),
                         _ms(t.busy_us / n)])
    return Table(title="Copies", columns=["rank", "direction", "memory", "op", "where", "per step", "MiB/step",
                                          "GB/s", "ms/step"], rows=rows,
                 caption="CUPTI memcpy/memset records; GB/s is bytes over the copies' own GPU time.")


def _kernels_table(ranks: list[RankSummary]) -> Table:
    rows = []
    for r, d, n in _devices(ranks):
        for k in d.top_kernels:
            rows.append([r.rank, short_kernel(k.name), k.kind, round(k.count / n, 2), _ms(k.total_us / n),
                         round(k.median_us, 3), _pct(k.total_us, d.busy_us), k.precision or ""])
    return Table(title="Top kernels by GPU time", columns=["rank", "kernel", "kind", "per step", "ms/step",
                                                          "median µs", "of busy", "matmul precision"], rows=rows,
                 caption="'of busy' is the kernel's time over the GPU's busy time (overlapping kernels count twice).")


def _collectives_table(ranks: list[RankSummary]) -> Table:
    rows = []
    for r, d, _ in _devices(ranks):
        for c in d.collectives:
            rows.append([r.rank, c.collective, c.process_group, c.count,
                         None if c.bytes is None else round(c.bytes / MIB, 3), round(c.median_us, 3),
                         None if c.busbw_gbps is None else round(c.busbw_gbps, 3),
                         None if d.comm_overlap is None else f"{d.comm_overlap:.0%}"])
    return Table(title="Collectives", columns=["rank", "collective", "group", "calls", "MiB", "median µs",
                                               "bus GB/s (best call)", "overlap with compute"], rows=rows,
                 caption=("Bus bandwidth as NCCL defines it (comparable to the link speed), from the fastest call of "
                          "the typical size, the one least inflated by waiting for other ranks."))


def _late_table(summary: TraceSummary) -> Table:
    rows = []
    for late in summary.late_ranks:
        worst = max(late.late_counts, key=late.late_counts.get)
        rows.append([late.collective, late.process_group, late.calls, worst,
                     f"{late.late_counts[worst]}/{late.calls}",
                     round(late.wait_caused_us[worst] / max(1, late.late_counts[worst]) / 1e3, 3),
                     ", ".join(f"{k}: {v}" for k, v in sorted(late.late_counts.items()))])
    return Table(title="Late ranks", columns=["collective", "group", "calls matched", "most often last",
                                              "last in", "others' wait ms/call", "last per rank"], rows=rows,
                 caption=("Calls matched across the rank files by step, group and order. The last rank to arrive has "
                          "the shortest collective kernel: all ranks finish together, the others waited for it. "
                          "Clock offsets between hosts do not affect this."))


def _host_table(ranks: list[RankSummary]) -> Table:
    rows = []
    for r in ranks:
        h = r.host
        for label, step, data in list(zip(h.steps, h.step_us, h.dataloader_us))[:MAX_STEP_ROWS]:
            rows.append([r.rank, label, _ms(step), _ms(data), _pct(data, step)])
    return Table(title="Host time per step (CPU-only trace)", columns=["rank", "step", "step ms", "DataLoader ms",
                                                                       "DataLoader share"], rows=rows,
                 caption="Steps from ProfilerStep#N (or optimizer.step()) annotations; DataLoader time is "
                         "enumerate(DataLoader)#...__next__.")
