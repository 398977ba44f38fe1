"""The one place runtime rules and catalogue entries are registered. Docs and
`torchdoctor rules` are generated from here; lint and trace detectors point at CATALOGUE entries
and list the codes they find in their own registries (`torchdoctor.lint.registry`,
`torchdoctor.trace.registry`, each exporting `DETECTED_CODES`)."""

from __future__ import annotations

import importlib
import importlib.util

from torchdoctor.rules.base import Rule, RuleInfo
from torchdoctor.rules.catalogue import CATALOGUE_ONLY
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


CATALOGUE: tuple[type[RuleInfo], ...] = tuple(sorted(RUNTIME_RULES + CATALOGUE_ONLY, key=lambda r: r.code))

# Detector registries of the other engines; a module that does not exist yet detects nothing.
_ENGINE_REGISTRIES = {"lint": "torchdoctor.lint.registry", "trace": "torchdoctor.trace.registry"}


def rule_by_code(code: str) -> type[RuleInfo] | None:
    return next((r for r in CATALOGUE if r.code == code.upper()), None)


def engines_for(code: str) -> list[str]:
    """Which commands detect a cause: some of `run`, `lint`, `trace`."""
    engines = ["run"] if any(r.code == code for r in RUNTIME_RULES) else []
    for engine, module in _ENGINE_REGISTRIES.items():
        if _exists(module) and code in importlib.import_module(module).DETECTED_CODES:
            engines.append(engine)
    return engines


def _exists(module: str) -> bool:
    package = module.rpartition(".")[0]
    return importlib.util.find_spec(package) is not None and importlib.util.find_spec(module) is not None
