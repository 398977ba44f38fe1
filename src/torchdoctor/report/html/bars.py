"""Bar charts: the step-time split, PyTorch's memory peaks, and before/after throughput per
run with its noise band. Bars run left to right, one row per item, names on the left."""

from __future__ import annotations

from torchdoctor.model.figures import MemoryPeaks, RunBar, TimeSplit
from torchdoctor.model.units import GIB, format_bytes
from torchdoctor.report.common import SPLIT_ROWS, fmt_ms, one_line
from torchdoctor.report.html.svg import WIDTH, Plot, legend, upper
from torchdoctor.report.html.text import esc_line

SPLIT_CLASS = {"data_wait_s": "c-data", "forward_and_other_s": "c-fwd", "backward_s": "c-bwd",
               "optimizer_s": "c-opt", "eval_s": "c-eval", "checkpoint_s": "c-ckpt", "logging_s": "c-log"}
NAME_CHARS = 30  # a run name on a row; the full name is in its tooltip
ROW, BAR = 30, 18  # pixels per row, bar height
NAMES = 210  # the left margin that holds the row names


def _short(name: str) -> str:
    name = one_line(name)
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"


def _stack(plot: Plot, split: TimeSplit, y: float, height: float, owner: str = "") -> float:
    """The split's parts side by side from zero; returns where they end (the step time)."""
    x = 0.0
    for label, attr in SPLIT_ROWS:
        seconds = getattr(split, attr)
        if seconds > 0:
            plot.hbar(x, x + seconds, y, height, SPLIT_CLASS[attr], f"{owner}{label}: {fmt_ms(seconds)}")
            plot.points += 1
            x += seconds
    return x


def split_bar(split: TimeSplit, step_s: float) -> str:
    plot = Plot((0.0, step_s), (0.0, 1.0), height=56, left=8)
    _stack(plot, split, 8, 40)
    rows = "".join(f'<tr><td><span class="key {SPLIT_CLASS[attr]}"></span>{esc_line(label)}</td>'
                   f'<td class="num">{fmt_ms(getattr(split, attr))}</td>'
                   f'<td class="num">{getattr(split, attr) / step_s:.0%}</td></tr>' for label, attr in SPLIT_ROWS)
    table = ('<table class="grid split"><thead><tr><th>part</th><th class="num">per step</th>'
             f'<th class="num">share</th></tr></thead><tbody>{rows}</tbody></table>')
    return plot.svg("step-time split, stacked") + table


def memory_peaks(peaks: MemoryPeaks) -> str:
    gib = GIB
    rows = [("peak allocated", peaks.peak_allocated_bytes, "c-fwd"),
            ("peak reserved", peaks.peak_reserved_bytes, "c-opt"),
            ("device total", peaks.device_total_bytes, "c-log")]
    plot = Plot((0.0, upper([v / gib for _, v, _ in rows], 1e-9)), (0.0, 1.0), height=20 + ROW * len(rows), left=NAMES)
    plot.x.b = WIDTH - 90  # room for the value after the longest bar
    for i, (name, value, cls) in enumerate(rows):
        y = 10 + ROW * i
        plot.label(NAMES - 8, y + 14, name, "row-label", "end")
        plot.hbar(0.0, value / gib, y + 1, BAR, cls, f"{name}: {format_bytes(value)}")
        plot.label(plot.x(value / gib) + 6, y + 14, format_bytes(value), "value-label")
        plot.points += 1
    return plot.svg("PyTorch's peak CUDA memory against the device's (GiB)")


def comparison_bars(bars: list[RunBar]) -> str:
    """Each run's throughput with its 95 % noise band; the baseline's value as a dotted line."""
    verdicts = WIDTH - 190  # the verdict column on the right
    plot = Plot((0.0, upper([b.high or b.value for b in bars], 1e-9)), (0.0, 1.0), height=44 + ROW * len(bars),
                left=NAMES)
    plot.x.b = verdicts - 70  # room after the longest bar for its value
    plot.parts.append(f'<path class="ref" d="M{plot.x(bars[0].value):.1f} 4V{10 + ROW * len(bars)}"/>')
    for i, bar in enumerate(bars):
        y = 10 + ROW * i
        banded = bar.low is not None and bar.high is not None
        band = f", 95 % band {bar.low:,.1f}–{bar.high:,.1f}" if banded else ", noise unknown (too few steps)"
        cls = "bar-base" if i == 0 else "bar-run" if bar.significant else "bar-same"
        plot.label(NAMES - 8, y + 16, _short(bar.name), "row-label", "end", one_line(bar.name))
        plot.hbar(0.0, bar.value, y + 3, BAR, cls, f"{one_line(bar.name)}: {bar.value:,.1f} {bar.measure}{band}; "
                                                   f"{bar.verdict}")
        end = plot.x(bar.value)
        if banded:
            lo, hi = plot.x(bar.low), plot.x(bar.high)
            plot.parts.append(f'<path class="whisker" d="M{lo:.1f} {y + 12}H{hi:.1f}M{lo:.1f} {y + 6}V{y + 18}'
                              f'M{hi:.1f} {y + 6}V{y + 18}"/>')
            end = hi
        plot.label(end + 6, y + 16, f"{bar.value:,.1f}", "value-label")
        plot.label(verdicts, y + 16, _short_verdict(bar), "verdict", title=bar.verdict)
        plot.points += 1
    plot.label((NAMES + plot.x.b) / 2, 26 + ROW * len(bars),
               f"{bars[0].measure}, 95 % band from each run's own window-to-window noise", "axis-label", "middle")
    keys = [("k-base", "baseline"), ("k-run", "faster or slower beyond noise"), ("k-same", "inside the noise")]
    return legend(keys) + plot.svg(f"{bars[0].measure} per run")


def _short_verdict(bar: RunBar) -> str:
    """The verdict in a few words for the chart; the tooltip and the table have it in full."""
    if bar.ratio is None:
        return bar.verdict[:NAME_CHARS]
    band = f"±{bar.noise:.1%}" if bar.noise is not None else "noise unknown"
    return f"{bar.ratio:.2f}x ({band})" if bar.significant else f"no change ({bar.ratio:.2f}x, {band})"


def comparison_splits(bars: list[RunBar]) -> str | None:
    runs = [b for b in bars if b.split is not None and b.step_time_s]
    if not runs:
        return None
    plot = Plot((0.0, upper([b.step_time_s for b in runs], 1e-9)), (0.0, 1.0), height=20 + ROW * len(runs),
                left=NAMES)
    plot.x.b = WIDTH - 90  # room for the step time after the longest bar
    for i, bar in enumerate(runs):
        y = 10 + ROW * i
        plot.label(NAMES - 8, y + 16, _short(bar.name), "row-label", "end", one_line(bar.name))
        end = _stack(plot, bar.split, y + 3, BAR, f"{one_line(bar.name)}: ")
        plot.label(plot.x(end) + 6, y + 16, fmt_ms(end), "value-label")
    keys = [(SPLIT_CLASS[attr], label) for label, attr in SPLIT_ROWS]
    return legend(keys) + plot.svg("step-time split per run")
