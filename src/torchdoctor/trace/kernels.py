"""Kernel statistics: what ran, how long, in what precision; collectives and their bandwidth.

Kernel classes follow the names the runtimes give them: NCCL/RCCL kernels are named
`nccl*` (Gloo work shows as `gloo:`), copies are `gpu_memcpy`/`gpu_memset` events.
Matmul/convolution precision comes from cuBLAS/cuDNN/CUTLASS kernel names (`sgemm`,
`xmma_gemm_f32f32_tf32f32`, `s1688gemm` are fp32 or TF32 inputs; `h16816gemm`, `bf16`,
`f16` are half precision) — a kernel whose name says neither is counted as unknown.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from statistics import median

from torchdoctor.trace.events import KERNEL_CATS, RawEvent
from torchdoctor.model.trace_summary import CollectiveStat, KernelStat

TOP_KERNELS = 10
COMPUTE, COMM, COPY = "compute", "comm", "copy"

_MATMUL = re.compile(r"gemm|gemv|matmul|conv|cudnn|cutlass|xmma|wgrad|dgrad|fprop|_mm_|bmm", re.I)
_LOW_PRECISION = re.compile(r"bf16|fp16|f16|h1688|h16816|h884|hgemm|hcudnn|half|bfloat16|fp8|f8f8|e4m3|e5m2|"
                            r"int8|i8816|imma", re.I)
_FP32 = re.compile(r"sgemm|f32f32_f32f32|tf32|s1688|s16816|s884|scudnn|fp32|float|_f32", re.I)
_NCCL_OP = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_DTYPE_BYTES = {"float": 4, "float32": 4, "f32": 4, "half": 2, "float16": 2, "f16": 2, "bfloat16": 2,
                "bf16": 2, "double": 8, "float64": 8, "f64": 8, "long": 8, "int64": 8, "int": 4,
                "int32": 4, "byte": 1, "uint8": 1, "char": 1, "int8": 1, "bool": 1, "float8_e4m3fn": 1}
# Bus bandwidth factors (NCCL's performance notes): the share of the data each rank's link
# carries, so that numbers are comparable with the link's speed whatever the rank count.
_BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
               "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
               "all_to_all": lambda n: (n - 1) / n, "_allgather_base": lambda n: (n - 1) / n,
               "_reduce_scatter_base": lambda n: (n - 1) / n}


@lru_cache(maxsize=65536)
def kernel_kind(cat: str, name: str) -> str:
    if cat in KERNEL_CATS:
        return COMM if name.startswith(("nccl", "rccl")) or "gloo:" in name else COMPUTE
    return COPY


@lru_cache(maxsize=65536)
def matmul_precision(name: str) -> str | None:
    """"fp32", "low" or "unknown" for matmul/convolution kernels; None for other kernels."""
    if not _MATMUL.search(name):
        return None
    if _LOW_PRECISION.search(name):
        return "low"
    if _FP32.search(name):
        return "fp32"
    return "unknown"


@dataclass
class KernelTotals:
    top: list[KernelStat]
    kernels: int
    matmul_us: dict[str, float]  # fp32 | low | unknown → µs


def kernel_totals(device_events: list[RawEvent]) -> KernelTotals:
    durs: dict[str, list[float]] = defaultdict(list)
    cats: dict[str, str] = {}
    for e in device_events:
        durs[e.name].append(e.dur)
        cats[e.name] = e.cat
    matmul = {"fp32": 0.0, "low": 0.0, "unknown": 0.0}
    stats = []
    kernels = 0
    for name, ds in durs.items():
        kind = kernel_kind(cats[name], name)
        total = sum(ds)
        precision = matmul_precision(name) if kind == COMPUTE else None
        if precision is not None:
            matmul[precision] += total
        if kind != COPY:
            kernels += len(ds)
        stats.append((total, name, kind, ds, precision))
    stats.sort(key=lambda s: -s[0])
    top = [KernelStat(name=n, kind=k, count=len(ds), total_us=t, median_us=median(ds), precision=p)
           for t, n, k, ds, p in stats[:TOP_KERNELS]]
    return KernelTotals(top=top, kernels=kernels, matmul_us=matmul)


# --- collectives -----------------------------------------------------------------------------

@dataclass
class CollectiveCall:
    collective: str
    process_group: str
    start: float
    dur: float
    bytes: int | None
    group_size: int | None
    correlation: int = -1


def _int(value) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def collective_calls(device_events: list[RawEvent]) -> list[CollectiveCall]:
    """NCCL kernels with what they moved, in start order."""
    calls = []
    for e in device_events:
        if e.cat not in KERNEL_CATS or kernel_kind(e.cat, e.name) != COMM:
            continue
        a = e.args
        name = (a.collective or _name_collective(e.name)).lower().replace(" ", "")
        nelems = max(filter(None, (_int(a.in_nelems), _int(a.out_nelems))), default=None)
        size = _DTYPE_BYTES.get((a.dtype or _name_dtype(e.name)).lower())
        calls.append(CollectiveCall(collective=name, process_group=str(a.process_group or ""), start=e.ts,
                                    dur=e.dur, bytes=nelems * size if nelems is not None and size else None,
                                    group_size=_int(a.group_size), correlation=a.correlation))
    return calls


def _name_collective(kernel: str) -> str:
    m = _NCCL_OP.search(kernel)
    return m.group(1) if m else kernel.split("(")[0]


def _name_dtype(kernel: str) -> str:
    for token in re.split(r"[_(<]", kernel):
        if token.lower() in _DTYPE_BYTES:
            return token
    return ""


def busbw_gbps(collective: str, nbytes: int | None, dur_us: float, group: int | None) -> float | None:
    if nbytes is None or dur_us <= 0:
        return None
    factor = _BUS_FACTOR.get(collective, lambda n: 1.0)(group) if group and group > 1 else 1.0
    return nbytes / (dur_us * 1e3) * factor


def collective_stats(calls: list[CollectiveCall]) -> list[CollectiveStat]:
    groups: dict[tuple[str, str], list[CollectiveCall]] = defaultdict(list)
    for c in calls:
        groups[(c.collective, c.process_group)].append(c)
    out = []
    for (name, pg), cs in sorted(groups.items()):
        sizes = [c.bytes for c in cs if c.bytes is not None]
        nbytes = int(median(sizes)) if sizes else None
        dur = median(c.dur for c in cs)
        group = next((c.group_size for c in cs if c.group_size), None)
        # A rank's collective kernel also counts the time spent waiting for the other ranks;
        # the fastest call of the typical size is the one least inflated by waiting.
        best = min((c.dur for c in cs if c.bytes == nbytes), default=dur)
        out.append(CollectiveStat(collective=name, process_group=pg, count=len(cs), bytes=nbytes, median_us=dur,
                                  busbw_gbps=busbw_gbps(name, nbytes, best, group), group_size=group))
    return out
