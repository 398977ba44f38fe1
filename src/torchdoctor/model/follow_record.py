"""What following a whole job measured (`torchdoctor run --follow`): the per-step timeline, the
probe windows sampled along the way, the changes found in the series, and the black box written
when the run crashed, was stopped or stalled. Plain data, part of the RunRecord (schema 9; per rank: schema 10).

Times are seconds since the run started; steps are the session's 1-based step numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchdoctor.model.location import Location
from torchdoctor.model.untrusted import Count, Seconds

# kinds of change (ChangePoint.kind)
STEP_TIME, DATA_WAIT, MEMORY, STRAGGLER = "step-time", "data-wait", "memory", "straggler"
# why a probe window ran (ProbeWindow.reason)
AT_START, PERIODIC, AFTER_CHANGE = "start", "periodic", "change"


@dataclass
class TimelinePoint:
    """One step's cheap figures, or the mean of `span` consecutive steps once the timeline thinned
    its older part (each field then the mean over those steps; `mem_bytes` and `gpu_mem_bytes` their
    maximum)."""

    step: Count  # the (first) step it stands for
    t: Seconds  # when that step ended
    step_s: Seconds
    data_wait_s: Seconds = 0.0
    # backward + optimizer + zero_grad: the step's own work the hooks time; None for a step that did not time
    # them (StepSample.split_timed), or for points merged from such steps alone
    compute_s: Seconds | None = 0.0
    samples: Count | None = None  # batch rows per step
    mem_bytes: Count | None = None  # memory high-water mark (CUDA max allocated, else the process's max RSS)
    # the share of the wall time the training thread was ready to run but had no CPU (other processes
    # had them), over the follower's tick the step ended in; None where not measurable (not Linux)
    cpu_wait: float | None = None
    # the step's wait in collectives (DDP's all-reduce not hidden by backward, FSDP's exposed
    # communication, the collectives the script calls); None where none was measured (schema 10)
    comm_wait_s: Seconds | None = None
    # the run's GPU as NVML saw it at the follower's latest tick before the step ended (the sample of the
    # device this process uses: a rank its own): utilization in percent, power in watts, memory used on
    # the device in bytes (every process's); None where not measured (no CUDA, no NVML), never a guess
    # (schema 10)
    gpu_util: float | None = None
    gpu_power_w: float | None = None
    gpu_mem_bytes: Count | None = None
    span: Count = 1  # steps this point stands for
    sampled: bool = False  # a costly probe window ran in it (left out of the change tests)
    warmup: bool = False


@dataclass
class WindowLine:
    """A line the line sampler saw in a window, with the time its samples stand for."""

    location: Location
    seconds: Seconds
    samples: Count
    loading_samples: Count = 0  # taken while the training thread was inside a DataLoader's next()
    text: str = ""
    library: str | None = None
    called_from: Location | None = None


@dataclass
class ProbeWindow:
    """A window of costly probes, with what it found at its lines (the line sampler's profile)."""

    reason: str  # AT_START | PERIODIC | AFTER_CHANGE
    first_step: Count
    last_step: Count
    start_t: Seconds
    end_t: Seconds
    probes: list[str] = field(default_factory=list)
    lines: list[WindowLine] = field(default_factory=list)  # the line sampler's, most time first
    sampled_s: Seconds = 0.0  # the time the line samples stand for
    samples: Count = 0
    change: int | None = None  # the ChangePoint (index in FollowRecord.changes) it was sampled after


# What a memory creep was measured on (ChangePoint.memory_measure)
CUDA_ALLOCATED = "cuda-allocated"  # torch.cuda.max_memory_allocated: the tensors' high-water mark
HEAP_IN_USE = "heap-in-use"  # glibc's mallinfo2: malloc'd and not freed (the allocator's free lists left out)
RSS_HIGH_WATER = "rss-high-water"  # the resident set's high-water mark: the allocator's kept memory too
MEMORY_MEASURES = (CUDA_ALLOCATED, HEAP_IN_USE, RSS_HIGH_WATER)


@dataclass
class Level:
    """A series' level over a stretch of steps: median and robust spread (1.4826 x MAD)."""

    median: float
    spread: float
    steps: Count


@dataclass
class ChangePoint:
    kind: str  # STEP_TIME | DATA_WAIT | MEMORY | STRAGGLER
    step: Count  # the first step after the change
    t: Seconds  # when that step began
    detected_step: Count  # the step at which the test saw it (later: it needs steps after it)
    before: Level
    after: Level
    threshold: float  # the shift the test needed, from the spread before it (same unit as the levels)
    # every timeline figure's median before and after, by name ("step_s", "data_wait_s", "compute_s",
    # "samples_per_s"): what changed in the measurements at that point
    figures_before: dict[str, float] = field(default_factory=dict)
    figures_after: dict[str, float] = field(default_factory=dict)
    limit_bytes: Count | None = None  # MEMORY: the limit it creeps toward
    bytes_per_s: float | None = None  # MEMORY: the high-water mark's growth rate
    # MEMORY: what grew (MEMORY_MEASURES); None in a record written before it was kept: the high-water mark
    memory_measure: str | None = None
    window: int | None = None  # index of the ProbeWindow sampled right after it
    # STRAGGLER: the rank that became the one the others wait for; its levels are its own time per step
    # (the step less its wait in collectives) less the other ranks' median, before and after (schema 10)
    rank: int | None = None


@dataclass
class StackFrame:
    path: str
    line: int
    function: str
    text: str = ""
    library: str | None = None  # an installed package's frame, not the user's


@dataclass
class ThreadStack:
    name: str
    ident: int
    main: bool
    daemon: bool
    frames: list[StackFrame] = field(default_factory=list)  # outermost first, as a traceback


@dataclass
class BlackBox:
    """What was written when the run ended badly: why, where each thread was, the last steps."""

    reason: str  # "exception" | "signal" | "stall"
    message: str  # one line: what happened
    step: Count  # the last step that completed
    t: Seconds
    where: Location | None = None  # the training thread's innermost user line
    threads: list[ThreadStack] = field(default_factory=list)
    last_points: list[TimelinePoint] = field(default_factory=list)
    stall_s: Seconds | None = None  # "stall": how long no step had finished, and the limit it passed
    stall_limit_s: Seconds | None = None
    rank: int | None = None  # a multi-rank run: the rank whose box it is (schema 10)
    # what the training thread waits in for the other ranks, read from its stack: a torch.distributed
    # collective (`all_reduce() at train.py:42`) or a backward() whose gradient all-reduce waits in it;
    # None when it waits in none (schema 10)
    waiting_in: str | None = None


@dataclass
class BlackBoxFile:
    """RUN_DIR/blackbox.json (a rank's RUN_DIR/rank-K/blackbox.json): the black box on its own, written the
    moment it is kept, so what watches the run (a followed job's launcher, its exporters) has it then and
    not only once record.json is written at the end. `schema_version` is the RunRecord's."""

    schema_version: int
    blackbox: BlackBox


@dataclass
class FollowRecord:
    timeline_file: str = "timeline.jsonl"
    every_s: Seconds = 10.0  # the timeline is appended (and flushed) this often
    steps: Count = 0  # steps seen in all
    steps_dropped: Count = 0  # of the record's `steps`: the middle of a long job (the timeline has them all)
    points: list[TimelinePoint] = field(default_factory=list)  # the (thinned) series, as the timeline holds it
    thinned_to: Count = 1  # the largest span of an older point
    windows: list[ProbeWindow] = field(default_factory=list)
    changes: list[ChangePoint] = field(default_factory=list)
    blackbox: BlackBox | None = None
    window_share: float = 0.02  # the bound: later windows' time at most this share of the run's
    windows_s: Seconds = 0.0  # time spent in windows after the start's
    windows_skipped: Count = 0  # windows not opened, the bound spent
    thread_cpu_s: Seconds = 0.0  # CPU time of the follower's own thread (it holds the GIL while it works)
    memory_limit_bytes: Count | None = None
    exports: list[str] = field(default_factory=list)  # where the figures were also sent
    live: bool = False  # written while the run was going (live.json): not the run's final record


def rank_message(message: str, rank: int | None) -> str:
    """An event's line with the rank it is of in front (`rank 1: ...`), once; as it is without a rank."""
    if rank is None or message.startswith(f"rank {rank}: "):
        return message
    return f"rank {rank}: {message}"
