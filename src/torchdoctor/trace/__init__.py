"""Kineto trace analysis (`torchdoctor trace`, and `run` on CUDA).

Public API:
    analyze_trace_files(paths) -> TraceSummary   # load, cut into steps, analyse each device
    trace_findings(summary) -> list[Finding]       # ranked causes with estimates
    trace_report(summary) -> Report                # findings plus the tables behind them

Imported lazily: the run record embeds `trace.summary.TraceSummary`, and loading a record
must not pull in the parser, the rules and msgspec.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TraceSummary": "torchdoctor.trace.summary",
    "analyze_trace_files": "torchdoctor.trace.analyze",
    "trace_findings": "torchdoctor.trace.rules",
    "trace_report": "torchdoctor.trace.report",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'torchdoctor.trace' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
