"""Findings and the Report that rules produce and renderers print (DESIGN.md §3).

The series the report draws and the source excerpts live in `figures`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from torchdoctor.model.figures import Figures, SourceExcerpt, TimeSplit
from torchdoctor.model.location import Location
from torchdoctor.model.serialize import read_json, write_json

# 2: figures (the series the HTML report draws) and sources (lines around each finding)
# 3: figures.memory (the breakdown and its timeline), figures.scaling (`torchdoctor memory`)
# 4: summary.ranks, summary.ended (the first line of a report: how a failed or stalled run ended)
SCHEMA_VERSION = 4
OLDEST_READABLE_SCHEMA = 1  # versions 2 to 4 only added fields with defaults


class Severity(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        return ["high", "medium", "low", "info"].index(self.value)


@dataclass
class Finding:
    code: str
    slug: str
    severity: Severity
    title: str
    message: str
    location: Location | None
    evidence: dict[str, Any]
    fix: str
    estimated_speedup: float | None
    estimate_basis: str

    def sort_key(self) -> tuple:
        """Estimated first (largest first), then by severity; of equal severity, one whose estimate the
        spread check held back (diagnosis/reliability.py: measured, but too spread to print) before
        one never timed, then by code."""
        speedup = self.estimated_speedup
        held = self.evidence.get("estimate_if_steady") if isinstance(self.evidence, dict) else None
        held = held if isinstance(held, (int, float)) else 0.0
        return (speedup is None, -(speedup or 0.0), self.severity.rank, -held, self.code)


@dataclass
class NotMeasured:
    """A rule that could not judge this run, and why (e.g. a GPU-only effect on CPU)."""

    code: str
    slug: str
    reason: str


@dataclass
class RunSummary:
    script: str
    status: str
    wall_s: float
    steps_total: int
    steps_measured: int
    step_time_s: float | None  # mean over measured steps
    step_time_p50_s: float | None
    step_time_p90_s: float | None
    steps_per_s: float | None
    samples_per_s: float | None
    split: TimeSplit = field(default_factory=TimeSplit)
    device: str = "cpu"
    gpu_util_mean: float | None = None
    power_mean_w: float | None = None
    power_limit_w: float | None = None
    peak_memory_bytes: int | None = None
    gpu_metrics_missing: str | None = None  # why the GPU rows are empty, when they are
    machine_busy: str | None = None  # set when other processes took the CPU: timings less reliable
    ranks: int = 1  # processes of a multi-rank run (a merged report)
    ended: str | None = None  # how a run that crashed, stalled, exited or was stopped ended, in one line
    doctor_cost: str | None = None  # the doctor's own cost in this run, in one line (diagnosis/doctor_cost.py)


@dataclass
class Table:
    """A titled table a source adds to its report (trace breakdowns, before/after comparisons).

    Cells are plain strings or numbers, already formatted by whoever measured them; renderers
    only lay them out.
    """

    title: str
    columns: list[str]
    rows: list[list[str | float | int | None]] = field(default_factory=list)
    caption: str = ""  # one sentence under the table: what the numbers are, how measured


@dataclass
class Report:
    source: str  # run | lint | trace
    tool_version: str
    schema_version: int = SCHEMA_VERSION
    summary: RunSummary | None = None
    findings: list[Finding] = field(default_factory=list)
    not_measured: list[NotMeasured] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # said first in every format, above the summary: what makes the numbers below less reliable
    # (a busy machine), so nobody reads an estimate without it
    warnings: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)  # shown after the summary, before the causes
    figures: Figures | None = None  # series to draw: steps, GPU samples, before/after bars
    sources: list[SourceExcerpt] = field(default_factory=list)  # lines around findings' locations

    def excerpt_for(self, finding: Finding) -> SourceExcerpt | None:
        """The excerpt around `finding`'s location, when the report has one."""
        loc = finding.location
        if loc is None:
            return None
        return next((s for s in self.sources if (s.path, s.line) == (loc.path, loc.line)), None)

    def ranked(self) -> "Report":
        self.findings.sort(key=Finding.sort_key)
        return self

    def to_json(self) -> str:
        """report.json's text (DESIGN.md §3): findings ranked; this Report is left as it is."""
        # A deliberate upward import (data model -> renderer, floor 1 -> 4): the API's object
        # renders itself, and only when asked; the renderers never import back.
        from torchdoctor.report.json_ import render_json

        return render_json(self)

    def _repr_html_(self) -> str:
        """A notebook shows the report as report.html's content, inline."""
        # the same deliberate upward import as to_json: the notebook hook
        from torchdoctor.report.html import render_html_fragment

        return render_html_fragment(self)

    def save(self, path: Path) -> None:
        write_json(path, self)

    @classmethod
    def load(cls, path: Path) -> "Report":
        report = read_json(path, cls, SCHEMA_VERSION, oldest=OLDEST_READABLE_SCHEMA)
        report.schema_version = SCHEMA_VERSION  # upgraded in memory: older shapes only lack fields
        return report
