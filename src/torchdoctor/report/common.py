"""Formatting shared by the human renderers: numbers, durations, split rows."""

from __future__ import annotations

from torchdoctor.findings import Finding, RunSummary

SPLIT_ROWS = (
    ("data wait", "data_wait_s"),
    ("forward + other", "forward_and_other_s"),
    ("backward", "backward_s"),
    ("optimizer", "optimizer_s"),
    ("eval", "eval_s"),
    ("checkpoint", "checkpoint_s"),
    ("logging", "logging_s"),
)


def fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.1f} ms"


def fmt_rate(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:,.1f} {unit}"


def fmt_speedup(finding: Finding) -> str:
    return "—" if finding.estimated_speedup is None else f"{finding.estimated_speedup:.2f}x"


def where(finding: Finding) -> str:
    loc = finding.location
    return "—" if loc is None else f"{loc.path}:{loc.line}"


def summary_rows(s: RunSummary) -> list[tuple[str, str]]:
    rows = [
        ("script", s.script),
        ("status", s.status),
        ("wall time", f"{s.wall_s:.1f} s"),
        ("steps measured / run", f"{s.steps_measured} / {s.steps_total}"),
        ("steps/s", fmt_rate(s.steps_per_s, "steps/s")),
        ("samples/s", fmt_rate(s.samples_per_s, "samples/s")),
        ("step time mean / p50 / p90",
         f"{fmt_ms(s.step_time_s)} / {fmt_ms(s.step_time_p50_s)} / {fmt_ms(s.step_time_p90_s)}"),
        ("device", s.device),
    ]
    on_gpu = s.device != "cpu"
    na = "not measured" if on_gpu else "not measurable on CPU"
    rows.append(("GPU utilization", f"{s.gpu_util_mean:.0f} %" if s.gpu_util_mean is not None else na))
    if s.power_mean_w is not None:
        limit = f" of {s.power_limit_w:.0f} W" if s.power_limit_w else ""
        rows.append(("GPU power", f"{s.power_mean_w:.0f} W{limit}"))
    else:
        rows.append(("GPU power", na))
    rows.append(("peak GPU memory", f"{s.peak_memory_bytes / 2**30:.2f} GiB" if s.peak_memory_bytes else na))
    return rows


def split_rows(s: RunSummary) -> list[tuple[str, float, float]]:
    """(label, seconds, share of the mean step) for each category."""
    total = s.step_time_s or 0.0
    return [(label, getattr(s.split, attr), getattr(s.split, attr) / total if total else 0.0)
            for label, attr in SPLIT_ROWS]
