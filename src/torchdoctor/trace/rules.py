"""Trace rules: turn a TraceSummary into findings, with estimates from the measured timeline.

Each rule points at its catalogue entry (code, slug, fix) and never restates it. Estimates
are Amdahl-style (DESIGN.md §6): the GPU time a cause costs per step, removed from the
measured step. On CPU-only traces GPU-only causes are hazards with no estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchdoctor.model.units import MIB, format_bytes
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.rules.base import HAZARD_BASIS_CPU, MIN_REPORTED_SPEEDUP, amdahl, detects, make_finding, ms
from torchdoctor.rules.catalogue import LaunchBound
from torchdoctor.rules.scaling import SlowInterconnect
from torchdoctor.rules.compute import NoMixedPrecision
from torchdoctor.rules.data import DATA_WAIT_MIN_SHARE, TRANSFER_MIN_BYTES, DataLoaderStall, PageableTransfer
from torchdoctor.rules.gpu import UNDERUSED_UTIL, GpuUnderutilized
from torchdoctor.rules.launch import LOOP_OPS_PER_STEP, PythonLoopOps
from torchdoctor.rules.sync import DataDependentSync, ExplicitSync, HostSync
from torchdoctor.rules.registry import detectors
from torchdoctor.trace import idle
from torchdoctor.model.trace_summary import DeviceSummary, IdleSiteSummary, RankSummary, TraceSummary

# Launch gaps under 5 % of a step are within the run-to-run noise of step times.
LAUNCH_MIN_SHARE = 0.05
# fp32 matmul/conv under 10 % of GPU busy time is not worth changing precision for.
FP32_MATMUL_MIN_SHARE = 0.10
TENSOR_CORE_MIN_MAJOR = 7  # Volta (7.0) added fp16 tensor cores; Ampere (8.0) bf16 and TF32
# bf16/fp16 dense tensor-core peak is 2x the TF32 peak on A100 and H100 (NVIDIA datasheets)
LOW_PRECISION_GAIN = 2.0
# Bus bandwidth (NCCL's definition) below which a link is slow: under PCIe 3.0 x8. The
# reference report measured 1 GB/s over WSL2 where PCIe "should give 20+ GB/s".
SLOW_BUSBW_GBPS = 5.0
TARGET_BUSBW_GBPS = 20.0  # PCIe 4.0 x16 class: the estimate assumes the link reaches this
MIN_COLLECTIVE_BYTES = MIB  # smaller messages are latency-bound: their bandwidth says little

SYNC_RULES = {idle.ITEM: HostSync, idle.D2H_COPY: HostSync, idle.OTHER_SYNC: HostSync,
              idle.DATA_DEPENDENT: DataDependentSync, idle.EXPLICIT: ExplicitSync}
SYNC_WORDS = {idle.ITEM: "`.item()`/`float()`/`bool()` on a GPU tensor",
              idle.D2H_COPY: "a device→host copy (`.cpu()`, `.numpy()`, `.tolist()`)",
              idle.OTHER_SYNC: "a host sync",
              idle.DATA_DEPENDENT: "an op whose output size depends on GPU data",
              idle.EXPLICIT: "an explicit synchronize (`torch.cuda.synchronize()`, `event.synchronize()`)"}


@dataclass
class Ctx:
    """One device of one rank, with the per-step arithmetic every rule needs."""

    rank: RankSummary
    dev: DeviceSummary

    @property
    def steps(self) -> int:
        return max(1, len(self.dev.steps))

    @property
    def step_us(self) -> float:
        return self.dev.total.window_us / self.steps

    def per_step(self, us: float) -> float:
        return us / self.steps

    def speedup(self, saved_us_total: float) -> float:
        return amdahl(self.step_us, self.per_step(saved_us_total))

    def idle_cost(self, cause: str) -> tuple[float, float, float]:
        """(µs over all steps, share of a step, Amdahl speedup) of one idle cause."""
        us = self.dev.total.idle_by_cause_us.get(cause, 0.0)
        return us, (self.per_step(us) / self.step_us if self.step_us else 0.0), self.speedup(us)

    def where(self) -> str:
        return f" on rank {self.rank.rank}" if self.rank.world_size and self.rank.world_size > 1 else ""

    def basis(self, what: str) -> str:
        unit = "step" if self.rank.window_kind != "whole trace" else "trace window"
        return (f"Amdahl on the measured GPU timeline: {what}, per {ms(self.step_us / 1e6):.2f} ms {unit} "
                f"({len(self.dev.steps)} profiled)")


def _ms(us: float) -> float:
    return round(us / 1e3, 3)


# --- rules -----------------------------------------------------------------------------------

@detects(HostSync, DataDependentSync, ExplicitSync)
def host_syncs(c: Ctx) -> list[Finding]:
    out = []
    for site in c.dev.idle_sites:
        if site.cause != idle.SYNC or site.kind not in SYNC_RULES:
            continue
        speedup = c.speedup(site.idle_us)
        per_step = c.per_step(site.idle_us)
        # Below the reported floor the sync is still measured: a low finding that says how little
        # it cost here, so a run's hazard finding at the same site is sized, not left "medium".
        small = speedup < MIN_REPORTED_SPEEDUP
        out.append(make_finding(
            SYNC_RULES[site.kind], severity=Severity.LOW if small else None,
            title=f"{_op_words(site)} stalls the GPU {_ms(per_step):.2f} ms per step{c.where()}",
            message=(f"{SYNC_WORDS[site.kind]} ({site.op}) waited for the GPU to finish everything queued; the GPU "
                     f"then sat idle {_ms(per_step):.2f} ms per step ({per_step / c.step_us:.0%}) until the host "
                     f"queued new work ({site.count} times in {len(c.dev.steps)} steps)."),
            location=site.location,
            evidence={"idle_ms_per_step": _ms(per_step), "share_of_step_time": round(per_step / c.step_us, 4),
                      "op": site.op, "kind": site.kind, "stalls": site.count, "steps": len(c.dev.steps)},
            speedup=None if small else speedup,
            basis=c.basis(f"the GPU idle after this sync ({_ms(per_step):.2f} ms) removed") + (
                f"; {speedup:.3f}x, under the {MIN_REPORTED_SPEEDUP}x a fix must gain to be ranked: the GPU waited "
                f"for other host work, not for this sync" if small else "")))
    return out


def _op_words(site: IdleSiteSummary) -> str:
    return {idle.ITEM: "`.item()`", idle.D2H_COPY: "Device→host copy", idle.DATA_DEPENDENT: f"`{site.op}`",
            idle.EXPLICIT: f"`{site.op}`"}.get(site.kind, f"Sync in `{site.op}`")


@detects(LaunchBound)
def launch_bound(c: Ctx) -> list[Finding]:
    launch_us, share, speedup = c.idle_cost(idle.LAUNCH)
    if share < LAUNCH_MIN_SHARE or speedup < MIN_REPORTED_SPEEDUP:
        return []
    stats = c.dev.launch
    top = next((s for s in c.dev.idle_sites if s.cause == idle.LAUNCH), None)
    kernels = c.dev.kernels / c.steps
    return [make_finding(
        LaunchBound,
        title=f"GPU idle {share:.0%} of each step waiting for kernel launches{c.where()}",
        message=(f"{kernels:.0f} kernels per step; in {stats.get('gaps')} gaps the GPU had finished the previous "
                 f"kernel before the host had launched the next (median gap {stats.get('median_gap_us')} µs, "
                 f"median kernel {stats.get('median_kernel_us')} µs, median launch call "
                 f"{stats.get('median_launch_call_us')} µs): {_ms(c.per_step(launch_us)):.2f} ms idle per step."
                 + (f" Most of it after `{top.op}` launches." if top is not None else "")),
        location=top.location if top is not None else None,
        evidence={"launch_idle_ms_per_step": _ms(c.per_step(launch_us)), "share_of_step_time": round(share, 4),
                  "kernels_per_step": round(kernels, 1), **{k: v for k, v in stats.items()}},
        speedup=speedup,
        basis=c.basis("the launch gaps removed, as if the kernels ran back to back (fused or in a CUDA graph); "
                      "an upper bound"))]


@detects(PythonLoopOps)
def python_loops(c: Ctx) -> list[Finding]:
    out = []
    by_line: dict[tuple, list[IdleSiteSummary]] = {}
    for s in c.dev.idle_sites:
        if s.cause in (idle.LAUNCH, idle.HOST) and s.location is not None:
            by_line.setdefault((s.location.path, s.location.line, s.op), []).append(s)
    for (_, _, op), sites in by_line.items():
        launches = sum(s.count for s in sites) / c.steps
        idle_us = sum(s.idle_us for s in sites)
        speedup = c.speedup(idle_us)
        if launches < LOOP_OPS_PER_STEP or speedup < MIN_REPORTED_SPEEDUP:
            continue
        loc = sites[0].location
        out.append(make_finding(
            PythonLoopOps,
            title=f"The GPU waits for {launches:.0f} `{op}` launches per step from `{loc.function}`{c.where()}",
            message=(f"{launches:.0f} times per step the GPU finished its work and waited for the host to launch "
                     f"the next `{op}` from `{loc.function}` ({loc.path}:{loc.line}): "
                     f"{_ms(c.per_step(idle_us)):.2f} ms of GPU idle per step."),
            location=loc,
            evidence={"launch_waits_per_step": round(launches, 1), "op": op,
                      "idle_ms_per_step": _ms(c.per_step(idle_us)),
                      "share_of_step_time": round(c.per_step(idle_us) / c.step_us, 4)},
            speedup=speedup, basis=c.basis("the GPU idle before these launches removed (one vectorized op instead)")))
    return out


@detects(DataLoaderStall)
def data_loading(c: Ctx) -> list[Finding]:
    data_us, share, speedup = c.idle_cost(idle.DATA)
    if share < DATA_WAIT_MIN_SHARE or speedup < MIN_REPORTED_SPEEDUP:
        return []
    return [make_finding(
        DataLoaderStall,
        title=f"GPU idle {share:.0%} of each step while the next batch loads{c.where()}",
        message=(f"The host spent {_ms(c.per_step(data_us)):.2f} ms per step in `DataLoader.__next__` with no GPU "
                 f"work queued."),
        location=c.rank.host.dataloader_location,
        evidence={"exposed_data_ms_per_step": _ms(c.per_step(data_us)), "share_of_step_time": round(share, 4)},
        speedup=speedup, basis=c.basis("the GPU idle during data loading removed"))]


@detects(PageableTransfer)
def pageable_copies(c: Ctx) -> list[Finding]:
    out = []
    copy_busy = sum(t.busy_us for t in c.dev.transfers)
    exposed = min(1.0, c.dev.total.copy_us / copy_busy) if copy_busy else 0.0
    for t in c.dev.transfers:
        if t.direction != "HtoD" or not t.memory.startswith("Pageable") or t.bytes / c.steps < TRANSFER_MIN_BYTES:
            continue
        stall = sum(s.idle_us for s in c.dev.idle_sites if s.kind == idle.PAGEABLE_COPY and s.location == t.location)
        saved = stall + t.busy_us * exposed
        speedup = c.speedup(saved)
        mb = t.bytes / c.steps / MIB
        out.append(make_finding(
            PageableTransfer,
            title=f"{mb:.1f} MiB per step copied to the GPU from pageable memory{c.where()}",
            message=(f"`{t.op}` copied {mb:.1f} MiB per step host→device at {t.gbps or 0:.1f} GB/s from pageable "
                     f"memory: the host blocks until each copy is done and the copy cannot overlap compute "
                     f"({_ms(c.per_step(stall)):.2f} ms of GPU idle after them per step)."),
            location=t.location,
            evidence={"mib_per_step": round(mb, 2), "gbps": round(t.gbps, 2) if t.gbps else None,
                      "copy_ms_per_step": _ms(c.per_step(t.busy_us)), "stall_ms_per_step": _ms(c.per_step(stall)),
                      "copies": t.count},
            speedup=speedup if speedup >= MIN_REPORTED_SPEEDUP else None,
            basis=c.basis("the GPU idle after the blocking copies and the copy time not overlapped with kernels "
                          "removed, as pinned non_blocking copies would overlap compute; an upper bound")))
    return out


@detects(NoMixedPrecision)
def fp32_matmul(c: Ctx) -> list[Finding]:
    cap, d = c.dev.compute_capability, c.dev
    if cap is None or cap[0] < TENSOR_CORE_MIN_MAJOR or not d.busy_us:
        return []
    share = d.matmul_fp32_us / d.busy_us
    if share < FP32_MATMUL_MIN_SHARE:
        return []
    saved = d.matmul_fp32_us * (1 - 1 / LOW_PRECISION_GAIN)
    speedup = c.speedup(saved)
    small = speedup < MIN_REPORTED_SPEEDUP
    idle_share = d.total.idle_us / d.total.window_us if d.total.window_us else 0.0
    return [make_finding(
        NoMixedPrecision, severity=Severity.LOW if small else None,
        title=f"fp32 matmul/conv kernels take {share:.0%} of GPU time on a tensor-core GPU{c.where()}",
        message=(f"{_ms(c.per_step(d.matmul_fp32_us)):.2f} ms per step of matmul/convolution kernels ran in fp32/TF32 "
                 f"on {d.name or 'this GPU'} (compute capability {cap[0]}.{cap[1]}), which has bf16/fp16 tensor cores."),
        location=None,
        evidence={"fp32_matmul_ms_per_step": _ms(c.per_step(d.matmul_fp32_us)), "share_of_gpu_busy": round(share, 4),
                  "low_precision_matmul_ms_per_step": _ms(c.per_step(d.matmul_lowp_us)),
                  "compute_capability": f"{cap[0]}.{cap[1]}"},
        speedup=None if small else speedup,
        basis=c.basis(f"the fp32 matmul/conv kernels {LOW_PRECISION_GAIN:g}x faster in bf16 (tensor-core peak ratio "
                      f"on A100/H100), if the step is GPU-bound in them; an upper bound") + (
            f"; {speedup:.3f}x, under the {MIN_REPORTED_SPEEDUP}x a fix must gain to be ranked: the GPU was idle "
            f"{idle_share:.0%} of the step, waiting for the host, so faster kernels change little" if small else ""))]


@detects(SlowInterconnect)
def slow_collectives(c: Ctx) -> list[Finding]:
    out = []
    for col in c.dev.collectives:
        if col.bytes is None or col.bytes < MIN_COLLECTIVE_BYTES or col.busbw_gbps is None:
            continue
        if col.busbw_gbps >= SLOW_BUSBW_GBPS:
            continue
        exposed = c.dev.total.comm_us
        saved = exposed * (1 - col.busbw_gbps / TARGET_BUSBW_GBPS)
        speedup = c.speedup(saved)
        out.append(make_finding(
            SlowInterconnect,
            title=f"{col.collective} runs at {col.busbw_gbps:.1f} GB/s bus bandwidth{c.where()}",
            message=(f"{col.count} {col.collective} calls of {format_bytes(col.bytes)} reached {col.busbw_gbps:.2f} "
                     f"GB/s (best call); communication not overlapped with compute took "
                     f"{_ms(c.per_step(exposed)):.2f} ms per step."),
            location=None,
            evidence={"busbw_gbps": round(col.busbw_gbps, 3), "mib": round(col.bytes / MIB, 2),
                      "calls": col.count, "exposed_comm_ms_per_step": _ms(c.per_step(exposed)),
                      "comm_overlap": None if c.dev.comm_overlap is None else round(c.dev.comm_overlap, 3)},
            speedup=speedup if speedup >= MIN_REPORTED_SPEEDUP else None,
            basis=c.basis(f"exposed communication shrunk in proportion to {TARGET_BUSBW_GBPS:g} GB/s "
                          f"(PCIe 4.0 x16 class)")))
    return out


@detects(GpuUnderutilized)
def underutilized(c: Ctx) -> list[Finding]:
    t = c.dev.total
    busy = 1 - t.share(t.idle_us)
    if busy * 100 >= UNDERUSED_UTIL:
        return []
    causes = {k: round(t.share(v), 4) for k, v in t.idle_by_cause_us.items() if v > 0}
    return [make_finding(
        GpuUnderutilized,
        title=f"GPU busy only {busy:.0%} of the profiled steps{c.where()}",
        message=(f"Of {_ms(t.window_us):.1f} ms profiled, the GPU computed {t.share(t.compute_us):.0%}, communicated "
                 f"{t.share(t.comm_us):.0%}, copied {t.share(t.copy_us):.0%} and was idle {t.share(t.idle_us):.0%}."),
        location=None,
        evidence={"busy_share": round(busy, 4), "idle_share_by_cause": causes},
        speedup=None, basis="summary of the trace; the ranked causes carry the estimates", severity=Severity.INFO)]


@detects(HostSync, DataDependentSync)
def cpu_hazards(rank: RankSummary) -> list[Finding]:
    """CPU-only traces: syncs cost nothing on the CPU; report them as hazards."""
    out = []
    steps = max(1, len(rank.host.steps))
    for op, calls in rank.host.sync_ops.items():
        if calls < steps:
            continue
        info = DataDependentSync if op in idle.DATA_DEPENDENT_OPS else HostSync
        out.append(make_finding(
            info, title=f"`{op}` runs {calls / steps:.0f}x per step: a GPU sync once on CUDA",
            message=f"{calls} `{op}` calls in {steps} steps of this CPU trace; on a GPU each waits for the device.",
            location=rank.host.sync_locations.get(op), evidence={"calls_per_step": round(calls / steps, 2), "op": op},
            speedup=None, basis=HAZARD_BASIS_CPU))
    return out


@detects(DataLoaderStall)
def cpu_data_loading(rank: RankSummary) -> list[Finding]:
    h = rank.host
    if not h.step_us or not sum(h.step_us):
        return []
    step, data = sum(h.step_us) / len(h.step_us), sum(h.dataloader_us) / len(h.step_us)
    speedup = amdahl(step, data)
    if data / step < DATA_WAIT_MIN_SHARE or speedup < MIN_REPORTED_SPEEDUP:
        return []
    return [make_finding(
        DataLoaderStall, title=f"Steps spend {data / step:.0%} of their time loading the next batch",
        message=f"{_ms(data):.2f} ms of each {_ms(step):.2f} ms step was spent in `DataLoader.__next__`.",
        location=h.dataloader_location,
        evidence={"data_ms_per_step": _ms(data), "step_ms": _ms(step), "share_of_step_time": round(data / step, 4)},
        speedup=speedup,
        basis=f"Amdahl on the host timeline: DataLoader.__next__ time removed from the {_ms(step):.2f} ms step")]


# Detectors of CPU-only traces take a RankSummary; all others a Ctx (one device of one rank).
HOST_ONLY = frozenset({"cpu_hazards", "cpu_data_loading"})


def trace_findings(summary: TraceSummary) -> list[Finding]:
    """Findings of every rank, one per cause and place: the same finding on several ranks is
    kept once, with the largest estimate and the ranks it was seen on."""
    host_rules = [d.load() for d in detectors("trace") if d.name in HOST_ONLY]
    device_rules = [d.load() for d in detectors("trace") if d.name not in HOST_ONLY]
    merged: dict[tuple, Finding] = {}
    for rank in summary.ranks:
        found: list[Finding] = []
        if rank.cpu_only:
            for rule in host_rules:
                found += rule(rank)
        for dev in rank.devices:
            for rule in device_rules:
                found += rule(Ctx(rank, dev))
        for f in found:
            loc = (f.location.path, f.location.line) if f.location else None
            key = (f.code, loc, f.evidence.get("op"), f.evidence.get("kind"))
            f.evidence["ranks"] = [rank.rank]
            kept = merged.get(key)
            if kept is None:
                merged[key] = f
                continue
            ranks = kept.evidence["ranks"] + [rank.rank]
            if (f.estimated_speedup or 0) > (kept.estimated_speedup or 0):
                merged[key] = kept = f
            kept.evidence["ranks"] = sorted(set(ranks))
    return sorted(merged.values(), key=Finding.sort_key)
