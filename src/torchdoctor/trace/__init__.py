"""Kineto trace analysis (`torchdoctor trace`, and `run` on CUDA): trace files →
`TraceSummary` (torchdoctor.model.trace_summary) → findings.

    analyze_trace_files(paths) -> TraceSummary   # load, cut into steps, analyse each device
    trace_findings(summary) -> list[Finding]       # ranked causes with estimates

`torchdoctor.diagnosis.trace.trace_report` adds the tables behind the findings.
"""

from torchdoctor.trace.analyze import analyze_trace_files
from torchdoctor.trace.rules import trace_findings

__all__ = ["analyze_trace_files", "trace_findings"]
