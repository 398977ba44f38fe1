"""What a multi-rank run measured, as plain typed data (part of the RunRecord, schema 5).

Each rank's record has a `DistributedInfo`: who the rank is, its DDP models and their
per-step communication (from DDP's own runtime statistics), the collectives the user's code
called, and the short communication check run after the script. The run directory's
top-level record merges the ranks (diagnosis/ranks.py) and keeps one `RankView` per rank
(record.py: it holds the rank's StepSamples).

`CommResult` is also what `torchdoctor comm` measures and prints. Torch-free: `report` and
`rules` read these without importing torch. Times are seconds, sizes bytes, bandwidths GB/s
(10^9 bytes per second, as nccl-tests print them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchdoctor.model.location import Location
from torchdoctor.model.serialize import read_json, write_json

COMM_SCHEMA_VERSION = 1  # of a CommResult saved alone (`torchdoctor comm --format json`)


@dataclass
class RankIdentity:
    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0  # the launcher's group rank (one launcher per node)
    host: str = ""
    pid: int = 0
    job_id: str = ""  # the same in every rank of one launch: `report` refuses a mix of jobs
    launcher: str = "torchrun"  # torchrun | mp.spawn
    backend: str | None = None  # as the script's init_process_group chose it
    init_location: Location | None = None  # where the script called init_process_group
    epoch_t0: float = 0.0  # time.time() at the run's t0: puts the ranks' steps on one clock


@dataclass
class NoSyncUse:
    """One `with model.no_sync():` call site and what happened inside it."""

    location: Location
    entries: int = 0
    forwards_inside: int = 0  # forwards run inside: only these skip the all-reduce
    backwards_inside: int = 0  # a backward inside with no forward inside skips nothing


@dataclass
class DdpModel:
    """One DistributedDataParallel wrapper, as DDP itself reports it."""

    created_at: Location | None
    module: str  # the wrapped module's class
    backend: str = ""
    world_size: int = 1
    param_tensors: int = 0
    grad_bytes: int = 0  # bytes all-reduced per synchronised backward (parameters needing grads)
    bucket_cap_mb: float = 25.0
    bucket_sizes: list[int] = field(default_factory=list)  # bytes, after DDP rebuilt its buckets
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    find_unused_parameters: bool = False
    broadcast_buffers: bool = True
    buffers: int = 0
    buffer_bytes: int = 0
    buffers_changed: bool | None = None  # did any buffer change between measured steps
    comm_hook: str | None = None  # the registered comm hook's name
    unused_parameter_bytes: int | None = None  # DDP's count, from its logging data
    forward_location: Location | None = None  # the first call of the wrapper
    backward_location: Location | None = None  # the backward() that followed a synchronised forward
    # the time of DDP's own work around the forward, per measured step (seconds, mean)
    unused_search_s: float = 0.0  # DDP's _post_forward (the unused-parameter search, when on)
    buffer_sync_s: float = 0.0  # buffer broadcasts before forwards
    simulated_link_gbps: float | None = None  # the test hook's simulated link, when on


@dataclass
class DdpBackward:
    """One synchronised backward's timestamps as DDP measured them (epoch seconds)."""

    compute_start: float
    compute_end: float  # the last gradient ready
    comm_start: float
    comm_end: float  # the last bucket's all-reduce done

    @property
    def exposed_s(self) -> float:
        """Communication after the last gradient was ready: not hidden behind backward."""
        return max(0.0, self.comm_end - max(self.compute_end, self.comm_start))


@dataclass
class DdpStep:
    """DDP's work in one optimizer step of this rank."""

    step: int  # StepSample.index
    synced_backwards: int = 0
    skipped_backwards: int = 0  # backwards whose forward ran under no_sync
    backwards: list[DdpBackward] = field(default_factory=list)  # the synchronised ones DDP timed
    forward_compute_s: float = 0.0
    buffer_sync_s: float = 0.0  # DDP broadcasting buffers before forwards (blocking communication)
    post_forward_s: float = 0.0  # DDP's work after forwards (the unused-parameter search, when on)

    @property
    def exposed_s(self) -> float:
        """Communication the step waited for: all-reduce not hidden by backward, buffer broadcasts."""
        return sum(b.exposed_s for b in self.backwards) + self.buffer_sync_s


@dataclass
class FsdpUnit:
    """One FSDP unit: a module `fully_shard` was applied to (FSDP2: one parameter group), or a
    `FullyShardedDataParallel` wrapper (FSDP1), with what the wrapper was told to do."""

    module: str  # its name in the model ("layers.0"; "" for the root)
    kind: str  # the module's class
    version: int = 2  # 2: fully_shard, 1: FullyShardedDataParallel
    created_at: Location | None = None  # the fully_shard / FSDP(...) call
    param_tensors: int = 0
    unsharded_bytes: int = 0  # its parameters whole, as the all-gather delivers them
    sharded_bytes: int = 0  # this rank's shard of them
    sharding: str = "full"  # full | hybrid | grad-op (FSDP1 SHARD_GRAD_OP) | none
    reshard_after_forward: bool | None = True  # free the gathered parameters after forward (gather again in backward)
    param_dtype: str | None = None  # mixed precision: the dtype parameters are gathered and computed in; None: as stored
    reduce_dtype: str | None = None
    offload: str | None = None  # "cpu": parameters and gradients live on the host
    forward_prefetch: str = "off"  # off | implicit | "explicit: a, b"
    backward_prefetch: str = "implicit"  # off | implicit (FSDP2's default; FSDP1 BACKWARD_PRE/POST) | "explicit: ..."
    unshard_async: bool = False  # FSDP2 unshard_async_op
    leaf: bool = False  # the module has no submodules: a single layer (Linear, LayerNorm), not a block
    # FSDP1: the wrapper's use_orig_params (torch.compile traces FSDP1 only with it on), and where the call wrote
    # the keyword (None: left to its default, False)
    use_orig_params: bool | None = None
    use_orig_params_at: Location | None = None


@dataclass
class FsdpStep:
    """FSDP's communication in one optimizer step of this rank. The times are the host's: on a
    CPU (gloo) a collective blocks the host, so the time is what the step waited; on a GPU the
    host only issues them and the profiler window's trace tells the overlap."""

    step: int  # StepSample.index
    all_gathers: int = 0
    all_gather_bytes: int = 0
    all_gather_s: float = 0.0  # issuing the all-gathers and waiting for them
    reduce_scatters: int = 0
    reduce_scatter_bytes: int = 0
    reduce_scatter_s: float = 0.0  # issuing the reduce-scatters and waiting for them
    backward_passes: int = 0  # backward passes that reached FSDP's post-backward
    synced_backwards: int = 0  # of those, passes that reduce-scattered (gradient sync on)
    host_blocking: bool = True  # the times are waits (CPU); False: issue time only (GPU streams)

    @property
    def exposed_s(self) -> float:
        return self.all_gather_s + self.reduce_scatter_s if self.host_blocking else 0.0


@dataclass
class CollectiveSite:
    """Collectives the user's code called from one source line."""

    location: Location
    op: str  # all_reduce, barrier, all_gather, ...
    calls: int = 0
    total_s: float = 0.0  # wall time inside the call (a blocking call includes waiting for peers)
    bytes: int = 0
    in_measured_s: float = 0.0  # inside measured steps
    steps: dict[str, float] = field(default_factory=dict)  # step index -> seconds (measured steps)
    text: str = ""


@dataclass
class CommSize:
    bytes: int
    times_s: list[float] = field(default_factory=list)  # one per repeat: the slowest rank's time
    algbw_gbps: float | None = None  # bytes / median time
    busbw_gbps: float | None = None  # algbw * 2(n-1)/n (nccl-tests' all-reduce bus bandwidth)
    spread: float | None = None  # (max - min) / median of the repeats


@dataclass
class LinkInfo:
    """The path between the ranks and what it should carry."""

    kind: str  # nvlink | pcie | shm | net-socket | net-ib | loopback-tcp | unknown
    description: str  # "PCIe between NUMA nodes (SYS)", "loopback TCP on one host"
    expected_gbps: float | None = None  # what this path should give (bus bandwidth)
    expected_source: str = ""  # where that number comes from
    topology_level: str | None = None  # nvidia-smi topo -m: NV#, PIX, PXB, PHB, NODE, SYS
    transport: str | None = None  # what NCCL chose (P2P/IPC, SHM, NET/Socket, NET/IB)
    crippling_env: dict[str, str] = field(default_factory=dict)  # NCCL_* settings that slow it
    wsl2: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class CommResult:
    """An all-reduce bandwidth table on this machine: `torchdoctor comm`, or the short check a
    multi-rank `run` makes after the script."""

    backend: str
    world_size: int
    sizes: list[CommSize] = field(default_factory=list)
    latency_s: float | None = None  # a small all-reduce's median time
    warmup: int = 1
    repeats: int = 3
    link: LinkInfo | None = None
    seconds: float = 0.0  # the whole check
    simulated_link_gbps: float | None = None
    note: str = ""  # why it is partial, when it is
    schema_version: int = COMM_SCHEMA_VERSION

    def at(self, nbytes: int) -> CommSize | None:
        """The measured size closest to `nbytes` (in ratio)."""
        measured = [s for s in self.sizes if s.busbw_gbps is not None and s.bytes > 0]
        return min(measured, key=lambda s: abs((s.bytes / max(nbytes, 1)) - 1.0), default=None)

    def save(self, path) -> None:
        write_json(path, self)

    @classmethod
    def load(cls, path) -> "CommResult":
        return read_json(path, cls, COMM_SCHEMA_VERSION)


@dataclass
class OneRankBaseline:
    """One rank alone, measured: the same script, arguments, limits and threads per rank,
    launched with one rank, so the scaling verdict (TD606) compares two measurements instead
    of a measurement and a model."""

    source: str  # how it was measured, as the report says it
    steps: int  # its measured steps
    step_s: float
    steps_per_s: float
    samples_per_s: float | None
    relative_sem: float | None  # its window-to-window noise (rules/noise.py)
    samples_per_step: float | None = None  # its batch (the job's per-rank batch should match)
    seconds: float = 0.0  # what measuring it cost, wall time
    run_dir: str = ""  # its record, relative to the job's run directory


@dataclass
class DistributedInfo:
    """One rank's distributed measurements."""

    identity: RankIdentity
    ddp: list[DdpModel] = field(default_factory=list)
    ddp_steps: list[DdpStep] = field(default_factory=list)
    no_sync: list[NoSyncUse] = field(default_factory=list)
    collectives: list[CollectiveSite] = field(default_factory=list)
    comm: CommResult | None = None
    notes: list[str] = field(default_factory=list)
    one_rank: OneRankBaseline | None = None  # merged runs: one rank alone, when it was measured
    fsdp: list[FsdpUnit] = field(default_factory=list)  # schema 7
    fsdp_steps: list[FsdpStep] = field(default_factory=list)
    fsdp_backward_location: Location | None = None  # the backward() whose pass first reduce-scattered
