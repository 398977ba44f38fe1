"""Kineto trace events: the typed view msgspec decodes, one struct type per category.

A Kineto trace (`torch.profiler` → `export_chrome_trace`) is Chrome-trace JSON: a
`traceEvents` list of complete events (`"ph": "X"`) whose `cat` says what they are:

- host: `cpu_op` (aten ops, `args["External id"]`), `user_annotation` (`ProfilerStep#N`,
  `enumerate(DataLoader)#...__next__`, `Optimizer.step#SGD.step`, `record_function` labels),
  `python_function` (stack frames named `file.py(line): func`, with `Python id` / `Python
  parent id`), `cuda_runtime`/`cuda_driver` (`cudaLaunchKernel`, `hipMemcpyAsync`, … with
  `args.correlation` and the launching op's `External id`);
- device: `kernel`, `gpu_memcpy`, `gpu_memset` (`args.device`, `args.stream`,
  `args.correlation`, memcpy `args.bytes`), `cuda_sync` (CUPTI's record of a host wait);
- flows (`ac2g`, `fwdbwd`), metadata (`"ph": "M"`), instants and the `Trace` span, which
  no analysis here needs.

`cat` is a msgspec tag: each category decodes into its own struct with only the `args`
fields it needs (a Python frame keeps two ids, not the NCCL fields of a kernel), and the
categories no analysis reads decode into empty structs. A chunk with an event that has no
`cat` (metadata, instants) or an unknown one is decoded again with a generic struct and
converted. No decoded field refers back into the JSON text, so each chunk of text is
freed at once.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import ClassVar, Union

import msgspec

_F = msgspec.field


# --- args, per category (-1: absent id) ----------------------------------------------------

class OpArgs(msgspec.Struct, gc=False, frozen=True):
    external_id: int = _F(name="External id", default=-1)


class RuntimeArgs(OpArgs, gc=False, frozen=True):
    correlation: int = -1


class GpuArgs(RuntimeArgs, gc=False, frozen=True):
    """Kineto copies NCCL metadata from `record_param_comms` onto collective kernels; its
    types vary between versions, hence the unions."""

    stream: int = -1
    device: int = -1
    bytes: int = 0
    collective: str | None = _F(name="Collective name", default=None)
    in_nelems: int | str | None = _F(name="In msg nelems", default=None)
    out_nelems: int | str | None = _F(name="Out msg nelems", default=None)
    group_size: int | str | None = _F(name="Group size", default=None)
    dtype: str | None = None
    process_group: str | int | None = _F(name="Process Group Name", default=None)


class SyncArgs(RuntimeArgs, gc=False, frozen=True):
    stream: int = -1
    device: int = -1


class PythonArgs(msgspec.Struct, gc=False, frozen=True):
    python_id: int = _F(name="Python id", default=-1)
    python_parent: int | None = _F(name="Python parent id", default=None)


class AnyArgs(GpuArgs, gc=False, frozen=True):
    """Every field, for chunks decoded generically."""

    python_id: int = _F(name="Python id", default=-1)
    python_parent: int | None = _F(name="Python parent id", default=None)


NO_OP_ARGS, NO_RUNTIME_ARGS, NO_GPU_ARGS = OpArgs(), RuntimeArgs(), GpuArgs()
NO_SYNC_ARGS, NO_PYTHON_ARGS, NO_ANY_ARGS = SyncArgs(), PythonArgs(), AnyArgs()


# --- events, per category --------------------------------------------------------------------

class RawEvent(msgspec.Struct, gc=False, tag_field="cat"):
    """A complete event of a kept category. `cat` is the JSON tag, readable as a class
    attribute; `tid` is a GPU event's stream."""

    name: str = ""
    tid: int | str = 0
    ts: float | None = None  # µs; JSON integers decode to float too, fractions are kept
    dur: float = 0.0
    cat: ClassVar[str] = ""

    @property
    def end(self) -> float:
        return self.ts + self.dur


class CpuOp(RawEvent, tag="cpu_op"):
    args: OpArgs = NO_OP_ARGS
    cat: ClassVar[str] = "cpu_op"
    group: ClassVar[str] = "ops"


class Annotation(CpuOp, tag="user_annotation"):
    cat: ClassVar[str] = "user_annotation"
    group: ClassVar[str] = "annotations"


class Runtime(RawEvent, tag="cuda_runtime"):
    args: RuntimeArgs = NO_RUNTIME_ARGS
    cat: ClassVar[str] = "cuda_runtime"
    group: ClassVar[str] = "runtime"


class Kernel(RawEvent, tag="kernel"):
    args: GpuArgs = NO_GPU_ARGS
    cat: ClassVar[str] = "kernel"
    group: ClassVar[str] = "gpu"


class Memcpy(Kernel, tag="gpu_memcpy"):
    cat: ClassVar[str] = "gpu_memcpy"


class Memset(Kernel, tag="gpu_memset"):
    cat: ClassVar[str] = "gpu_memset"


class PyFrame(RawEvent, tag="python_function"):
    args: PythonArgs = NO_PYTHON_ARGS
    cat: ClassVar[str] = "python_function"
    group: ClassVar[str] = "python"


class CudaSync(RawEvent, tag="cuda_sync"):
    args: SyncArgs = NO_SYNC_ARGS
    cat: ClassVar[str] = "cuda_sync"
    group: ClassVar[str] = "syncs"


def _variant(base: type, tag: str) -> type:
    """The same struct under another category name (older Kineto, other backends)."""
    return type(base)(base.__name__ + "_" + re.sub(r"\W", "_", tag), (base,), {"cat": tag}, tag=tag)


# Older Kineto builds wrote "Kernel", "Memcpy", "Memset", "Runtime", "Operator"; AMD
# (roctracer) traces use the CUDA categories with hip* runtime names.
_VARIANTS = [_variant(Kernel, "Kernel"), _variant(Memcpy, "Memcpy"), _variant(Memset, "Memset"),
             _variant(Runtime, "cuda_driver"), _variant(Runtime, "Runtime"), _variant(Runtime, "Driver"),
             _variant(Runtime, "privateuse1_runtime"), _variant(Runtime, "privateuse1_driver"),
             _variant(CpuOp, "Operator")]
KEPT_TYPES = (CpuOp, Annotation, Runtime, Kernel, Memcpy, Memset, PyFrame, CudaSync, *_VARIANTS)


class _Skipped(msgspec.Struct, gc=False, tag_field="cat"):
    """A category no analysis reads: nothing of it is decoded."""


# gpu_user_annotation only mirrors GPU work; flows duplicate the correlation ids
SKIPPED_CATS = ("ac2g", "fwdbwd", "Trace", "gpu_user_annotation", "cpu_instant_event", "overhead",
                "external_correlation", "glow_runtime", "cuda_profiler_range", "mtia_runtime", "mtia_ccp_events",
                "mtia_insight", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm", "gpu_pm_counter",
                "async_cpu_to_gpu")
_SKIPPED_TYPES = tuple(type(_Skipped)("Skipped_" + c, (_Skipped,), {}, tag=c) for c in SKIPPED_CATS)

KERNEL_CATS = frozenset({"kernel", "Kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "Memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "Memset"})
_BY_CAT = {t.cat: t for t in KEPT_TYPES}


class GenericEvent(msgspec.Struct, gc=False):
    """Any event, for chunks the typed decoder refuses (no `cat`, or an unknown one)."""

    cat: str = ""
    name: str = ""
    tid: int | str = 0
    ts: float | None = None
    dur: float = 0.0
    args: AnyArgs = NO_ANY_ARGS


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


EVENTS_DECODER = msgspec.json.Decoder(list[Union[KEPT_TYPES + _SKIPPED_TYPES]])  # type: ignore[valid-type]
GENERIC_DECODER = msgspec.json.Decoder(list[GenericEvent])
RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
HEAD_DECODER = msgspec.json.Decoder(TraceHead)

_NAME, _TS = attrgetter("name"), attrgetter("ts")
_GROUPS = ("gpu", "runtime", "ops", "annotations", "python", "syncs")
_ARGS_OF = {OpArgs: ("external_id",), RuntimeArgs: ("external_id", "correlation"),
            GpuArgs: tuple(GpuArgs.__struct_fields__), SyncArgs: tuple(SyncArgs.__struct_fields__),
            PythonArgs: tuple(PythonArgs.__struct_fields__)}


@dataclass
class TraceEvents:
    """The kept events of one chunk or one whole trace, grouped by category."""

    gpu: list[Kernel] = field(default_factory=list)  # kernels, memcpys, memsets
    runtime: list[Runtime] = field(default_factory=list)
    ops: list[CpuOp] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)
    python: list[PyFrame] = field(default_factory=list)
    syncs: list[CudaSync] = field(default_factory=list)
    events: int = 0  # every event seen, kept or not
    skipped_no_time: int = 0  # kept categories without a timestamp: malformed, not analysed
    skipped_bad_time: int = 0  # a negative, infinite or NaN time or duration: damaged, not analysed

    def kept(self) -> int:
        return sum(len(getattr(self, g)) for g in _GROUPS)

    def merge(self, chunk: "TraceEvents") -> None:
        for g in _GROUPS:
            getattr(self, g).extend(getattr(chunk, g))
        self.events += chunk.events
        self.skipped_no_time += chunk.skipped_no_time
        self.skipped_bad_time += chunk.skipped_bad_time


def events_from_json(data) -> TraceEvents:
    """Decode one JSON array of events (bytes or a buffer) and keep what the analyses use.
    Raises msgspec errors unchanged. No decoded object refers to `data` afterwards."""
    try:
        events = EVENTS_DECODER.decode(data)
    except msgspec.ValidationError:
        events = _decode_mixed(data)
    return group_events(events)


def _decode_mixed(data) -> list:
    """A chunk the typed decoder refused. Usually a few events without `cat` (the metadata
    at the start of a trace, the closing instant): decode those generically and the rest
    typed; with an unknown category, decode it all generically."""
    raws = [bytes(r) for r in RAW_LIST_DECODER.decode(data)]
    with_cat = [r for r in raws if b'"cat"' in r]
    try:
        typed = EVENTS_DECODER.decode(b"[" + b",".join(with_cat) + b"]")
    except msgspec.ValidationError:
        return [_typed(e) for e in GENERIC_DECODER.decode(data)]
    rest = [r for r in raws if b'"cat"' not in r]
    return typed + [_typed(e) for e in GENERIC_DECODER.decode(b"[" + b",".join(rest) + b"]")]


def _typed(e: GenericEvent):
    """A generically decoded event as its category's struct (None for unread categories)."""
    cls = _BY_CAT.get(e.cat)
    if cls is None:
        return None
    args_cls = type(cls.__struct_defaults__[cls.__struct_fields__.index("args")])
    args = args_cls(**{f: getattr(e.args, f) for f in _ARGS_OF[args_cls]})
    return cls(name=e.name, tid=e.tid, ts=e.ts, dur=e.dur, args=args)


def _sane_time(e) -> bool:
    """A duration of at least 0 and a finite time: a negative `dur` would make a step of -232 ms."""
    return 0.0 <= e.dur < _INF and -_INF < e.ts < _INF


_INF = float("inf")


def group_events(events: list) -> TraceEvents:
    out = TraceEvents(events=len(events))
    groups: dict[str, list] = {g: [] for g in _GROUPS}
    appenders = {t: groups[t.group].append for t in KEPT_TYPES}
    skip = [].append
    for e in events:
        appenders.get(type(e), skip)(e)
    for g, rows in groups.items():
        if not rows:
            continue
        if None in map(_TS, rows):
            timed = [e for e in rows if e.ts is not None]
            out.skipped_no_time += len(rows) - len(timed)
            rows = timed
        if not all(map(_sane_time, rows)):  # rare: one pass in C when every event is sane
            sane = [e for e in rows if _sane_time(e)]
            out.skipped_bad_time += len(rows) - len(sane)
            rows = sane
        if g == "gpu":
            # kernel names run to hundreds of characters and repeat: share one string per
            # name (in C: map + setattr); its hash, computed here, serves every later lookup
            list(map(setattr, rows, repeat("name"), map(sys.intern, map(_NAME, rows))))
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
