"""The series a report draws, as plain typed data inside the Report (DESIGN.md §3).

The diagnose stage fills them from the RunRecord (`diagnosis/figures.py`) or from several
runs (`compare/runs.py`); renderers only draw them. Long runs arrive here downsampled: a
point stands for a bucket of consecutive steps (or NVML samples) and says how many, so a
page can say what it shows. Source excerpts are the lines around each finding's location,
read when the report was made, with a note when the file changed or vanished since the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field



@dataclass
class TimeSplit:
    """Mean seconds per measured step, by where the host spent them (means add up to the mean step).

    Drawn as the stacked step-time bar; `findings` re-exports it for the run summary."""

    data_wait_s: float = 0.0
    forward_and_other_s: float = 0.0
    backward_s: float = 0.0
    optimizer_s: float = 0.0
    eval_s: float = 0.0
    checkpoint_s: float = 0.0
    logging_s: float = 0.0


WARMUP = "warmup"
SAMPLED = "sampled"
MEASURED = "measured"

EVAL = "eval"
CHECKPOINT = "checkpoint"
EPOCH = "epoch"


@dataclass
class StepPoint:
    """One optimizer step, or a bucket of `steps` consecutive steps of the same kind."""

    step: int  # the first step's 1-based index
    steps: int  # how many steps this point stands for
    kind: str  # warmup | sampled | measured
    time_s: float  # mean step time over the bucket
    time_min_s: float
    time_max_s: float
    data_wait_s: float  # mean data wait per step over the bucket
    data_wait_max_s: float


@dataclass
class StepMarker:
    """Something that happened during a step (or during `count` steps of one bucket)."""

    step: int
    kind: str  # eval | checkpoint | epoch
    count: int = 1
    seconds: float = 0.0  # time it took inside those steps (0 for an epoch start)


@dataclass
class StepSeries:
    points: list[StepPoint] = field(default_factory=list)
    markers: list[StepMarker] = field(default_factory=list)
    steps_total: int = 0  # steps in the run before downsampling
    bucket: int = 1  # steps per point (1: every step is drawn)
    data_wait_missing: str | None = None  # why no data wait could be measured, when none could


@dataclass
class GpuPoint:
    """NVML readings at one time (seconds since run start), or the mean over a bucket."""

    t: float
    util: float | None = None  # percent
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_used_bytes: int | None = None


@dataclass
class GpuSeries:
    device: str
    points: list[GpuPoint] = field(default_factory=list)
    samples_total: int = 0  # NVML samples before downsampling
    bucket: int = 1  # samples per point
    interval_s: float = 0.1
    power_limit_w: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_total_bytes: int | None = None
    measured_from_s: float | None = None  # the measured steps' time window, for shading
    measured_to_s: float | None = None


@dataclass
class MemoryPeaks:
    """What PyTorch's CUDA allocator reported for the whole run."""

    device_total_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int


@dataclass
class MemoryFigure:
    """What filled memory at the peak of the accounted steps (or when it ran out)."""

    title: str  # "peak of step 3 (batch of 64)" or "when it ran out (step 1)"
    peak_bytes: int
    parts: dict[str, int] = field(default_factory=dict)  # by memory_record.PARTS name
    timeline: list[tuple[int, int]] = field(default_factory=list)  # (allocation event, live bytes) in the step
    events: int = 0
    backward_event: int | None = None
    optimizer_event: int | None = None
    device_missing: str | None = None


@dataclass
class ScalingPoint:
    batch: int
    outcome: str  # fits | oom | over-limit | failed
    peak_bytes: int | None = None
    need_bytes: int | None = None  # what it needed of the device (reserved peak on CUDA)
    samples_per_s: float | None = None


@dataclass
class ScalingFigure:
    """`torchdoctor memory`: peak and samples/s against batch size, the fit and the capacity."""

    points: list[ScalingPoint] = field(default_factory=list)
    fits: list[tuple[str, float, float]] = field(default_factory=list)  # (phase, fixed bytes, bytes per sample)
    usable_bytes: int | None = None
    capacity_bytes: int | None = None
    user_batch: int | None = None
    predicted_max_batch: int | None = None
    verified_max_batch: int | None = None


@dataclass
class RunBar:
    """One run's throughput in a comparison, with the 95 % band from its own noise."""

    name: str
    measure: str  # samples/s | steps/s
    value: float
    low: float | None = None  # None: too few steps to measure noise
    high: float | None = None
    verdict: str = ""  # against the baseline, e.g. "2.21x samples/s (±2.0%)"; "baseline" for the first
    significant: bool = False
    ratio: float | None = None  # this run's value / the baseline's (None for the baseline)
    noise: float | None = None  # the 95 % band on that ratio (None: too few steps to tell)
    step_time_s: float | None = None
    split: TimeSplit | None = None


@dataclass
class Figures:
    steps: StepSeries | None = None
    gpu: GpuSeries | None = None
    gpu_missing: str | None = None  # why there is no GPU series
    memory_peaks: MemoryPeaks | None = None
    comparison: list[RunBar] = field(default_factory=list)
    memory: MemoryFigure | None = None
    scaling: ScalingFigure | None = None


@dataclass
class SourceExcerpt:
    """The lines around one finding's location, as the file read when the report was made."""

    path: str  # as in the finding's location
    line: int
    first_line: int = 1  # number of lines[0]
    lines: list[str] = field(default_factory=list)
    status: str = "ok"  # ok | changed | missing | unreadable | not-run-file
    note: str = ""  # shown on the card when status is not ok
    sha256: str | None = None  # of the file as read, so a later re-render can tell it changed
