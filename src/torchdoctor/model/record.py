"""The RunRecord: everything a run measured, as plain typed data.

Probes write it, rules read it, and it is saved as `record.json` so a report can be
re-made without re-running. Times are seconds; timestamps are seconds since run start.
Bump SCHEMA_VERSION whenever a serialized shape changes; OLDEST_READABLE_SCHEMA says how far
back a record still loads (later versions only added fields with defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchdoctor.model.compile_record import CompileInfo
from torchdoctor.model.follow_record import BlackBox, FollowRecord
from torchdoctor.model.distributed_record import CollectiveSite, DdpStep, DistributedInfo, FsdpStep
from torchdoctor.model.location import Location
from torchdoctor.model.memory_record import BatchScaling, MemoryBreakdown
from torchdoctor.model.serialize import read_json, write_json
from torchdoctor.model.untrusted import Count, Seconds
from torchdoctor.model.trace_summary import TraceSummary

# 2: knobs, loader_only, source_files, static_findings
# 3: trace (the profiler window's analysis), loader epoch_start_steps and wait_cpu_s
# 4: step_source, backward_calls, ended_by, startup_s, loop_location; closure_calls; unfinished_step;
#    phase occurrences; placement, library and text of calls and lines; functions_seen; contention
# 5: memory (the breakdown, an out-of-memory failure), batch_scaling (`torchdoctor memory`);
#    distributed (one rank's DDP, collectives, communication check), ranks (a merged multi-rank run)
# 6: OpSite.fp32_matmul_ops_cuda (TD402's line); DispatchSample.loops (TD301 by loop, not by line); ApiCall.loop_line; LineHits.called_from; StaticFinding.reached
# 7: compile (torch.compile: compile events, recompiles, graph breaks, graphs per step); distributed.fsdp
# 8: the doctor's own cost: StepSample.doctor_s, .probes, .partial (time inside the doctor's hooks in the
#    step, the window probes that ran in it, those stopped partway); doctor_cost (DoctorCost: per probe, its
#    steps, partial steps, budget and measured cost; the hooks' time per unmeasured step; the first step's ratio);
#    LoaderStats.cpu_timed_wait_s (the CPU time in next() is read on a share of the batches)
# 9: follow (`run --follow`: the timeline, probe windows along the run, changes found, the black box)
# 10: following per rank (`run --follow --nproc-per-node N`): TimelinePoint.comm_wait_s (the step's wait in
#     collectives), ChangePoint.rank (a rank that became a straggler, kind "straggler"), BlackBox.rank, and
#     RankView.blackbox (every rank's black box in a merged run), TimelinePoint.gpu_util, .gpu_power_w,
#     .gpu_mem_bytes (the GPU of the process, rank by rank, as NVML saw it)
#     and OptimizerInfo.implementation (the update path the first step ran: for-loop | foreach | fused, as torch
#     resolved it), .fused_available (torch offers fused kernels for this optimizer and these parameters),
#     .param_devices; CompileInfo.graph_calls and .compiled_calls count training only (evaluation apart:
#     CompileInfo.eval_graph_calls); RunRecord.sources_prefer_cuda; DispatchSample.eval_sample_cut (additive,
#     unreleased: a record without it reads as uncut); StepSample.split_timed (additive: a record without it
#     timed every step's split)
SCHEMA_VERSION = 10
OLDEST_READABLE_SCHEMA = 1


@dataclass
class RunInfo:
    script: str
    argv: list[str]
    cwd: str
    started_at: str  # ISO 8601, UTC
    torchdoctor_version: str
    warmup: Count
    steps_requested: Count
    max_seconds: Seconds
    wall_s: Seconds = 0.0
    # one of run/outcome.py STATUSES: completed | step-limit | time-limit | exited | interrupted | crashed
    status: str = "completed"
    exit_code: int = 0
    error: str | None = None  # traceback text when the script raised
    knobs: dict[str, str] = field(default_factory=dict)
    step_source: str | None = None  # what closed a step: "optimizer", "backward" (hand-written updates), None
    backward_calls: Count = 0  # in the whole run
    ended_by: str | None = None  # how the run ended when torchdoctor had to enforce a stop
    startup_s: Seconds | None = None  # run start to the first training activity (loader, zero_grad, backward)
    loop_location: Location | None = None  # where the first step's step() (or backward()) was called
    training_loops: list[Location] = field(default_factory=list)  # loops around that call (at their header lines)


# The step figures a long run times in some steps only (StepSample.split_timed)
SPLIT_FIELDS = frozenset({"backward_s", "optimizer_s", "zero_grad_s"})


@dataclass(slots=True)  # one made every step of a run, kept to its end: slots are a fifth of a dict's memory
class StepSample:
    """One optimizer step: the interval from the previous step's end to this one's."""

    index: Count  # 1-based optimizer step number, warmup steps included
    start: Seconds
    end: Seconds
    warmup: bool
    sampled: bool  # ran under the dispatch sampler: excluded from timing statistics
    micro_batches: Count = 0  # backward() calls in the interval
    closure_calls: Count = 0  # closures an optimizer.step(closure) evaluated (LBFGS, Lightning)
    samples: Count | None = None  # batch rows delivered by DataLoaders in the interval
    data_wait_s: Seconds = 0.0
    backward_s: Seconds = 0.0
    optimizer_s: Seconds = 0.0
    zero_grad_s: Seconds = 0.0
    eval_s: Seconds = 0.0
    checkpoint_s: Seconds = 0.0
    logging_s: Seconds = 0.0
    gpu_s: Seconds | None = None  # CUDA-event time between step boundaries, when on CUDA
    batch_shape: list[int] | None = None  # the step's (last) training batch's first tensor: growth shows here
    doctor_s: Seconds = 0.0  # time inside the doctor's own hooks in this step (measured there; 0: older records)
    probes: list[str] = field(default_factory=list)  # window probes that ran in it (run/budget.py names)
    partial: list[str] = field(default_factory=list)  # of those, the ones stopped partway (budget spent)
    # SPLIT_FIELDS were timed (False: a long run's "bare" step, run/session.py SPLIT_EVERY: they read 0 and
    # say nothing; every other figure was measured)
    split_timed: bool = True

    @property
    def duration_s(self) -> float:
        return self.end - self.start


@dataclass
class LoaderStats:
    loader_id: int
    created_at: Location | None
    iterated_at: Location | None
    batch_size: Count | None
    num_workers: Count
    pin_memory: bool
    prefetch_factor: int | None
    persistent_workers: bool
    drop_last: bool
    dataset_len: Count | None
    iterator_starts_s: list[Seconds] = field(default_factory=list)  # one per __iter__ call
    first_batch_waits_s: list[Seconds] = field(default_factory=list)  # first next() per epoch
    # optimizer steps done when each __iter__ ran: step n+1 is the first of that epoch
    epoch_start_steps: list[int] = field(default_factory=list)
    batches: Count = 0
    wait_total_s: Seconds = 0.0
    # CPU time of the training thread inside next(): with num_workers=0 this tells loading
    # that computes (needs cores) from loading that waits on storage (workers overlap it freely)
    wait_cpu_s: Seconds | None = None  # None: not measured (records before schema 3)
    # the wall time of the batches whose CPU time was read (a share of them, to keep next() cheap);
    # None: every batch's was (records before schema 8)
    cpu_timed_wait_s: Seconds | None = None
    batches_in_eval: Count = 0
    batches_to_cuda: Count = 0  # batches later copied to CUDA (seen by the sampler)
    # next() in the sampled steps: its wall time, and how much of it the loading thread spent
    # ready to run but without a CPU (other processes): tells starvation from waiting on storage
    sampled_wait_s: Seconds = 0.0
    sampled_runqueue_s: Seconds | None = None
    dataset_type: str | None = None  # module.qualname of loader.dataset (None: records before schema 5)
    sampler_len: int | None = None  # rows its sampler yields per epoch (a DistributedSampler: this rank's shard)
    sampler_type: str | None = None  # the sampler's class name

    @property
    def runqueue_share(self) -> float | None:
        if self.sampled_runqueue_s is None or self.sampled_wait_s <= 0:
            return None
        return min(1.0, self.sampled_runqueue_s / self.sampled_wait_s)


@dataclass
class OpSite:
    """Aten ops issued from one user source line during the sampled steps."""

    location: Location
    ops: Count  # over all sampled steps
    internal_ops: Count  # of which issued by torch library code called from this line
    time_s: Seconds  # op time plus the Python time just before each op, probe cost removed
    op_counts: dict[str, int] = field(default_factory=dict)
    devices: list[str] = field(default_factory=list)
    median_numel: int = 0
    backward_s: Seconds = 0.0  # backward time of this line's autograd nodes, over the backward windows
    backward_nodes: Count = 0
    param_updates: int = 0  # in-place ops on parameters (a hand-written optimizer)
    entries: Count = 0  # times the ops came here from another line: how often the line ran (≈)
    library: str | None = None  # the installed package the line belongs to; None: the user's code
    text: str = ""  # the source line
    fp32_matmul_ops_cuda: int = 0  # of its ops, fp32 matmul/conv on CUDA outside autocast (TD402's line)


@dataclass
class LoopSite:
    """Aten ops issued inside one Python loop of the user's code during the sampled steps:
    the innermost loop around each op, found walking out from the op's innermost user frame
    (so a module called once per time step counts in the caller's loop)."""

    location: Location  # the loop's busiest line in its own function (a call in its body, or the op itself)
    header_line: int  # the `for`/`while` line
    ops: int  # over all sampled steps
    internal_ops: int  # of which issued by torch library code the loop's lines called
    time_s: float  # op time plus the Python time just before each op, probe cost removed
    iterations: int  # loop iterations seen, over all sampled steps
    runs: int  # times the loop was entered
    param_uses: int = 0  # parameter tensors read or written by its ops
    params: int = 0  # distinct parameter tensors among them: as many as uses means a stack of layers
    inplace_writes: int = 0  # in-place ops the loop's own lines issued (`t.copy_(...)`, `t.add_(...)`)
    written_tensors: int = 0  # distinct tensors they wrote: one per turn is a per-tensor update
    op_counts: dict[str, int] = field(default_factory=dict)
    median_numel: int = 0
    lines: list[Location] = field(default_factory=list)  # the op sites inside it (callees' lines too)
    library: str | None = None  # the installed package the loop belongs to; None: the user's code


@dataclass
class ApiCall:
    """A host-sync, data-dependent or transfer call seen in a sampled window."""

    location: Location
    api: str  # e.g. "Tensor.item", "torch.nonzero", "Tensor.to"
    kind: str  # host-sync | data-dependent | transfer-h2d | transfer-d2h | explicit-sync
    phase: str  # train | eval
    count: Count
    device: str  # device of the tensor involved ("cpu", "cuda:0")
    detail: dict[str, Any] = field(default_factory=dict)  # e.g. pinned, non_blocking, bytes
    # "device": the tensor is (or in a GPU run would be) on the GPU; "host": it stays on the
    # host even in a GPU run (an index made without device=, data after .cpu()): no sync
    placement: str = "device"
    library: str | None = None  # the installed package the line belongs to; None: the user's code
    text: str = ""  # the source line
    loop_line: int | None = None  # header of a loop around the call in its own function (per item, not once)


@dataclass
class DispatchSample:
    sampled_steps: Count = 0
    sampled_step_s: list[Seconds] = field(default_factory=list)
    unsampled_median_step_s: Seconds | None = None
    total_ops: Count = 0
    probe_cost_per_op_s: Seconds = 0.0
    eval_batches_sampled: int = 0
    eval_sample_cut: bool = False  # the first evaluation's sample ended at its time bound, before the evaluation did
    backward_windows: int = 0  # steps whose backward was timed per line
    sites: list[OpSite] = field(default_factory=list)
    loops: list[LoopSite] = field(default_factory=list)
    api_calls: list[ApiCall] = field(default_factory=list)
    matmul_flops_per_op: float | None = None  # mean FLOPs of mm/addmm/bmm/conv ops
    fp32_matmul_ops_cuda: int = 0  # fp32 matmul/conv ops on CUDA outside autocast
    autocast_seen: bool = False


@dataclass
class LineHits:
    location: Location
    samples: Count
    text: str = ""  # the source line, read when the run ended
    library: str | None = None  # the installed package the line belongs to; None: the user's code
    seconds: Seconds = 0.0  # the wall time its samples stand for (each weighted by the time since the last)
    called_from: Location | None = None  # a library line: the user's own line that called into the library
    loading_samples: Count = 0  # of its samples, those taken inside a DataLoader's next() (loading a batch)
    eval_samples: Count = 0  # of its samples, those taken inside an evaluation (a model's forward runs in both)


@dataclass
class LineProfile:
    """Stack samples of the main thread during measured steps, by innermost user line."""

    interval_s: Seconds = 0.005
    total_samples: Count = 0
    lines: list[LineHits] = field(default_factory=list)
    total_s: Seconds = 0.0  # wall time the samples stand for (0: a record from before weights)
    method: str = "thread"  # "signal": a timer interrupts the training thread; "thread": a sampling thread

    def share(self, path: str, line: int) -> float | None:
        """The line's share of the measured steps' time (by sample weight, or count in old records)."""
        if not self.total_samples:
            return None
        same = [h for h in self.lines if (h.location.path, h.location.line) == (path, line)]
        if self.total_s > 0:
            return sum(h.seconds for h in same) / self.total_s
        return sum(h.samples for h in same) / self.total_samples

    def line_share(self, hits: LineHits) -> float:
        return hits.seconds / self.total_s if self.total_s > 0 else hits.samples / max(1, self.total_samples)


@dataclass
class PhaseOccurrence:
    after_step: Count  # optimizer steps completed when it began
    t: Seconds  # when it began, seconds since the run started
    seconds: Seconds


@dataclass
class PhaseStats:
    """Time in one kind of non-training work from one call site."""

    kind: str  # eval | checkpoint | logging
    location: Location | None  # the training-loop line that entered it (falls back to inner_location)
    calls: Count = 0
    total_s: Seconds = 0.0
    in_measured_steps_s: Seconds = 0.0  # inside measured steps that closed
    calls_in_measured: Count = 0
    inner_location: Location | None = None  # the first user line inside it (model.eval(), print)
    occurrences: list[PhaseOccurrence] = field(default_factory=list)  # the first 500


@dataclass
class OptimizerInfo:
    class_name: str
    param_tensors: int
    params: int
    foreach: bool | None  # as configured: None means PyTorch picks
    fused: bool | None
    created_at: Location | None
    step_calls: int = 0
    step_location: Location | None = None
    zero_grad_calls: int = 0
    zero_grad_set_to_none: bool | None = None
    zero_grad_location: Location | None = None
    zero_grad_total_s: float = 0.0
    closure: Location | None = None  # the closure passed to step(closure): where it is defined
    # The update path the first step ran, as torch resolves `foreach`/`fused` (None: PyTorch picks) for these
    # parameters: "for-loop" (single-tensor), "foreach" or "fused"; None: not a torch.optim update (unknown)
    implementation: str | None = None
    fused_available: bool | None = None  # torch has fused kernels for this optimizer, these parameters and device
    param_devices: list[str] = field(default_factory=list)  # device types of the parameters ("cpu", "cuda")


@dataclass
class CudaMemory:
    device_total_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    alloc_retries: int
    ooms: int
    inactive_split_bytes: int = 0


@dataclass
class NvmlSample:
    t: float
    gpu_util: float | None = None  # percent
    mem_util: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    throttle_reasons: list[str] = field(default_factory=list)


@dataclass
class NvmlRecord:
    available: bool
    reason: str = ""  # why not, when not available
    device_index: int | None = None
    device_name: str | None = None
    interval_s: float = 0.1
    samples: list[NvmlSample] = field(default_factory=list)

    def mean(self, attr: str) -> float | None:
        """Mean of one sample field over the samples that have it (None where none do)."""
        values = [v for v in (getattr(s, attr) for s in self.samples) if v is not None]
        return sum(values) / len(values) if values else None


@dataclass
class Environment:
    python: str
    platform: str
    torch: str
    cuda_available: bool
    cuda_used: bool = False
    cuda_version: str | None = None
    device_name: str | None = None
    compute_capability: list[int] | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    float32_matmul_precision: str | None = None
    cudnn_benchmark: bool | None = None
    num_threads: int | None = None
    cpu_count: int | None = None
    env_vars: dict[str, str] = field(default_factory=dict)


@dataclass
class Contention:
    """How busy the machine was during the measured steps (None: not measurable here)."""

    window_s: Seconds | None = None  # wall time covered by the readings
    process_cpu_s: Seconds | None = None  # CPU time of this process (all its threads)
    thread_cpu_s: Seconds | None = None  # the training thread on a CPU
    thread_runqueue_s: Seconds | None = None  # the training thread ready to run, waiting for a CPU
    involuntary_switches: Count | None = None  # of the training thread
    load_start: float | None = None  # 1-minute load average
    load_end: float | None = None
    cpus: int | None = None  # CPUs this process may run on

    @property
    def runqueue_share(self) -> float | None:
        if self.thread_runqueue_s is None or not self.window_s:
            return None
        return self.thread_runqueue_s / self.window_s


@dataclass
class ProbeNote:
    """What a probe could not do, and why: shown in the report, never hidden."""

    probe: str
    message: str


@dataclass
class KnobOutcome:
    """One `--set KNOB=VALUE` of this run: whether it took effect, and where or why not."""

    name: str
    value: str
    applied: bool = False
    detail: str = ""  # "applied to 2 DataLoaders (num_workers 0 -> 4)" or why it could not apply


@dataclass
class LoaderOnlyStats:
    """The training DataLoader iterated alone (no model): the input pipeline's ceiling."""

    batches: Count
    seconds: Seconds
    samples: Count | None = None
    location: Location | None = None  # where the loader was iterated


@dataclass
class StaticFinding:
    """What `torchdoctor lint` said about a file this run executed, kept with the run so a
    re-rendered report does not depend on the source as it is later."""

    code: str
    slug: str
    severity: str
    path: str  # absolute, for matching with runtime locations
    line: int
    message: str
    reached: bool = True  # False: in a function the training loop calls that the bounded run did not reach


@dataclass
class LossTrace:
    """The values the script passed to `backward()`, in call order: the numerics guard's evidence
    (compare, tune). Read once, when the run ended: no sync inside the steps."""

    steps: list[int] = field(default_factory=list)  # the optimizer step each backward belonged to (1-based)
    values: list[str] = field(default_factory=list)  # float.hex of each value: exact, NaN and inf included
    dtype: str = ""
    dropped: int = 0  # backward calls past the first MAX_LOSSES, or not a one-element tensor


@dataclass
class ProbeCost:
    """What one costly probe cost the run: the steps it ran in and how much slower they were."""

    probe: str  # run/budget.py name: memory, sampler, backward_timer, line_sampler, profiler, eval_sampler
    label: str  # as reports print it ("op sampler")
    steps: list[int] = field(default_factory=list)  # steps it ran in, whole or partly
    partial: list[int] = field(default_factory=list)  # steps it stopped partway, its budget spent
    skipped: list[int] = field(default_factory=list)  # steps of its window left clean: run budget spent
    active_s: Seconds = 0.0  # wall time the user's code ran under it
    # median over its steps of (step / median unmeasured step); None: no unmeasured step to compare with
    step_ratio: float | None = None
    added_s: float | None = None  # what it added in all, from its steps' excess over the unmeasured median
    budget_run_s: Seconds | None = None  # its budget across the run (active time); None: not budgeted
    budget_step_s: Seconds | None = None  # its budget within one step
    note: str = ""  # what it covered when partial ("1 of 20 closure evaluations"), what the ratio includes


@dataclass
class DoctorCost:
    """The doctor's own cost in this run, measured in it, so no number has to be guessed as the
    script's or the doctor's: the hooks in every step, the costly probes in their steps."""

    unmeasured_steps: Count = 0  # steps no costly probe ran in (warm-up and measured)
    hook_s_per_step: Seconds | None = None  # median time inside the hooks per such step (measured in the hooks)
    hook_s_p90: Seconds | None = None
    sampled_steps: Count = 0  # steps a costly probe ran in: left out of timings
    # of the unmeasured steps, those whose backward, optimizer and zero_grad went untimed (a long run's bare
    # steps, StepSample.split_timed): their hooks only counted and closed the step
    split_untimed_steps: Count = 0
    probes: list[ProbeCost] = field(default_factory=list)
    first_step_s: Seconds | None = None
    first_step_ratio: float | None = None  # step 1 / median unmeasured step (first-step work included)
    first_step_probes: list[str] = field(default_factory=list)  # probes that ran in step 1
    added_s: float | None = None  # the doctor's time added to the steps: hooks + probes' excess
    steps_s: Seconds = 0.0  # the steps' wall time, all of them
    install_s: Seconds = 0.0  # putting the probes in, before the script ran
    finish_s: Seconds = 0.0  # taking them out and summarising, after it (not in the script's wall time)
    method: str = ("hooks: time measured inside them, per step; a probe: its steps against the median "
                   "unmeasured step")


@dataclass
class RankView:
    """One rank of a merged multi-rank run, as the cross-rank rules compare it (the rank's
    full record stays in RUN_DIR/rank-K/record.json)."""

    rank: int
    host: str = ""
    status: str = "completed"
    exit_code: int = 0
    error: str | None = None
    ended_by: str | None = None
    wall_s: Seconds = 0.0
    epoch_t0: float = 0.0  # time.time() at the rank's t0: its steps on the ranks' common clock
    steps: list[StepSample] = field(default_factory=list)
    ddp_steps: list[DdpStep] = field(default_factory=list)
    fsdp_steps: list[FsdpStep] = field(default_factory=list)
    collectives: list[CollectiveSite] = field(default_factory=list)
    phases: list[PhaseStats] = field(default_factory=list)
    loader_location: Location | None = None  # where its training DataLoader was iterated
    top_lines: list[LineHits] = field(default_factory=list)  # its most sampled lines
    last_position: str | None = None  # the line its heartbeat last saw (a rank that hung)
    contention: Contention | None = None  # how much it waited for a CPU (ranks sharing too few cores)
    threads: int | None = None  # torch's intra-op threads in the rank
    cpus: int | None = None  # CPUs the rank may run on (affinity, cgroup quota)
    device_index: int | None = None  # the GPU it used (NVML's index), when it used one
    blackbox: BlackBox | None = None  # `run --follow`: the rank's black box, when its run ended badly (schema 10)

    @property
    def measured_steps(self) -> list[StepSample]:
        return [s for s in self.steps if not s.warmup and not s.sampled]


@dataclass
class RunRecord:
    run: RunInfo
    environment: Environment
    schema_version: int = SCHEMA_VERSION
    steps: list[StepSample] = field(default_factory=list)
    loaders: list[LoaderStats] = field(default_factory=list)
    dispatch: DispatchSample = field(default_factory=DispatchSample)
    line_profile: LineProfile = field(default_factory=LineProfile)
    phases: list[PhaseStats] = field(default_factory=list)
    optimizers: list[OptimizerInfo] = field(default_factory=list)
    cuda_memory: CudaMemory | None = None
    nvml: NvmlRecord | None = None
    trace_file: str | None = None  # Kineto trace, relative to the run directory
    trace: TraceSummary | None = None  # that trace analysed, so the report re-renders without it
    probe_notes: list[ProbeNote] = field(default_factory=list)
    knobs: list[KnobOutcome] = field(default_factory=list)  # changes applied for this run only
    loader_only: LoaderOnlyStats | None = None  # set by the `data=loader-only` measurement
    source_files: list[str] = field(default_factory=list)  # user files the run executed (absolute)
    static_findings: list[StaticFinding] = field(default_factory=list)  # lint of source_files
    # the source files mention CUDA: a script that uses a GPU when there is one (schema 10; None before)
    sources_prefer_cuda: bool | None = None  # the user's sources take CUDA when it is there (run/sources.py)
    unfinished_step: StepSample | None = None  # the interval open at the end, when no step completed
    # "path::qualname" of the user's functions seen running (stack samples): static findings
    # elsewhere in those files are left out as code that never ran
    functions_seen: list[str] = field(default_factory=list)
    contention: Contention | None = None
    memory: MemoryBreakdown | None = None  # what filled memory in the accounted steps, or at a failure
    batch_scaling: BatchScaling | None = None  # `torchdoctor memory`: trials at several batch sizes
    distributed: DistributedInfo | None = None  # this rank's, in a multi-rank run (rank 0's when merged)
    ranks: list[RankView] = field(default_factory=list)  # every rank, in a merged multi-rank run
    losses: LossTrace | None = None  # what the script passed to backward(), for the numerics guard
    compile: CompileInfo | None = None  # torch.compile in this run (None: the script did not compile)
    doctor_cost: DoctorCost | None = None  # what the doctor's own probes cost this run (schema 8)
    follow: FollowRecord | None = None  # `run --follow`: the whole job (schema 9)

    @property
    def measured_steps(self) -> list[StepSample]:
        """Steps that count for timing: after warmup and not slowed by the sampler."""
        return [s for s in self.steps if not s.warmup and not s.sampled]

    def save(self, path: Path) -> None:
        write_json(path, self)

    @classmethod
    def load(cls, path: Path) -> "RunRecord":
        record = read_json(path, cls, SCHEMA_VERSION, oldest=OLDEST_READABLE_SCHEMA, check=_problem)
        record.schema_version = SCHEMA_VERSION  # upgraded in memory: older shapes only lack fields
        return record


def _problem(record: RunRecord) -> str | None:
    """What the types cannot say is wrong with a loaded record: a step that ends before it starts."""
    groups = [("$.steps", record.steps), ("$.unfinished_step", [record.unfinished_step] if record.unfinished_step else [])]
    groups += [(f"$.ranks[{i}].steps", view.steps) for i, view in enumerate(record.ranks)]
    for where, steps in groups:
        for i, step in enumerate(steps):
            if step.end < step.start:
                at = where if where.endswith("step") else f"{where}[{i}]"
                return f"{at}: the step ends ({step.end:g} s) before it starts ({step.start:g} s)"
    return None
