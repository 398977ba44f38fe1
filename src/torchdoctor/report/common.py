"""Formatting shared by the human renderers: numbers, durations, locations, summary rows.

Everything here turns values already in a Report into strings; nothing is measured or
estimated. Strings returned here are *unescaped*: each renderer escapes for its medium.
"""

from __future__ import annotations

import json
from typing import Any

from torchdoctor.model.findings import Finding, Report, RunSummary, Severity
from torchdoctor.model.location import Location
from torchdoctor.model.units import format_bytes

DASH = "—"  # shown where a value does not exist (no location, no estimate)
NOT_MEASURED = "not measured"

# (label, TimeSplit attribute), in the order a step runs through them.
SPLIT_ROWS = (
    ("data wait", "data_wait_s"),
    ("forward + other", "forward_and_other_s"),
    ("backward", "backward_s"),
    ("optimizer", "optimizer_s"),
    ("eval", "eval_s"),
    ("checkpoint", "checkpoint_s"),
    ("logging", "logging_s"),
)


def ranked_findings(report: Report) -> list[Finding]:
    """The findings in `Report.ranked()` order, without reordering the caller's report."""
    return sorted(report.findings, key=Finding.sort_key)


# An info finding is not a cost to change: a read the host needs, a scaling verdict, a candidate
# with nothing measured to rank it by. The human reports list the causes (low and above) under
# "Causes, ranked" and these apart, so a rank always means "change this before that".
CHECKED_TITLE = "Checked, not causes"
CHECKED_CAPTION = ("info: what the run shows that is not a cost to change (a read the host needs, a verdict, "
                   "a candidate with nothing measured to rank it by, a cost of running a GPU script on this CPU)")


def causes(report: Report) -> list[Finding]:
    """The ranked findings a user should act on, best first: every severity but info."""
    return [f for f in ranked_findings(report) if f.severity is not Severity.INFO]


def checked(report: Report) -> list[Finding]:
    """The info findings, in ranked order: shown apart from the causes."""
    return [f for f in ranked_findings(report) if f.severity is Severity.INFO]


def no_causes(report: Report) -> str:
    """What stands where the ranked causes would: nothing found, or only info findings."""
    return "No causes found." if report.findings else "No findings."


def fmt_ms(seconds: float | None) -> str:
    return DASH if seconds is None else f"{seconds * 1000:.1f} ms"


def fmt_rate(value: float | None) -> str:
    return DASH if value is None else f"{value:,.1f}"


def fmt_speedup(finding: Finding) -> str:
    return DASH if finding.estimated_speedup is None else f"{finding.estimated_speedup:.2f}x"


def estimate_line(finding: Finding) -> tuple[str, str]:
    """(the estimate, its basis) as a finding's "estimated speedup:" line says them: "not estimated"
    is said once, where the basis begins with it too."""
    if finding.estimated_speedup is not None:
        return fmt_speedup(finding), finding.estimate_basis
    return "not estimated", finding.estimate_basis.removeprefix("not estimated: ").removeprefix("not estimated")


def fmt_share(share: float | None) -> str:
    return DASH if share is None else f"{share:.0%}"


def fmt_value(value: Any) -> str:
    """An evidence value as a short string: readable numbers, JSON for containers."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        # Four significant digits is what a step-time diagnosis can honestly claim.
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


# C0 controls other than newline and tab (ESC above all) could drive the reader's terminal
# when a report is printed or `cat`; they are shown as visible escapes instead.
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7f] if chr(c) not in "\n\t"}


def plain(text: str) -> str:
    """A user string made safe to show: line endings normalized, controls made visible."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.translate(_CONTROLS)


def one_line(text: str) -> str:
    """Collapse line breaks, for strings shown where a newline would break the layout
    (a table row, a heading, a path)."""
    return " ".join(plain(text).split("\n"))


def where(location: Location | None) -> str:
    """`path:line`, or a dash for findings about the whole run."""
    return DASH if location is None else f"{location.path}:{location.line}"


def summary_rows(s: RunSummary) -> list[tuple[str, str]]:
    """(label, value) for the run summary; GPU rows say "not measured" when absent."""
    rows = [
        ("status", s.status),
        ("wall time", f"{s.wall_s:.1f} s"),
        ("steps measured / run", f"{s.steps_measured} / {s.steps_total}"),
        ("steps/s", fmt_rate(s.steps_per_s)),
        ("samples/s", fmt_rate(s.samples_per_s)),
        ("step time mean / p50 / p90",
         f"{fmt_ms(s.step_time_s)} / {fmt_ms(s.step_time_p50_s)} / {fmt_ms(s.step_time_p90_s)}"),
        ("device", s.device),
    ]
    rows += gpu_rows(s)
    if s.doctor_cost:
        rows.append(("doctor's own cost", s.doctor_cost))
    return rows


def gpu_rows(s: RunSummary) -> list[tuple[str, str]]:
    missing = f"{NOT_MEASURED} ({s.gpu_metrics_missing})" if s.gpu_metrics_missing else NOT_MEASURED
    if s.gpu_metrics_missing and s.gpu_util_mean is None and s.power_mean_w is None and s.peak_memory_bytes is None:
        return [("GPU utilization, power, memory", missing)]  # one reason, said once
    util = missing if s.gpu_util_mean is None else f"{s.gpu_util_mean:.0f} %"
    if s.power_mean_w is None:
        power = missing
    else:
        limit = f" of {s.power_limit_w:.0f} W limit" if s.power_limit_w else ""
        power = f"{s.power_mean_w:.0f} W{limit}"
    memory = missing if s.peak_memory_bytes is None else format_bytes(s.peak_memory_bytes)
    return [("GPU utilization", util), ("GPU power", power), ("peak GPU memory", memory)]


def split_rows(s: RunSummary) -> list[tuple[str, float, float | None]]:
    """(label, seconds per step, share of the mean step time) for each category.

    The share is relative to `step_time_s` because `forward + other` is defined as the
    mean step time minus the other categories, so the shares add up to 100 %.
    """
    total = s.step_time_s
    return [(label, getattr(s.split, attr), getattr(s.split, attr) / total if total else None)
            for label, attr in SPLIT_ROWS]


# ---- the first screen: one line on the run, a busy machine when it was, then the causes ----

def headline(s: RunSummary) -> str:
    """One line on the run: script, status, steps, step time, device; a run that crashed,
    stalled or was stopped leads with how it ended, not with the throughput of a step."""
    parts = [s.script]
    if s.ended and s.status in ("crashed", "stalled"):
        parts.append(f"{s.status}: {s.ended}")
    else:
        parts.append(s.status if not s.ended else f"{s.status} ({s.ended})")
    if s.ranks > 1:
        parts.append(f"{s.ranks} ranks")
    parts.append(f"{s.steps_measured} of {s.steps_total} steps measured")
    if s.step_time_p50_s is not None and s.status not in ("crashed", "stalled"):
        parts.append(f"{fmt_ms(s.step_time_p50_s)}/step (p50)")
    parts.append(s.device)
    return " · ".join(parts)


def busy_line(s: RunSummary) -> str | None:
    """The machine was busy while the steps were measured: said before the causes, since it
    bounds every number after it (diagnosis/reliability.py says when)."""
    if not s.machine_busy:
        return None
    return s.machine_busy.removeprefix("Busy machine: ")  # the renderers print the label themselves


# ---- evidence: readable labels and values ----

_EVIDENCE_LABELS = {
    "all_reduces_per_step": "all-reduces per step", "busbw_gbps": "bus bandwidth (GB/s)",
    "expected_gbps": "expected bandwidth (GB/s)", "num_workers": "DataLoader workers",
    "median_numel": "median elements per op", "ops_per_step": "ops per step", "step_ms": "step (ms)",
    "workers_for_fix": "workers for the fix", "top_ops": "most frequent ops", "grad_mb": "gradients (MB)",
    "value_needed_on_host": "value needed on the host", "step_source": "what closes a step",
    "no_sync_around_backward_only": "no_sync() wraps only backward()",
}
_WORDS = {"ms": "ms", "s": "s", "gbps": "GB/s", "mib": "MiB", "mb": "MB", "gpu": "GPU", "cpu": "CPU",
          "tf32": "TF32", "fp32": "fp32", "w": "W", "p50": "p50", "p90": "p90", "ddp": "DDP", "nccl": "NCCL"}
_UNITS = {"ms", "s", "gbps", "mib", "mb", "w"}


def evidence_label(key: str) -> str:
    """`idle_ms_per_step` -> "idle per step (ms)", `peak_reserved_bytes` -> "peak reserved" (its
    value shown as a size): a rule's evidence key as a reader says it."""
    if key in _EVIDENCE_LABELS:
        return _EVIDENCE_LABELS[key]
    words = [w for w in key.split("_") if w]
    for i, word in enumerate(words):
        if word in _UNITS and len(words) > 1 and (i == len(words) - 1 or words[i + 1] == "per"):
            return _readable(words[:i] + words[i + 1:]) + f" ({_WORDS.get(word, word)})"
    if len(words) > 1 and words[-1] == "bytes":
        return _readable(words[:-1])
    return _readable(words) or key


def _readable(words: list[str]) -> str:
    return " ".join(_WORDS.get(w, w) for w in words)


def evidence_value(key: str, value: Any) -> str:
    """A share as a percentage, a byte count as a size, anything else as fmt_value does."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and ("share" in key.split("_") or key.endswith("_share")) and 0 <= value <= 1:
        return f"{value:.1%}"
    if number and key.split("_")[-1] == "bytes":
        return format_bytes(value)
    return fmt_value(value)
