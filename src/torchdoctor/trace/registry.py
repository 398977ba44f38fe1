"""The trace engine's detectors and the catalogue codes they find (read by
`torchdoctor.rules.registry.engines_for`)."""

from __future__ import annotations

from torchdoctor.rules.catalogue import LaunchBound, SlowInterconnect
from torchdoctor.rules.compute import NoMixedPrecision
from torchdoctor.rules.data import DataLoaderStall, PageableTransfer
from torchdoctor.rules.gpu import GpuUnderutilized
from torchdoctor.rules.launch import PythonLoopOps
from torchdoctor.rules.sync import DataDependentSync, ExplicitSync, HostSync
from torchdoctor.trace.rules import DEVICE_RULES, HOST_RULES

TRACE_RULES = DEVICE_RULES + HOST_RULES

DETECTED_CODES: frozenset[str] = frozenset(info.code for info in (
    DataLoaderStall, PageableTransfer, HostSync, DataDependentSync, ExplicitSync, PythonLoopOps, LaunchBound,
    NoMixedPrecision, SlowInterconnect, GpuUnderutilized,
))
