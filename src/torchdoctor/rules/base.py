"""The Rule base class and the shared arithmetic of estimates (DESIGN.md §6)."""

from __future__ import annotations

from typing import Any, ClassVar

from torchdoctor.model.units import MIB
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.record import Location, RunRecord
from torchdoctor.rules.facts import RunFacts

# Severity from an estimated end-to-end speedup. 25 % is the gain at which the reference
# reports call a fix "关键" (key); 5 % is about twice the run-to-run noise we see on a
# shared 2-core CPU, the smallest gain a user can confirm.
HIGH_SPEEDUP = 1.25
MEDIUM_SPEEDUP = 1.05
MIN_REPORTED_SPEEDUP = 1.02  # below this a measured saving is within noise: no finding
MAX_SAVED_SHARE = 0.95  # never claim a fix removes the whole step

HAZARD_BASIS_CPU = (
    "not measurable on CPU: this run used the CPU, where the call costs little; on a GPU it "
    "forces the host to wait for the device. Run on the GPU (or `torchdoctor trace`) to size it."
)


def amdahl(step_s: float, saved_s: float) -> float:
    """End-to-end speedup when `saved_s` of every `step_s` is removed."""
    if step_s <= 0:
        return 1.0
    saved = min(max(saved_s, 0.0), step_s * MAX_SAVED_SHARE)
    return step_s / (step_s - saved)


def severity_for(speedup: float) -> Severity:
    if speedup >= HIGH_SPEEDUP:
        return Severity.HIGH
    if speedup >= MEDIUM_SPEEDUP:
        return Severity.MEDIUM
    return Severity.LOW


MB = MIB  # the "MB" the distributed rules speak of, as DDP's bucket_cap_mb does (binary)


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class RuleInfo:
    """What one cause is called and how to fix it: the catalogue entry (DESIGN.md §4).

    `run`, `lint` and `trace` detectors all point at one entry, so the three speak one language.
    """

    code: ClassVar[str]
    slug: ClassVar[str]
    title: ClassVar[str]
    rationale: ClassVar[str]
    fix: ClassVar[str]
    example: ClassVar[str] = ""  # a short snippet of the slow habit, for `torchdoctor rules CODE`
    needs_cuda: ClassVar[bool] = False  # a GPU-only effect: "not measured" on CPU runs


class Rule(RuleInfo):
    """One runtime cause: the catalogue entry plus `check`, which turns a RunRecord into findings."""

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        raise NotImplementedError

    def not_measurable(self, record: RunRecord, facts: RunFacts) -> str | None:
        """Why this rule cannot judge this run, or None when it can."""
        if self.needs_cuda and not facts.cuda_used:
            return "needs a CUDA device; this run used the CPU"
        return None

    def finding(self, **parts: Any) -> Finding:
        """This rule's finding; see `make_finding` for the parts."""
        return make_finding(self, **parts)


def make_finding(
    info: type[RuleInfo] | RuleInfo,
    *,
    title: str,
    message: str,
    location: Location | None,
    evidence: dict[str, Any],
    speedup: float | None,
    basis: str,
    severity: Severity | None = None,
    fix: str | None = None,
) -> Finding:
    """The one place a Finding is built, for every engine: code, slug and fix come from the
    catalogue entry `info` (a finding may carry a more specific fix); severity, when not
    given, from the estimate."""
    if severity is None:
        severity = severity_for(speedup) if speedup is not None else Severity.MEDIUM
    return Finding(
        code=info.code,
        slug=info.slug,
        severity=severity,
        title=title,
        message=message,
        location=location,
        evidence=evidence,
        fix=fix if fix is not None else info.fix,
        estimated_speedup=round(speedup, 3) if speedup is not None else None,
        estimate_basis=basis,
    )


def detects(*infos: type[RuleInfo]):
    """Declare the catalogue causes a detector function reports (trace and comm rules; the
    registry's test reads them)."""
    def mark(rule):
        rule.codes = tuple(info.code for info in infos)
        return rule
    return mark
