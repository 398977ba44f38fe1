"""The one registry: every detector of every engine, and the catalogue they report into.

A detector finds one or more catalogue causes (DESIGN.md §4) from one kind of source:
- `run`: a `Rule` class (rules/*.py) checks a RunRecord;
- `lint`: a `Check` (lint/checks/*.py) reads source code;
- `trace`: a function (trace/rules.py) reads a TraceSummary;
- `comm`: a function (rules/link.py) reads a measured link (`torchdoctor comm`'s CommResult).

Runtime rules are imported here directly (they are small and torch-free). The lint and trace
detectors are listed by import path, each with the codes it emits, so `torchdoctor rules` and
the generated docs know which engine finds what without importing the linter or the trace
parser. `tests/unit/rules/test_registry.py` imports every listed detector and fails when the
codes written here differ from the detector's own, when a detector emits a code the catalogue
lacks, or when a catalogue code has no detector.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from torchdoctor.rules.base import Rule, RuleInfo
from torchdoctor.rules.catalogue import CATALOGUE_ONLY
from torchdoctor.rules.changes import DataWaitAppeared, MemoryCreep, StepTimeShift, StragglerAppeared
from torchdoctor.rules.compile import Recompilation
from torchdoctor.rules.graph_breaks import GraphBreak
from torchdoctor.rules.compute import CompileCandidate, NoMixedPrecision, NoTf32, SmallBatch
from torchdoctor.rules.dataparallel import DataParallelUsed
from torchdoctor.rules.data import BlockingTransfer, DataLoaderStall, PageableTransfer, WorkerRespawn
from torchdoctor.rules.distributed import DdpConfig, GradAccumNoSync, NcclTransportDisabled
from torchdoctor.rules.fsdp import FsdpNoMixedPrecision, FsdpReshardAfterForward, FsdpUnitGranularity
from torchdoctor.rules.gpu import ClockThrottle, GpuUnderutilized
from torchdoctor.rules.hot_lines import HotLine
from torchdoctor.rules.launch import (GradZeroNotNone, OptimizerForeachOff, OptimizerForLoop, PerParameterUpdate,
                                     PythonLoopOps)
from torchdoctor.rules.memory import MemoryHeadroom, MemoryPressure, OutOfMemory
from torchdoctor.rules.phases import FrequentCheckpoint, FrequentEval, LoggingOverhead
from torchdoctor.rules.scaling import ScalingVerdict, SlowInterconnect, StragglerRank
from torchdoctor.rules.sync import DataDependentSync, EvalTransfer, ExplicitSync, HostSync

ENGINES = ("run", "lint", "trace", "comm")


@dataclass(frozen=True)
class Detector:
    engine: str  # run | lint | trace
    module: str
    name: str
    codes: tuple[str, ...]

    def load(self) -> Any:
        """The detector itself: a Rule class, a Check class or a trace rule function."""
        return getattr(importlib.import_module(self.module), self.name)


RUNTIME_RULES: tuple[type[Rule], ...] = (
    DataLoaderStall, WorkerRespawn, PageableTransfer, BlockingTransfer,
    HostSync, DataDependentSync, EvalTransfer, ExplicitSync,
    PythonLoopOps, OptimizerForeachOff, GradZeroNotNone, PerParameterUpdate, OptimizerForLoop,
    SmallBatch, NoMixedPrecision, NoTf32, CompileCandidate, Recompilation, GraphBreak,
    MemoryHeadroom, MemoryPressure, OutOfMemory, DataParallelUsed,
    FrequentEval, FrequentCheckpoint, LoggingOverhead,
    GpuUnderutilized, ClockThrottle,
    GradAccumNoSync, SlowInterconnect, DdpConfig, StragglerRank, ScalingVerdict, NcclTransportDisabled,
    FsdpUnitGranularity, FsdpReshardAfterForward, FsdpNoMixedPrecision,
    StepTimeShift, DataWaitAppeared, MemoryCreep, StragglerAppeared,  # `run --follow`: changes along the run
    HotLine,  # last: it reports only what no rule above explained
)


def _lint(module: str, name: str, *codes: str) -> Detector:
    return Detector("lint", f"torchdoctor.lint.checks.{module}", name, codes)


def _trace(name: str, *codes: str) -> Detector:
    return Detector("trace", "torchdoctor.trace.rules", name, codes)


DETECTORS: tuple[Detector, ...] = (
    *(Detector("run", rule.__module__, rule.__name__, (rule.code,)) for rule in RUNTIME_RULES),
    _lint("data", "SyncLoading", "TD105"),
    _lint("data", "WorkerRespawn", "TD102"),
    _lint("data", "PageableTransfer", "TD103"),
    _lint("data", "BlockingTransfer", "TD104"),
    _lint("sync", "HostSync", "TD201", "TD203"),
    _lint("sync", "DataDependentSync", "TD202"),
    _lint("explicit_sync", "ExplicitSync", "TD204"),
    _lint("launch", "PythonLoopOps", "TD301"),
    _lint("launch", "ForeachOff", "TD302"),
    _lint("launch", "ZeroGradDense", "TD303"),
    _lint("compute", "Tf32Off", "TD403"),
    _lint("compute", "CompileInLoop", "TD405"),
    _lint("distributed", "AccumulationWithoutNoSync", "TD601"),
    _lint("distributed", "DdpSettings", "TD603"),
    _lint("distributed", "DataParallelUsed", "TD604"),
    _lint("nccl_env", "NcclEnvInCode", "TD607"),
    _lint("debug", "DebugLeftover", "TD704"),
    _trace("host_syncs", "TD201", "TD202", "TD204"),
    _trace("launch_bound", "TD304"),
    _trace("python_loops", "TD301"),
    _trace("data_loading", "TD101"),
    _trace("pageable_copies", "TD103"),
    _trace("fp32_matmul", "TD402"),
    _trace("slow_collectives", "TD602"),
    _trace("underutilized", "TD801"),
    _trace("cpu_hazards", "TD201", "TD202"),
    _trace("cpu_data_loading", "TD101"),
    Detector("comm", "torchdoctor.rules.link", "link_findings", ("TD602", "TD607")),
)

CATALOGUE: tuple[type[RuleInfo], ...] = tuple(sorted(RUNTIME_RULES + CATALOGUE_ONLY, key=lambda r: r.code))


def detectors(engine: str) -> list[Detector]:
    return [d for d in DETECTORS if d.engine == engine]


def detected_codes(engine: str) -> frozenset[str]:
    return frozenset(code for d in detectors(engine) for code in d.codes)


def rule_by_code(code: str) -> type[RuleInfo] | None:
    return next((r for r in CATALOGUE if r.code == code.upper()), None)


def engines_for(code: str) -> list[str]:
    """Which commands detect a cause: some of `run`, `lint`, `trace`, `comm`."""
    return [engine for engine in ENGINES if code in detected_codes(engine)]
