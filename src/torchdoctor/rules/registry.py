"""The one place rules are registered. Docs and `torchdoctor rules` are generated from it."""

from __future__ import annotations

from torchdoctor.rules.base import Rule
from torchdoctor.rules.compute import NoMixedPrecision, NoTf32, SmallBatch
from torchdoctor.rules.data import BlockingTransfer, DataLoaderStall, PageableTransfer, WorkerRespawn
from torchdoctor.rules.gpu import ClockThrottle, GpuUnderutilized
from torchdoctor.rules.launch import GradZeroNotNone, OptimizerForeachOff, PythonLoopOps
from torchdoctor.rules.memory import MemoryHeadroom, MemoryPressure
from torchdoctor.rules.phases import FrequentCheckpoint, FrequentEval, LoggingOverhead
from torchdoctor.rules.sync import DataDependentSync, EvalTransfer, ExplicitSync, HostSync

RUNTIME_RULES: tuple[type[Rule], ...] = (
    DataLoaderStall, WorkerRespawn, PageableTransfer, BlockingTransfer,
    HostSync, DataDependentSync, EvalTransfer, ExplicitSync,
    PythonLoopOps, OptimizerForeachOff, GradZeroNotNone,
    SmallBatch, NoMixedPrecision, NoTf32,
    MemoryHeadroom, MemoryPressure,
    FrequentEval, FrequentCheckpoint, LoggingOverhead,
    GpuUnderutilized, ClockThrottle,
)


def rule_by_code(code: str) -> type[Rule] | None:
    return next((r for r in RUNTIME_RULES if r.code == code.upper()), None)
