"""Kineto trace analysis (`torchdoctor trace`, and `run` on CUDA).

Public API:
    analyze_trace_files(paths) -> TraceSummary   # load, cut into steps, analyse each device
    trace_findings(summary) -> list[Finding]       # ranked causes with estimates
    trace_report(summary) -> Report                # findings plus the tables behind them
"""

from __future__ import annotations

from torchdoctor.trace.analyze import analyze_trace_files
from torchdoctor.trace.report import trace_report
from torchdoctor.trace.rules import trace_findings
from torchdoctor.trace.summary import TraceSummary

__all__ = ["TraceSummary", "analyze_trace_files", "trace_findings", "trace_report"]
