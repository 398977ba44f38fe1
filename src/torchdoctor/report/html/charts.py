"""The report's charts over steps and time, each drawn from one part of `Report.figures`.

Each function returns finished HTML (an SVG plus its legend); a section decides whether
there is anything to draw and says "not measured" itself when there is not. Bar charts
(the split, memory peaks, before/after) are in `bars`.
"""

from __future__ import annotations


from torchdoctor.model.figures import CHECKPOINT, EPOCH, EVAL, SAMPLED, WARMUP, GpuSeries, MemoryPeaks, StepPoint, StepSeries
from torchdoctor.model.units import GIB, format_bytes
from torchdoctor.report.common import fmt_ms
from torchdoctor.report.html import bars
from torchdoctor.report.html.svg import RUG_ROW_PX, Plot, legend, upper

DOTS_UP_TO = 150  # points drawn as hoverable dots; beyond that the line alone reads better
MARKER_TEXT = {EVAL: "evaluation", CHECKPOINT: "checkpoint saved", EPOCH: "epoch starts"}
MAX_OFF_TOP_LABELS = 8
MAX_MARKER_LINES = 40  # more dashed lines than this hide the steps between them


def _ms(seconds: float) -> str:
    """An axis tick: milliseconds, or seconds from one second up (never 1e+04 ms)."""
    return f"{seconds:.4g} s" if seconds >= 1 else f"{seconds * 1000:.4g} ms"


def _center(p: StepPoint) -> float:
    return p.step + (p.steps - 1) / 2


def _steps_label(p: StepPoint) -> str:
    return f"step {p.step}" if p.steps == 1 else f"steps {p.step}–{p.step + p.steps - 1}"


def _x_range(points: list[StepPoint]) -> tuple[float, float]:
    return points[0].step - 0.5, points[-1].step + points[-1].steps - 0.5


def step_time_chart(series: StepSeries, p50_s: float | None) -> str:
    points = series.points
    # The first steps (compilation, cuDNN autotuning, allocator growth) can be 10-100x the rest:
    # scale to the steps after warm-up and label the warm-up steps that go off the top.
    timed = [p for p in points if p.kind != WARMUP] or points
    top = upper([p.time_max_s for p in timed], 1e-3)
    rug_rows = 0 if len(series.markers) <= MAX_MARKER_LINES else len({m.kind for m in series.markers})
    plot = Plot(_x_range(points), (0.0, top))
    plot.y.hi = top * (1 + RUG_ROW_PX * rug_rows / (plot.y.a - plot.y.b))  # room above the data for the ticks
    plot.axes(lambda v: f"{v:.0f}", _ms, "optimizer step")
    keys = [("k-step", "step time" if series.bucket == 1 else f"mean of each {series.bucket} steps")]
    if _shade_warmup(plot, points):
        keys.append(("k-warmup", "warm-up (not timed)"))
    xs = [_center(p) for p in points]
    if series.bucket > 1:
        plot.band(xs, [p.time_min_s for p in points], [p.time_max_s for p in points], "band",
                  "fastest to slowest step of each bucket")
        keys.append(("k-band", "fastest–slowest step in each bucket"))
    plot.line(xs, [p.time_s for p in points], "l-step", "step time")
    keys += _markers(plot, series)
    if p50_s:
        plot.hline(p50_s, "ref", f"median of the measured steps: {fmt_ms(p50_s)}")
        keys.append(("k-ref", f"median of the measured steps, {fmt_ms(p50_s)}"))
    if len(points) <= DOTS_UP_TO:
        shown = [p for p in points if p.kind != SAMPLED]
        plot.dots([_center(p) for p in shown], [p.time_s for p in shown], "dot",
                  [f"{_steps_label(p)}: {fmt_ms(p.time_s)} ({p.kind}), data wait {fmt_ms(p.data_wait_s)}"
                   for p in shown])
    off_top = [p for p in points if p.time_s > plot.y.hi]
    for p in off_top[:MAX_OFF_TOP_LABELS]:
        plot.label(plot.x(_center(p)), plot.y.b + 10 + RUG_ROW_PX * rug_rows, f"↑ {fmt_ms(p.time_s)}", "off-top")
    sampled = [p for p in points if p.kind == SAMPLED]
    if sampled:
        plot.dots([_center(p) for p in sampled], [p.time_s for p in sampled], "dot dot-sampled",
                  [f"{_steps_label(p)}: {fmt_ms(p.time_s)}, ran under a sampler (excluded from timings)"
                   for p in sampled])
        keys.append(("k-sampled", "sampled step (a sampler ran: not timed)"))
    return legend(keys) + plot.svg("step time per optimizer step")


def _markers(plot: Plot, series: StepSeries) -> list[tuple[str, str]]:
    """Evaluations, checkpoints and epoch starts: dashed lines through the chart, or, when
    there are too many to see the steps between them, rows of ticks along its top edge."""
    kinds = sorted({m.kind for m in series.markers})
    as_lines = len(series.markers) <= MAX_MARKER_LINES
    keys = []
    for row, kind in enumerate(kinds):
        text = MARKER_TEXT.get(kind, kind)
        style = kind if kind in MARKER_TEXT else "other"  # a class name never comes from the data
        mine = [m for m in series.markers if m.kind == kind]
        count = sum(m.count for m in mine)
        if as_lines:
            for m in mine:
                where = f"step {m.step}" if m.count == 1 else f"{m.count} steps of the bucket from step {m.step}"
                took = f", {fmt_ms(m.seconds)}" if m.seconds else ""
                plot.vline(m.step, f"mk mk-{style}", f"{text} during {where}{took}")
            keys.append((f"k-{style}", text))
        else:
            took = f", {fmt_ms(sum(m.seconds for m in mine))} in all" if any(m.seconds for m in mine) else ""
            plot.rug([m.step for m in mine], row, f"rug mk-{style}", f"{text}: {count:,} times{took}")
            keys.append((f"k-{style}", f"{text} ({count:,}×, ticks along the top)"))
    return keys


def data_wait_chart(series: StepSeries) -> str:
    points = series.points
    plot = Plot(_x_range(points), (0.0, upper([p.data_wait_max_s for p in points], 1e-4)), height=160)
    plot.axes(lambda v: f"{v:.0f}", _ms, "optimizer step")
    label = "data wait per step" if series.bucket == 1 else f"mean data wait per step, buckets of {series.bucket}"
    keys = [("k-wait", label)]
    if _shade_warmup(plot, points):
        keys.append(("k-warmup", "warm-up (not timed)"))
    if any(p.kind == SAMPLED for p in points):
        keys.append(("k-sampled", "sampled step (not timed)"))
    per_bar = len(points) <= DOTS_UP_TO
    for chunk in ([[p] for p in points] if per_bar else [points]):
        first = chunk[0]
        title = f"{_steps_label(first)} ({first.kind}): waited {fmt_ms(first.data_wait_s)} for data" if per_bar \
            else "mean data wait per step of each bucket"
        cls = "bars-wait bars-sampled" if per_bar and first.kind == SAMPLED else "bars-wait"
        plot.bars([_center(p) for p in chunk], [p.data_wait_s for p in chunk], series.bucket, cls, title)
    return legend(keys) + plot.svg("data wait per optimizer step")


def _shade_warmup(plot: Plot, points: list[StepPoint]) -> bool:
    warmup = [p for p in points if p.kind == WARMUP]
    if warmup:
        last = warmup[-1].step + warmup[-1].steps - 1
        plot.span(warmup[0].step - 0.5, last + 0.5, "warmup", f"warm-up: steps {warmup[0].step}–{last}, not timed")
    return bool(warmup)


def gpu_charts(gpu: GpuSeries) -> list[tuple[str, str]]:
    """(title, chart) for utilization, power and SM clock, those this GPU reported."""
    ts = [p.t for p in gpu.points]
    charts = []
    specs = [
        ("GPU utilization", "util", None, "%", lambda v: f"{v:.0f} %", 100.0, "l-util"),
        ("power", "power_w", gpu.power_limit_w, "W", lambda v: f"{v:.0f} W", 1.0, "l-power"),
        ("SM clock", "sm_clock_mhz", gpu.sm_clock_max_mhz, "MHz", lambda v: f"{v:.0f} MHz", 1.0, "l-clock"),
    ]
    for title, attr, ceiling, unit, fmt, floor, cls in specs:
        values = [getattr(p, attr) for p in gpu.points]
        if all(v is None for v in values):
            continue
        top = 100.0 if unit == "%" else upper([*values, ceiling], floor)
        plot = Plot(_time_range(gpu), (0.0, top), height=150)
        plot.axes(lambda v: f"{v:g} s", fmt, "seconds since the run started")
        keys = [(f"k-line {cls}", title)] + _shade_window(plot, gpu)
        if ceiling:
            label = f"{'power limit' if unit == 'W' else 'maximum SM clock'} {fmt(ceiling)}"
            plot.hline(ceiling, "ref ref-limit", label)
            keys.append(("k-limit", label))
        plot.line(ts, values, cls, title)
        charts.append((title, legend(keys) + plot.svg(f"{title} over time")))
    return charts


def _time_range(gpu: GpuSeries) -> tuple[float, float]:
    ts = [p.t for p in gpu.points]
    return min(ts), max(max(ts), min(ts) + gpu.interval_s)


def _shade_window(plot: Plot, gpu: GpuSeries) -> list[tuple[str, str]]:
    """Shade the steps after warm-up; their legend key, or none when the run had none."""
    if gpu.measured_from_s is None or gpu.measured_to_s is None:
        return []
    plot.span(gpu.measured_from_s, gpu.measured_to_s, "window", "the steps after warm-up")
    return [("k-window", "steps after warm-up")]


def memory_chart(gpu: GpuSeries | None, peaks: MemoryPeaks | None) -> str | None:
    """Device memory over time (NVML), with PyTorch's peaks; or the peaks alone; or None."""
    used = [p.mem_used_bytes for p in gpu.points] if gpu else []
    gib = GIB
    if gpu and any(v is not None for v in used):
        total = gpu.mem_total_bytes or (peaks.device_total_bytes if peaks else None)
        top = upper([*(v / gib for v in used if v is not None), (total or 0) / gib], 0.1)
        plot = Plot(_time_range(gpu), (0.0, top), height=170)
        plot.axes(lambda v: f"{v:g} s", lambda v: f"{v:g} GiB", "seconds since the run started")
        keys = [("k-line l-mem", "device memory used (NVML: every process on the GPU)")] + _shade_window(plot, gpu)
        lines = [(total, "ref ref-limit", "k-limit", "device total")]
        if peaks:
            lines += [(peaks.peak_reserved_bytes, "ref ref-reserved", "k-reserved", "PyTorch peak reserved"),
                      (peaks.peak_allocated_bytes, "ref ref-alloc", "k-alloc", "PyTorch peak allocated")]
        for value, cls, key, label in lines:
            if value:
                plot.hline(value / gib, cls, f"{label} {format_bytes(value)}")
                keys.append((key, f"{label} {format_bytes(value)}"))
        plot.line([p.t for p in gpu.points], [None if v is None else v / gib for v in used], "l-mem", "device memory used")
        return legend(keys) + plot.svg("device memory over time")
    if peaks and peaks.device_total_bytes > 0:
        return bars.memory_peaks(peaks)
    return None


