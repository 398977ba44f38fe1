"""Whole-GPU rules from NVML samples: low activity, throttled clocks."""

from __future__ import annotations

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import Rule
from torchdoctor.rules.facts import RunFacts

UNDERUSED_UTIL = 50.0  # percent of time with a kernel running
UNDERUSED_POWER_SHARE = 0.5  # the reference report's "200 W of 450 W" is 0.44
THROTTLE_MIN_SHARE = 0.10  # share of samples with a slowdown reason active
SLOWDOWN_REASONS = {"hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown",
                    "hw_power_brake_slowdown", "sw_power_cap"}


def _nvml_reason(record: RunRecord, facts: RunFacts) -> str | None:
    if not facts.cuda_used:
        return "needs a CUDA device; this run used the CPU"
    if record.nvml is None or not record.nvml.available:
        return f"NVML not available: {record.nvml.reason if record.nvml else 'not sampled'}"
    return None


class _NvmlRule(Rule):
    needs_cuda = True

    def not_measurable(self, record, facts):
        return _nvml_reason(record, facts)


class GpuUnderutilized(_NvmlRule):
    code = "TD801"
    slug = "gpu-underutilized"
    example = (
        "for x, y in loader:  # data loading, Python and syncs between steps\n"
        "    loss = model(x.cuda()).sum()  # leave the GPU idle most of the time"
    )
    title = "GPU mostly idle or far below its power limit"
    rationale = "Low utilization or power means the GPU waits on the host; see the causes above."
    fix = "Fix the higher-ranked causes (data loading, syncs, launch overhead); then re-run."

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        nvml = record.nvml
        samples = nvml.samples
        util, power, limit = nvml.mean("gpu_util"), nvml.mean("power_w"), nvml.mean("power_limit_w")
        low_util = util is not None and util < UNDERUSED_UTIL
        low_power = power is not None and limit and power / limit < UNDERUSED_POWER_SHARE
        if not (low_util or low_power):
            return []
        return [
            self.finding(
                title=f"GPU at {util or 0:.0f}% utilization, {power or 0:.0f} W of {limit or 0:.0f} W",
                message=f"Over {len(samples)} NVML samples the GPU averaged {util or 0:.0f}% busy and {power or 0:.0f} W.",
                location=None,
                evidence={"gpu_util_mean": util, "power_mean_w": power, "power_limit_w": limit, "samples": len(samples)},
                speedup=None,
                basis="summary of the run; the ranked causes carry the estimates",
                severity=Severity.INFO,
            )
        ]


class ClockThrottle(_NvmlRule):
    code = "TD802"
    slug = "clock-throttle"
    example = "model = big_model.cuda()  # GPU in a hot, closed case: SM clock held at 60 % of max"
    title = "GPU clocks throttled"
    rationale = "Thermal or power slowdowns lower the SM clock: the same work takes longer."
    fix = "Check cooling and power limits (`nvidia-smi -q -d PERFORMANCE`); the code is not the cause."

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        samples = record.nvml.samples
        hit = [s for s in samples if SLOWDOWN_REASONS & set(s.throttle_reasons)]
        if not samples or len(hit) / len(samples) < THROTTLE_MIN_SHARE:
            return []
        reasons = sorted({r for s in hit for r in s.throttle_reasons} & SLOWDOWN_REASONS)
        return [
            self.finding(
                title=f"Clock slowdown active in {len(hit) / len(samples):.0%} of samples",
                message=f"NVML reported {', '.join(reasons)}.",
                location=None,
                evidence={"share_of_samples": round(len(hit) / len(samples), 3), "reasons": reasons},
                speedup=None,
                basis="hardware state, not code; no code change estimate",
                severity=Severity.MEDIUM,
            )
        ]
