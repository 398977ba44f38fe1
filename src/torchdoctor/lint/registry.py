"""The one list of lint checks. `DETECTED_CODES` tells `torchdoctor rules` (and the docs)
which catalogue causes `lint` finds; every code here has a catalogue entry and a golden case."""

from __future__ import annotations

from torchdoctor.lint.checks.base import Check
from torchdoctor.lint.checks.compute import CompileInLoop, Tf32Off
from torchdoctor.lint.checks.data import BlockingTransfer, PageableTransfer, SyncLoading, WorkerRespawn
from torchdoctor.lint.checks.debug import DebugLeftover
from torchdoctor.lint.checks.distributed import AccumulationWithoutNoSync, DataParallelUsed, DdpSettings
from torchdoctor.lint.checks.launch import ForeachOff, PythonLoopOps, ZeroGradDense
from torchdoctor.lint.checks.sync import DataDependentSync, ExplicitSync, HostSync

CHECKS: tuple[Check, ...] = (
    SyncLoading(), WorkerRespawn(), PageableTransfer(), BlockingTransfer(),
    HostSync(), DataDependentSync(), ExplicitSync(),
    PythonLoopOps(), ForeachOff(), ZeroGradDense(),
    Tf32Off(), CompileInLoop(),
    AccumulationWithoutNoSync(), DdpSettings(), DataParallelUsed(),
    DebugLeftover(),
)

DETECTED_CODES: frozenset[str] = frozenset(code for check in CHECKS for code in check.codes)
