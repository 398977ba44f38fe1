"""The page's sections. Each is one small function `(report) -> Section | None`: None when
the section does not apply to this kind of report (a comparison has no step timeline), a
Section that says "not measured" when it applies but the run has no data for it. A new
section is a new function here plus its place in SECTIONS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torchdoctor.model.figures import Figures, StepSeries
from torchdoctor.model.findings import Report
from torchdoctor.report.common import (CHECKED_CAPTION, CHECKED_TITLE, NOT_MEASURED, causes, checked, fmt_ms, fmt_share,
                                       fmt_value, no_causes, summary_rows)
from torchdoctor.report.html import bars, cards, charts, memory_charts
from torchdoctor.report.html.text import esc_line, facts, inline, inline_line, note, prose, table


@dataclass
class Section:
    id: str  # the anchor; also a stable hook for tests and styles
    title: str
    body: str  # finished HTML


def not_measured(why: str) -> str:
    return note(f"{NOT_MEASURED}: {why}", "not-measured")


def _figures(report: Report) -> Figures:
    return report.figures or Figures()


OLD_REPORT = "this report has no per-step series (made by an older torchdoctor); re-render it with " \
             "`torchdoctor report RUN_DIR`"


def _steps(report: Report) -> tuple[StepSeries | None, str]:
    """The step series, or why there is none."""
    if report.figures is None:
        return None, OLD_REPORT
    series = report.figures.steps
    if series is None or not series.points:
        return None, "no optimizer step was observed in this run"
    return series, ""


def _downsampled(series: StepSeries, how: str) -> str:
    if series.bucket == 1:
        return ""
    return note(f"{series.steps_total:,} steps are drawn as {len(series.points):,} points of up to "
                f"{series.bucket} consecutive steps each (downsampled to keep this page small): {how}", "downsampled")


def run_summary(report: Report) -> Section | None:
    if report.summary is None:
        return None
    return Section("summary", "Run summary", facts(summary_rows(report.summary)))


def step_split(report: Report) -> Section | None:
    s = report.summary
    if s is None:
        return None
    if not s.steps_measured or not s.step_time_s:
        return Section("split", "Where a step's time goes", not_measured("no measured steps, so there is no split"))
    caption = (f"Host-side time per measured step as a share of the mean step ({fmt_ms(s.step_time_s)}); warm-up and "
               "sampled steps excluded. Forward + other is what the other parts leave of the step.")
    return Section("split", "Where a step's time goes", bars.split_bar(s.split, s.step_time_s) + note(caption))


def step_timeline(report: Report) -> Section | None:
    if report.summary is None:
        return None
    series, missing = _steps(report)
    title = "Step time per step"
    if series is None:
        return Section("steps", title, not_measured(missing))
    caption = ("Wall time of each optimizer step (from the previous step's end to this one's). Vertical lines mark "
               "evaluations, checkpoints and epoch starts inside a step; hover a point or line for its numbers.")
    p50 = report.summary.step_time_p50_s
    return Section("steps", title, charts.step_time_chart(series, p50)
                   + _downsampled(series, "the line is each bucket's mean, the band its fastest and slowest step.")
                   + note(caption))


def data_wait(report: Report) -> Section | None:
    if report.summary is None:
        return None
    series, missing = _steps(report)
    title = "Data wait per step"
    if series is None or series.data_wait_missing:
        return Section("data-wait", title, not_measured(missing or series.data_wait_missing))
    s = report.summary
    share = fmt_share(s.split.data_wait_s / s.step_time_s) if s.step_time_s else "—"
    caption = (f"Time each step waited on the next batch from its DataLoaders: {fmt_ms(s.split.data_wait_s)} per "
               f"measured step on average, {share} of the mean step.")
    return Section("data-wait", title, charts.data_wait_chart(series)
                   + _downsampled(series, "each bar is a bucket's mean wait per step.") + note(caption))


def gpu(report: Report) -> Section | None:
    if report.summary is None:
        return None
    title = "GPU utilization, power and clock"
    series = _figures(report).gpu
    if series is None:
        why = _figures(report).gpu_missing or report.summary.gpu_metrics_missing or "no NVML samples"
        return Section("gpu", title, not_measured(why if report.figures else OLD_REPORT))
    s = report.summary
    headline = []
    if s.power_mean_w is not None:
        limit = f" of its {s.power_limit_w:.0f} W limit ({s.power_mean_w / s.power_limit_w:.0%})" \
            if s.power_limit_w else ""
        headline.append(f"mean power {s.power_mean_w:.0f} W{limit}")
    if s.gpu_util_mean is not None:
        headline.append(f"mean utilization {s.gpu_util_mean:.0f} %")
    parts = [note(f"{series.device}: " + ", ".join(headline) + ".", "headline")] if headline else []
    shown = charts.gpu_charts(series)
    parts += [f"<h3>{esc_line(name)}</h3>{chart}" for name, chart in shown]
    if not shown:
        parts.append(not_measured("this GPU's NVML reported no utilization, power or clock"))
    if series.bucket > 1:
        parts.append(note(f"{series.samples_total:,} NVML samples drawn as {len(series.points):,} means of up to "
                          f"{series.bucket} samples (downsampled to keep this page small).", "downsampled"))
    parts.append(note(f"NVML sampled every {series.interval_s:g} s; the shaded span is the steps after warm-up."))
    return Section("gpu", title, "".join(parts))


def memory(report: Report) -> Section | None:
    if report.summary is None:
        return None
    figures = _figures(report)
    parts = []
    breakdown = figures.memory
    if breakdown is not None:
        parts.append(f"<h3>What fills memory: {esc_line(breakdown.title)}</h3>" + memory_charts.breakdown_bar(breakdown))
        timeline = memory_charts.timeline_chart(breakdown)
        if timeline:
            parts.append("<h3>Live tensor memory through that step</h3>" + timeline)
        if breakdown.device_missing:
            parts.append(note(breakdown.device_missing[0].upper() + breakdown.device_missing[1:] + ".",
                              "not-measured"))
    chart = charts.memory_chart(figures.gpu, figures.memory_peaks)
    if chart is not None:
        parts.append("<h3>Device memory</h3>" + chart)
    if not parts:
        why = figures.gpu_missing or report.summary.gpu_metrics_missing or "no memory was accounted in this run"
        return Section("memory", "Memory", not_measured(why if report.figures else OLD_REPORT))
    return Section("memory", "Memory", "".join(parts))


def batch_scaling(report: Report) -> Section | None:
    scaling = _figures(report).scaling
    if scaling is None:
        return None
    shown = memory_charts.scaling_charts(scaling)
    if not shown:
        return None
    body = "".join(f"<h3>{esc_line(title)}</h3>{chart}" for title, chart in shown)
    return Section("batch-scaling", "Batch size: memory and throughput", body + note(
        "One fresh process per batch size; the trials and the fit are in the tables under Measurements."))


def comparison(report: Report) -> Section | None:
    runs = _figures(report).comparison
    if not runs:
        return None
    body = bars.comparison_bars(runs)
    splits = bars.comparison_splits(runs)
    if splits:
        body += "<h3>Step-time split per run</h3>" + splits
    return Section("comparison", "Before / after", body)


def tables(report: Report) -> Section | None:
    if not report.tables:
        return None
    parts = []
    for t in report.tables:
        # a column of numbers (or blanks) is right-aligned, as numbers are read
        numeric = [bool(t.rows) and all(row[i] is None or isinstance(row[i], (int, float)) for row in t.rows
                                        if i < len(row)) for i in range(len(t.columns))]
        parts.append(f"<h3>{inline_line(t.title)}</h3>{table(t.columns, t.rows, numeric=numeric)}")
        if t.caption:
            parts.append(prose(t.caption))
    return Section("tables", "Measurements" if report.source == "run" else "Tables", "".join(parts))


def findings(report: Report) -> Section | None:
    ranked = causes(report)
    if not ranked:
        if report.source not in ("run", "lint", "trace"):
            return None  # a comparison's content is its bars and tables
        return Section("findings", "Causes, ranked", note(no_causes(report)))
    body = cards.overview(ranked) + "".join(
        cards.card(rank, f, report.excerpt_for(f)) for rank, f in enumerate(ranked, 1))
    return Section("findings", "Causes, ranked", body)


def checked_findings(report: Report) -> Section | None:
    """The info findings, apart from the causes: unnumbered cards, anchored after the causes' (unique ids)."""
    infos = checked(report)
    if not infos:
        return None
    first = len(report.findings) - len(infos) + 1
    body = prose(CHECKED_CAPTION) + "".join(
        cards.card(rank, f, report.excerpt_for(f), numbered=False) for rank, f in enumerate(infos, first))
    return Section("checked", CHECKED_TITLE, body)


def unmeasured(report: Report) -> Section | None:
    if not report.not_measured:
        return None
    by_reason: dict[str, list[str]] = {}
    for n in report.not_measured:
        by_reason.setdefault(n.reason, []).append(f"{n.code} {n.slug}")
    items = "".join(f"<li><strong>{esc_line(', '.join(rules))}</strong>: {inline(reason)}</li>"
                    for reason, rules in by_reason.items())
    return Section("not-measured", "Not measured in this run",
                   note("Rules that could not judge this run, and why: absent here means unknown, not fine.")
                   + f'<ul class="unmeasured">{items}</ul>')


def environment(report: Report) -> Section | None:
    if not report.environment:
        return None
    return Section("environment", "Environment", facts((str(k), fmt_value(v)) for k, v in report.environment.items()))


def notes(report: Report) -> Section | None:
    if not report.notes:
        return None
    return Section("notes", "Notes", '<ul class="notes">' + "".join(f"<li>{prose(n)}</li>" for n in report.notes)
                   + "</ul>")


# What to change first, first: the causes open the page (under its one-line headline, html/__init__),
# the measurements they rest on follow.
SECTIONS: tuple[Callable[[Report], Section | None], ...] = (
    findings, checked_findings, run_summary, step_split, step_timeline, data_wait, gpu, memory, batch_scaling, comparison, tables,
    unmeasured, environment, notes,
)
