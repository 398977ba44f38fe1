"""What a run measured about memory, as plain typed data inside the RunRecord (schema 5).

`MemoryBreakdown` comes from every `run`: the accounted steps' peak split into parts, the
modules that hold the most activations, the largest live allocations, the timeline of the
peak step, and on CUDA the allocator's device-level figures; `OomEvent` when the script ran
out of memory. `BatchScaling` comes from `torchdoctor memory`: one trial per batch size, the
fit `peak(b) = fixed + b * per_sample`, and the largest batch that fits.

Bytes are bytes of tensor storage. Parts are keyed by the names in `PARTS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchdoctor.model.location import Location

PARAMETERS, GRADIENTS, OPTIMIZER_STATES = "parameters", "gradients", "optimizer_states"
ACTIVATIONS, TEMPORARIES, OTHER = "activations", "temporaries", "other"
# other: tensors alive before the step that are none of the first three (buffers, a batch
# made in a worker process, a wrapper's gradient buckets, tensors the script keeps)
PARTS = (PARAMETERS, GRADIENTS, OPTIMIZER_STATES, ACTIVATIONS, TEMPORARIES, OTHER)
# Where a step's peak can fall: at the end of forward (activations), in backward (activations
# still held while gradients and communication buffers appear) or in the optimizer step (its
# temporaries grow with the parameters). Each grows with the batch at its own rate: fitted apart,
# the largest decides (see rules/memory_fit.py).
FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
PHASES = (FORWARD, BACKWARD, OPTIMIZER)


@dataclass
class ModuleMemory:
    """Activations one module saved for backward in the peak step."""

    module: str  # qualified name in the model ("encoder.layers.3"); "" is the model itself
    kind: str  # class name
    saved_bytes: int  # by this module and every module inside it
    own_saved_bytes: int = 0  # by ops run directly in its forward
    input_bytes: int = 0  # its forward's tensor inputs: what checkpointing it would still keep
    calls: int = 0  # forward calls in the step
    container: str | None = None  # the ModuleList/Sequential it is an item of (a checkpointable block)
    container_size: int = 0  # items in that container, whether or not they ran before a failure


@dataclass
class LiveAllocation:
    """One tensor storage live at the peak (or at a failure)."""

    bytes: int
    part: str
    location: Location | None = None  # the user line that created it; None: before the step or inside autograd
    op: str = ""  # the aten op that created it
    shape: list[int] = field(default_factory=list)
    dtype: str = ""
    module: str | None = None  # the module whose forward was running


@dataclass
class MemoryPoint:
    """Live tensor bytes after the `event`-th allocation or free of the step."""

    event: int
    bytes: int


@dataclass
class StepMemory:
    """One accounted step."""

    step: int
    peak_bytes: int
    phase_peaks: dict[str, int] = field(default_factory=dict)
    parts: dict[str, int] = field(default_factory=dict)  # at the peak
    samples: int | None = None  # batch rows the step's DataLoaders delivered
    complete: bool = True  # False: the window opened inside this step (its start was not seen)


@dataclass
class ParallelMemory:
    """A data-parallel wrapper seen in the accounted step (TD604, DDP buckets)."""

    wrapper: str  # DataParallel | DistributedDataParallel
    replicas: int  # DataParallel's devices, DDP's world size
    parameter_bytes: int  # one replica of the model's parameters and buffers
    bucket_bytes: int = 0  # DDP's flat gradient buckets held besides the gradients
    gradient_as_bucket_view: bool | None = None
    location: Location | None = None  # where the wrapper was made, when known


@dataclass
class OomEvent:
    """The script ran out of memory: where, and what was live."""

    device: str  # cpu | cuda
    message: str  # the error's first line
    requested_bytes: int | None = None
    location: Location | None = None  # the user line whose op failed
    op: str = ""
    module: str | None = None
    phase: str = ""  # forward | backward | optimizer | "" (outside the accounted steps)
    step: int = 0  # the step that failed (1-based)
    batch_size: int | None = None  # rows of the batch being trained on, when known
    batch_basis: str = ""  # how it is known: the DataLoader's rows, or the model input's first dimension
    accounted: bool = False  # inside the accounting window: the parts are complete
    live_bytes: int | None = None  # tensor bytes live at the failure (the allocator's, on CUDA)
    parts: dict[str, int] = field(default_factory=dict)
    largest: list[LiveAllocation] = field(default_factory=list)
    modules: list[ModuleMemory] = field(default_factory=list)  # activations saved so far in the failing step
    device_total_bytes: int | None = None
    device_free_bytes: int | None = None
    reserved_unused_bytes: int | None = None
    limit: str = ""  # what limit was hit, when torchdoctor knows (RLIMIT_AS, a CUDA fraction)
    shape: list[int] = field(default_factory=list)  # the failing op's output, when the accounting saw the op
    dtype: str = ""
    input_shapes: list[list[int]] = field(default_factory=list)  # the failing op's tensor inputs
    batch_shape: list[int] | None = None  # the failing step's training batch (its first tensor)


@dataclass
class MemoryBreakdown:
    device: str  # cpu | cuda:0 | meta (an estimate)
    method: str  # one sentence: how it was measured
    steps: list[StepMemory] = field(default_factory=list)
    peak_step: int | None = None
    peak_bytes: int | None = None  # tensor bytes at the peak of the accounted steps
    parts: dict[str, int] = field(default_factory=dict)  # at that peak; they add up to peak_bytes
    phase_peaks: dict[str, int] = field(default_factory=dict)  # of the peak step
    batch_size: int | None = None  # rows in the peak step
    modules: list[ModuleMemory] = field(default_factory=list)  # most activations first
    largest: list[LiveAllocation] = field(default_factory=list)  # at the peak
    timeline: list[MemoryPoint] = field(default_factory=list)  # the peak step, downsampled
    timeline_events: int = 0  # allocations and frees in the peak step
    backward_event: int | None = None  # where the peak step's backward began
    optimizer_event: int | None = None  # where its optimizer step began
    # Device level (CUDA allocator): None on CPU, with the reason in device_missing
    device_total_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    reserved_unused_bytes: int | None = None  # reserved but unallocated at the reserved peak (fragmentation)
    outside_pytorch_bytes: int | None = None  # device memory used by others: CUDA context, NCCL, other processes
    device_missing: str | None = None
    parallel: ParallelMemory | None = None
    failure: OomEvent | None = None
    process_peak_rss_bytes: int | None = None  # CPU runs: the process's peak resident memory (all of it)
    notes: list[str] = field(default_factory=list)


# ---- torchdoctor memory: batch-size trials ------------------------------------------------
FITS, OOM, OVER_LIMIT, FAILED = "fits", "oom", "over-limit", "failed"


@dataclass
class BatchTrial:
    batch_size: int  # requested through the batch_size knob (the script's own for the first trial)
    outcome: str  # fits | oom | over-limit | failed
    samples: int | None = None  # rows per accounted step actually delivered (a small dataset caps it)
    peak_bytes: int | None = None  # accounted tensor peak
    phase_peaks: dict[str, int] = field(default_factory=dict)
    device_peak_bytes: int | None = None  # CUDA: allocator's peak reserved
    samples_per_s: float | None = None
    step_s: float | None = None
    relative_sem: float | None = None  # of the step time: the trial's own noise
    seconds: float = 0.0  # the trial's wall time
    run_dir: str = ""  # its run directory, relative to the memory directory
    detail: str = ""  # why it failed, or what limited it

    @property
    def fit_batch(self) -> int:
        """The batch size the fit and the search speak in: the loader's batch, or the rows
        delivered when a small dataset capped them. Gradient accumulation delivers several
        batches per step, and its peak still grows with one batch, not with their sum."""
        if not self.batch_size:
            return self.samples or 0
        if self.samples is not None and self.samples < self.batch_size:
            return self.samples
        return self.batch_size
    epoch_steps: int | None = None  # optimizer steps in one epoch at this size, when the loader has a length


@dataclass
class MemoryFit:
    """peak(b) = fixed + b * per_sample, fitted on the trials that measured a peak."""

    phase: str  # forward | backward | optimizer | peak
    fixed_bytes: float
    per_sample_bytes: float
    points: int
    max_error: float | None  # largest |fit - measured| / measured over the points; None with 2 points


@dataclass
class BatchScaling:
    user_batch_size: int | None
    capacity_bytes: int | None  # what a batch must fit in (the device, or --device-memory)
    capacity_source: str = ""
    headroom_bytes: int = 0  # kept free for what PyTorch does not see
    headroom_basis: str = ""
    trials: list[BatchTrial] = field(default_factory=list)
    fits: list[MemoryFit] = field(default_factory=list)
    predicted_max_batch: int | None = None  # from the fit of the first measured points
    verified_max_batch: int | None = None  # the largest batch a trial ran within capacity
    search_step: int = 1  # the search's resolution at the top
    loader: str = ""  # where the knob applied
    unreachable: str | None = None  # why the knob could not change the batch size
    nproc_per_node: int = 1
    notes: list[str] = field(default_factory=list)
    data_bound: int | None = None  # the most rows one step can take from the loader (dataset, or a rank's shard)
    data_bound_basis: str = ""  # where that bound comes from, as the report says it
    recommended_batch: int | None = None  # the fitting trial with the best samples/s (smallest within its noise)

    def trial(self, batch_size: int) -> BatchTrial | None:
        return next((t for t in self.trials if t.batch_size == batch_size), None)
