"""TraceSummary: everything `torchdoctor trace` measured, as plain typed data.

Rules and the report read only this; it serializes with `torchdoctor.model.serialize`
(`to_plain` / `from_plain`) like the RunRecord, so `run` can store it in its record.
Times are µs (the trace's unit). Bump SCHEMA_VERSION when a serialized shape changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchdoctor.model.location import Location

SCHEMA_VERSION = 1


@dataclass
class Breakdown:
    """Where a window of one device's time went (µs); the parts add up to `window_us`.
    Compute wins where kernels overlap, then communication, then copies."""

    window_us: float = 0.0
    compute_us: float = 0.0
    comm_us: float = 0.0  # communication kernels while no compute kernel ran
    copy_us: float = 0.0  # memcpy/memset while no compute or communication kernel ran
    idle_us: float = 0.0
    idle_by_cause_us: dict[str, float] = field(default_factory=dict)  # idle.CAUSES → µs

    def share(self, part_us: float) -> float:
        return part_us / self.window_us if self.window_us > 0 else 0.0


@dataclass
class StepSummary:
    label: str  # "ProfilerStep#12", "step 3" (optimizer steps) or "trace"
    start_us: float  # from the start of the trace
    breakdown: Breakdown
    dataloader_us: float = 0.0  # host time inside DataLoader.__next__, exposed or not
    kernels: int = 0
    median_kernel_us: float | None = None


@dataclass
class IdleSiteSummary:
    """GPU idle time of one cause traced to the host op and user frame behind it."""

    cause: str
    kind: str
    op: str
    location: Location | None
    count: int
    idle_us: float


@dataclass
class TransferSummary:
    direction: str  # HtoD, DtoH, DtoD, PtoP, Memset
    memory: str  # "Pageable -> Device", ...
    op: str
    location: Location | None
    count: int
    bytes: int
    busy_us: float

    @property
    def gbps(self) -> float | None:
        return self.bytes / (self.busy_us * 1e3) if self.busy_us > 0 else None


@dataclass
class KernelStat:
    name: str
    kind: str  # compute | comm | copy
    count: int
    total_us: float
    median_us: float
    precision: str | None = None  # fp32 | low | None (matmul/conv kernels only)


@dataclass
class CollectiveStat:
    collective: str
    process_group: str
    count: int
    bytes: int | None  # per call (median)
    median_us: float
    busbw_gbps: float | None  # bus bandwidth of the fastest call of the median size (least waiting)
    group_size: int | None = None


@dataclass
class DeviceSummary:
    device: int
    name: str | None
    compute_capability: list[int] | None
    total: Breakdown
    steps: list[StepSummary] = field(default_factory=list)
    idle_sites: list[IdleSiteSummary] = field(default_factory=list)
    transfers: list[TransferSummary] = field(default_factory=list)
    top_kernels: list[KernelStat] = field(default_factory=list)
    kernels: int = 0
    busy_us: float = 0.0
    matmul_fp32_us: float = 0.0
    matmul_lowp_us: float = 0.0
    matmul_unknown_us: float = 0.0
    comm_total_us: float = 0.0
    comm_overlap: float | None = None  # share of communication time overlapped by compute
    collectives: list[CollectiveStat] = field(default_factory=list)
    launch: dict[str, float | int | None] = field(default_factory=dict)  # idle.IdleResult.launch_stats


@dataclass
class HostSummary:
    """What a trace shows without any GPU activity (CPU-only traces) and on any trace."""

    steps: list[str] = field(default_factory=list)
    step_us: list[float] = field(default_factory=list)
    dataloader_us: list[float] = field(default_factory=list)
    sync_ops: dict[str, int] = field(default_factory=dict)  # op name → calls in the windows
    sync_locations: dict[str, Location] = field(default_factory=dict)  # op name → user frame of its first call
    dataloader_location: Location | None = None  # user frame around the first DataLoader.__next__


@dataclass
class RankSummary:
    path: str
    rank: int
    world_size: int | None
    events: int
    window_kind: str  # "ProfilerStep", "optimizer step" or "whole trace"
    steps: int
    cpu_only: bool
    has_stacks: bool
    host: HostSummary = field(default_factory=HostSummary)
    devices: list[DeviceSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def step_us(self) -> float | None:
        """Mean step (window) length over the devices' windows, or the host's."""
        for d in self.devices:
            if d.steps:
                return sum(s.breakdown.window_us for s in d.steps) / len(d.steps)
        return sum(self.host.step_us) / len(self.host.step_us) if self.host.step_us else None


@dataclass
class LateRank:
    """The rank the others waited for, per collective: the last to arrive has the shortest
    collective kernel, since every rank's kernel ends when the slowest one has joined."""

    collective: str
    process_group: str
    calls: int  # matched across all given ranks
    late_counts: dict[str, int] = field(default_factory=dict)  # rank → calls where it was last
    wait_caused_us: dict[str, float] = field(default_factory=dict)  # rank → others' mean wait for it, summed


@dataclass
class TraceSummary:
    schema_version: int = SCHEMA_VERSION
    ranks: list[RankSummary] = field(default_factory=list)
    late_ranks: list[LateRank] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
