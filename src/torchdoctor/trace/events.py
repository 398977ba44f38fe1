"""Kineto trace events: the typed view msgspec decodes, grouped by what they are.

A Kineto trace (`torch.profiler` → `export_chrome_trace`) is Chrome-trace JSON: a
`traceEvents` list of complete events (`"ph": "X"`) whose `cat` says what they are:

- host: `cpu_op` (aten ops, `args["External id"]`), `user_annotation` (`ProfilerStep#N`,
  `enumerate(DataLoader)#...__next__`, `Optimizer.step#SGD.step`, `record_function` labels),
  `python_function` (stack frames named `file.py(line): func`), `cuda_runtime`/`cuda_driver`
  (`cudaLaunchKernel`, `hipMemcpyAsync`, … with `args.correlation` and the launching op's
  `External id`);
- device: `kernel`, `gpu_memcpy`, `gpu_memset` (`args.device`, `args.stream`,
  `args.correlation`, memcpy `args.bytes`), `cuda_sync` (CUPTI's record of a host wait);
- flows (`ac2g`, `fwdbwd`), metadata (`"ph": "M"`), instants and the `Trace` span, which
  no analysis here needs and which are dropped right after decoding.

Only the fields the analyses use are decoded (msgspec skips the rest without building
objects), with no field that refers back into the JSON text, so each decoded chunk of text
is freed at once. Names and categories are interned: a trace repeats a few thousand names
millions of times.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Literal

import msgspec

# Categories by what the analyses do with them. Older Kineto builds wrote "Kernel",
# "Memcpy", "Memset", "Runtime", "Operator"; AMD (roctracer) traces use the same categories
# as CUDA ones, with hip* runtime names.
KERNEL_CATS = frozenset({"kernel", "Kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "Memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "Memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver",
                          "privateuse1_runtime", "privateuse1_driver"})
OP_CATS = frozenset({"cpu_op", "Operator"})
ANNOTATION_CATS = frozenset({"user_annotation"})  # gpu_user_annotation only mirrors GPU work
PYTHON_CATS = frozenset({"python_function"})
SYNC_CATS = frozenset({"cuda_sync"})


class RawArgs(msgspec.Struct, gc=False, frozen=True):
    """The `args` fields the analyses read; -1 stands for an absent id. The NCCL fields that
    Kineto copies from `record_param_comms` onto collective kernels vary in type between
    versions, hence the unions. Frozen, so one shared instance can stand for "no args"."""

    external_id: int = msgspec.field(name="External id", default=-1)
    correlation: int = -1
    stream: int = -1
    device: int = -1
    bytes: int = 0
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_nelems: int | str | None = msgspec.field(name="In msg nelems", default=None)
    out_nelems: int | str | None = msgspec.field(name="Out msg nelems", default=None)
    group_size: int | str | None = msgspec.field(name="Group size", default=None)
    dtype: str | None = None
    process_group: str | int | None = msgspec.field(name="Process Group Name", default=None)
    python_id: int = msgspec.field(name="Python id", default=-1)
    python_parent: int | None = msgspec.field(name="Python parent id", default=None)


NO_ARGS = RawArgs()


# Every category libkineto writes, as a Literal: msgspec then hands back one shared string
# per category instead of a new one per event. A chunk with a category not listed here is
# decoded again with `cat: str` (LenientEvent).
KnownCat = Literal[
    "", "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel",
    "external_correlation", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function",
    "overhead", "cuda_sync", "glow_runtime", "cuda_profiler_range", "mtia_runtime", "mtia_ccp_events",
    "mtia_insight", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm", "privateuse1_runtime",
    "privateuse1_driver", "gpu_pm_counter", "ac2g", "fwdbwd", "Trace", "Kernel", "Memcpy", "Memset",
    "Runtime", "Driver", "Operator", "async_cpu_to_gpu"]


class RawEvent(msgspec.Struct, gc=False):
    cat: KnownCat = ""
    name: str = ""
    tid: int | str = 0  # a GPU event's stream; `pid` is not decoded (the device is in args)
    ts: float | None = None  # µs; JSON integers decode to float too, fractions are kept
    dur: float = 0.0
    args: RawArgs = NO_ARGS

    @property
    def end(self) -> float:
        return self.ts + self.dur


class LenientEvent(RawEvent, gc=False):
    cat: str = ""


class DeviceProperties(msgspec.Struct, gc=False):
    id: int = 0
    name: str = ""
    totalGlobalMem: int | None = None
    computeMajor: int | None = None
    computeMinor: int | None = None
    numSms: int | None = None


class DistributedInfo(msgspec.Struct, gc=False):
    backend: str | None = None
    rank: int | str | None = None
    world_size: int | str | None = None


class TraceHead(msgspec.Struct, gc=False):
    """Top-level keys around `traceEvents` (Kineto writes some before, some after it)."""

    schemaVersion: int | None = None
    deviceProperties: list[DeviceProperties] | None = None
    distributedInfo: DistributedInfo | None = None
    baseTimeNanoseconds: int | None = None


EVENTS_DECODER = msgspec.json.Decoder(list[RawEvent])
LENIENT_DECODER = msgspec.json.Decoder(list[LenientEvent])
HEAD_DECODER = msgspec.json.Decoder(TraceHead)

_NAME, _TS = attrgetter("name"), attrgetter("ts")
_GROUPS = ("gpu", "runtime", "ops", "annotations", "python", "syncs")
_GROUP_OF = {c: g for g, cats in zip(_GROUPS, (
    KERNEL_CATS | MEMCPY_CATS | MEMSET_CATS, RUNTIME_CATS, OP_CATS, ANNOTATION_CATS, PYTHON_CATS, SYNC_CATS))
    for c in cats}


@dataclass
class TraceEvents:
    """The kept events of one chunk or one whole trace, grouped by category."""

    gpu: list[RawEvent] = field(default_factory=list)  # kernels, memcpys, memsets
    runtime: list[RawEvent] = field(default_factory=list)
    ops: list[RawEvent] = field(default_factory=list)
    annotations: list[RawEvent] = field(default_factory=list)
    python: list[RawEvent] = field(default_factory=list)
    syncs: list[RawEvent] = field(default_factory=list)
    events: int = 0  # every event seen, kept or not
    skipped_no_time: int = 0  # kept categories without a timestamp: malformed, not analysed

    def kept(self) -> int:
        return sum(len(getattr(self, g)) for g in _GROUPS)

    def merge(self, chunk: "TraceEvents") -> None:
        for g in _GROUPS:
            getattr(self, g).extend(getattr(chunk, g))
        self.events += chunk.events
        self.skipped_no_time += chunk.skipped_no_time


def events_from_json(data) -> TraceEvents:
    """Decode one JSON array of events (bytes or a buffer) and keep what the analyses use.
    Raises msgspec errors unchanged. No decoded object refers to `data` afterwards."""
    try:
        events = EVENTS_DECODER.decode(data)
    except msgspec.ValidationError:
        events = LENIENT_DECODER.decode(data)  # an unknown category (or a real type error)
    return group_events(events)


def group_events(events: list[RawEvent]) -> TraceEvents:
    out = TraceEvents(events=len(events))
    get = _GROUP_OF.get
    groups: dict[str, list[RawEvent]] = {g: [] for g in _GROUPS}
    for e in events:
        g = get(e.cat)
        if g is not None:
            groups[g].append(e)
    intern = sys.intern
    for g, rows in groups.items():
        if not rows:
            continue
        if None in map(_TS, rows):
            timed = [e for e in rows if e.ts is not None]
            out.skipped_no_time += len(rows) - len(timed)
            rows = timed
        if g == "gpu":
            # kernel names run to hundreds of characters and repeat: share one string per
            # name (in C: map + setattr); its hash, computed here, serves every later lookup
            list(map(setattr, rows, repeat("name"), map(intern, map(_NAME, rows))))
        setattr(out, g, rows)
    return out


# --- names -------------------------------------------------------------------------------

STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
DATALOADER_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")
_STDLIB = frozenset(sys.stdlib_module_names)
# Frames in these packages are the framework, not the user's code (DESIGN.md §5 counts
# third-party packages as user code: their lines are what the user sees and can change).
_FRAMEWORK_ROOTS = frozenset({"torch", "torchdoctor", "functorch", "torchgen", "triton"})


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """`train.py(42): step` → ("train.py", 42, "step"). The line is where the function
    starts (Kineto's python tracer names frames by their code object), except for frames
    already running when profiling began, which carry their current line."""
    m = _FRAME_RE.match(name)
    if m is None:
        return None
    return m.group(1), int(m.group(2)), m.group(3)


def is_user_frame(path: str) -> bool:
    if not path or path.startswith("<"):
        return False
    norm = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in norm:
            norm = norm.rsplit(marker, 1)[1]
            break
    else:
        if "/lib/python3" in norm:  # an absolute path into the standard library
            return False
    root = norm.lstrip("/").split("/", 1)[0] if not norm.startswith("/") else ""
    module = root[:-3] if root.endswith(".py") else root
    return module not in _FRAMEWORK_ROOTS and module not in _STDLIB
