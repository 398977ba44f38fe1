"""The report's charts, each drawn from one part of `Report.figures` (or the summary).

Each function returns finished HTML (an SVG plus its legend); a section decides whether
there is anything to draw and says "not measured" itself when there is not.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchdoctor.figures import (CHECKPOINT, EPOCH, EVAL, SAMPLED, WARMUP, GpuSeries, MemoryPeaks, RunBar, StepPoint,
                                 StepSeries, TimeSplit)
from torchdoctor.report.common import SPLIT_ROWS, fmt_bytes, fmt_ms, one_line
from torchdoctor.report.html.svg import RUG_ROW_PX, WIDTH, Plot, upper
from torchdoctor.report.html.text import esc_line

DOTS_UP_TO = 150  # points drawn as hoverable dots; beyond that the line alone reads better
SPLIT_CLASS = {"data_wait_s": "c-data", "forward_and_other_s": "c-fwd", "backward_s": "c-bwd",
               "optimizer_s": "c-opt", "eval_s": "c-eval", "checkpoint_s": "c-ckpt", "logging_s": "c-log"}
MARKER_TEXT = {EVAL: "evaluation", CHECKPOINT: "checkpoint saved", EPOCH: "epoch starts"}
NAME_CHARS = 30
MAX_OFF_TOP_LABELS = 8
MAX_MARKER_LINES = 40  # more dashed lines than this hide the steps between them  # run names in comparison charts; the full name is in the tooltip


def legend(items: Sequence[tuple[str, str]]) -> str:
    """(CSS class of the key, label) pairs."""
    keys = "".join(f'<li><span class="key {cls}"></span>{esc_line(label)}</li>' for cls, label in items)
    return f'<ul class="legend">{keys}</ul>'


def _ms(seconds: float) -> str:
    """An axis tick: milliseconds, or seconds from one second up (never 1e+04 ms)."""
    return f"{seconds:.4g} s" if seconds >= 1 else f"{seconds * 1000:.4g} ms"


def _center(p: StepPoint) -> float:
    return p.step + (p.steps - 1) / 2


def _steps_label(p: StepPoint) -> str:
    return f"step {p.step}" if p.steps == 1 else f"steps {p.step}–{p.step + p.steps - 1}"


def _x_range(points: list[StepPoint]) -> tuple[float, float]:
    return points[0].step - 0.5, points[-1].step + points[-1].steps - 0.5


def split_bar(split: TimeSplit, step_s: float) -> str:
    parts = [(label, attr, getattr(split, attr)) for label, attr in SPLIT_ROWS]
    plot = Plot((0.0, step_s), (0.0, 1.0), height=56, left=8)
    x = 0.0
    for label, attr, seconds in parts:
        if seconds > 0:
            plot.parts.append(f'<rect class="{SPLIT_CLASS[attr]}" x="{plot.x(x):.1f}" y="8" '
                              f'width="{max(plot.x(x + seconds) - plot.x(x), 0.5):.1f}" height="40">'
                              f'<title>{esc_line(label)}: {fmt_ms(seconds)} ({seconds / step_s:.0%})</title></rect>')
            plot.points += 1
            x += seconds
    rows = "".join(f'<tr><td><span class="key {SPLIT_CLASS[attr]}"></span>{esc_line(label)}</td>'
                   f'<td class="num">{fmt_ms(seconds)}</td><td class="num">{seconds / step_s:.0%}</td></tr>'
                   for label, attr, seconds in parts)
    table = f'<table class="grid split"><thead><tr><th>part</th><th class="num">per step</th>' \
            f'<th class="num">share</th></tr></thead><tbody>{rows}</tbody></table>'
    return plot.svg("step-time split, stacked") + table


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
        plot.parts.append(f'<text class="off-top" x="{plot.x(_center(p)):.1f}" y="{plot.y.b + 10 + RUG_ROW_PX * rug_rows:.1f}" '
                          f'text-anchor="start">↑ {fmt_ms(p.time_s)}</text>')
    sampled = [p for p in points if p.kind == SAMPLED]
    if sampled:
        plot.dots([_center(p) for p in sampled], [p.time_s for p in sampled], "dot dot-sampled",
                  [f"{_steps_label(p)}: {fmt_ms(p.time_s)}, ran under the op sampler (excluded from timings)"
                   for p in sampled])
        keys.append(("k-sampled", "sampled step (op sampler on, not timed)"))
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
    x = (min(ts), max(max(ts), min(ts) + gpu.interval_s))
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
        plot = Plot(x, (0.0, top), height=150)
        plot.axes(lambda v: f"{v:g} s", fmt, "seconds since the run started")
        _shade_window(plot, gpu)
        keys = [(f"k-line {cls}", title)]
        if ceiling:
            label = f"{'power limit' if unit == 'W' else 'maximum SM clock'} {fmt(ceiling)}"
            plot.hline(ceiling, "ref ref-limit", label)
            keys.append(("k-limit", label))
        plot.line(ts, values, cls, title)
        keys.append(("k-window", "steps after warm-up"))
        charts.append((title, legend(keys) + plot.svg(f"{title} over time")))
    return charts


def _shade_window(plot: Plot, gpu: GpuSeries) -> None:
    if gpu.measured_from_s is not None and gpu.measured_to_s is not None:
        plot.span(gpu.measured_from_s, gpu.measured_to_s, "window", "the steps after warm-up")


def memory_chart(gpu: GpuSeries | None, peaks: MemoryPeaks | None) -> str | None:
    """Device memory over time (NVML), with PyTorch's peaks; or the peaks alone; or None."""
    used = [p.mem_used_bytes for p in gpu.points] if gpu else []
    gib = 2 ** 30
    if gpu and any(v is not None for v in used):
        total = gpu.mem_total_bytes or (peaks.device_total_bytes if peaks else None)
        ts = [p.t for p in gpu.points]
        plot = Plot((min(ts), max(max(ts), min(ts) + gpu.interval_s)),
                    (0.0, upper([*(v / gib for v in used if v is not None), (total or 0) / gib], 0.1)), height=170)
        plot.axes(lambda v: f"{v:g} s", lambda v: f"{v:g} GiB", "seconds since the run started")
        _shade_window(plot, gpu)
        keys = [("k-line l-mem", "device memory used (NVML: every process on the GPU)")]
        lines = [(total, "ref ref-limit", "k-limit", "device total")]
        if peaks:
            lines += [(peaks.peak_reserved_bytes, "ref ref-reserved", "k-reserved", "PyTorch peak reserved"),
                      (peaks.peak_allocated_bytes, "ref ref-alloc", "k-alloc", "PyTorch peak allocated")]
        for value, cls, key, label in lines:
            if value:
                plot.hline(value / gib, cls, f"{label} {fmt_bytes(value)}")
                keys.append((key, f"{label} {fmt_bytes(value)}"))
        keys.append(("k-window", "steps after warm-up"))
        plot.line(ts, [None if v is None else v / gib for v in used], "l-mem", "device memory used")
        return legend(keys) + plot.svg("device memory over time")
    if peaks and peaks.device_total_bytes > 0:
        rows = [("peak allocated", peaks.peak_allocated_bytes, "c-fwd"),
                ("peak reserved", peaks.peak_reserved_bytes, "c-opt"),
                ("device total", peaks.device_total_bytes, "c-log")]
        return _horizontal_bars([(label, value / gib, cls, fmt_bytes(value)) for label, value, cls in rows],
                                "PyTorch's peak CUDA memory against the device's", "GiB")
    return None


def _horizontal_bars(rows: list[tuple[str, float, str, str]], label: str, unit: str) -> str:
    height = 20 + 28 * len(rows)
    plot = Plot((0.0, upper([v for _, v, _, _ in rows], 1e-9)), (0.0, 1.0), height=height, left=200)
    for i, (name, value, cls, text) in enumerate(rows):
        y = 10 + 28 * i
        plot.parts.append(f'<text class="row-label" x="192" y="{y + 15}" text-anchor="end">{esc_line(name)}</text>'
                          f'<rect class="{cls}" x="200" y="{y}" width="{max(plot.x(value) - 200, 1):.1f}" height="20">'
                          f'<title>{esc_line(name)}: {esc_line(text)}</title></rect>'
                          f'<text class="value-label" x="{plot.x(value) + 6:.1f}" y="{y + 15}">{esc_line(text)}</text>')
        plot.points += 1
    return plot.svg(f"{label} ({unit})")


def comparison_bars(bars: list[RunBar]) -> str:
    """Each run's throughput with its 95 % noise band; the baseline's value as a dashed line."""
    row, top_pad = 30, 10
    plot = Plot((0.0, upper([b.high or b.value for b in bars], 1e-9)), (0.0, 1.0),
                height=top_pad * 2 + row * len(bars) + 24, left=210)
    value_right = WIDTH - 280
    plot.x.b = value_right
    base = bars[0].value
    plot.parts.append(f'<path class="ref" d="M{plot.x(base):.1f} 4V{top_pad + row * len(bars)}"/>')
    for i, bar in enumerate(bars):
        y = top_pad + row * i
        name = one_line(bar.name)
        short = name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"
        cls = "bar-base" if i == 0 else "bar-run" if bar.significant else "bar-same"
        band = f", 95 % band {bar.low:,.1f}–{bar.high:,.1f}" if bar.low is not None and bar.high is not None else \
            ", noise unknown (too few steps)"
        tip = f"{name}: {bar.value:,.1f} {bar.measure}{band}; {bar.verdict}"
        plot.parts.append(
            f'<text class="row-label" x="202" y="{y + 16}" text-anchor="end">{esc_line(short)}<title>{esc_line(name)}'
            f'</title></text><rect class="{cls}" x="210" y="{y + 3}" width="{max(plot.x(bar.value) - 210, 1):.1f}" '
            f'height="18"><title>{esc_line(tip)}</title></rect>')
        end = plot.x(bar.value)
        if bar.low is not None and bar.high is not None:
            lo, hi = plot.x(bar.low), plot.x(bar.high)
            plot.parts.append(f'<path class="whisker" d="M{lo:.1f} {y + 12}H{hi:.1f}M{lo:.1f} {y + 6}V{y + 18}'
                              f'M{hi:.1f} {y + 6}V{y + 18}"/>')
            end = hi
        plot.parts.append(f'<text class="value-label" x="{end + 6:.1f}" y="{y + 16}">{bar.value:,.1f}</text>'
                          f'<text class="verdict" x="{value_right + 70}" y="{y + 16}">{esc_line(bar.verdict)}</text>')
        plot.points += 1
    axis_y = top_pad + row * len(bars) + 16
    plot.parts.append(f'<text class="axis-label" x="{(210 + value_right) / 2:.0f}" y="{axis_y}" text-anchor="middle">'
                      f'{esc_line(bars[0].measure)}, 95 % band from each run\'s own window-to-window noise</text>')
    keys = [("k-base", "baseline"), ("k-run", "faster or slower beyond noise"), ("k-same", "inside the noise")]
    return legend(keys) + plot.svg(f"{bars[0].measure} per run")


def comparison_splits(bars: list[RunBar]) -> str | None:
    runs = [b for b in bars if b.split is not None and b.step_time_s]
    if not runs:
        return None
    row = 30
    plot = Plot((0.0, upper([b.step_time_s for b in runs], 1e-9)), (0.0, 1.0), height=20 + row * len(runs), left=210)
    for i, bar in enumerate(runs):
        y = 10 + row * i
        name = one_line(bar.name)
        short = name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"
        plot.parts.append(f'<text class="row-label" x="202" y="{y + 16}" text-anchor="end">{esc_line(short)}</text>')
        x = 0.0
        for label, attr in SPLIT_ROWS:
            seconds = getattr(bar.split, attr)
            if seconds <= 0:
                continue
            plot.parts.append(f'<rect class="{SPLIT_CLASS[attr]}" x="{plot.x(x):.1f}" y="{y + 3}" '
                              f'width="{max(plot.x(x + seconds) - plot.x(x), 0.5):.1f}" height="18">'
                              f'<title>{esc_line(name)}: {esc_line(label)} {fmt_ms(seconds)}</title></rect>')
            x += seconds
        plot.parts.append(f'<text class="value-label" x="{plot.x(x) + 6:.1f}" y="{y + 16}">{fmt_ms(x)}</text>')
        plot.points += 1
    keys = [(SPLIT_CLASS[attr], label) for label, attr in SPLIT_ROWS]
    return legend(keys) + plot.svg("step-time split per run")
