"""The memory charts: what fills memory at the peak (a stacked bar), live tensor memory through
the peak step, and `torchdoctor memory`'s peak and samples/s against batch size."""

from __future__ import annotations

from torchdoctor.model.figures import MemoryFigure, ScalingFigure
from torchdoctor.model.memory_record import PARTS
from torchdoctor.model.units import GIB, MIB, format_bytes
from torchdoctor.report.html.svg import Plot, legend, upper
from torchdoctor.report.html.text import esc_line

PART_CLASS = {"parameters": "c-fwd", "gradients": "c-bwd", "optimizer_states": "c-opt", "activations": "c-data",
              "temporaries": "c-eval", "other": "c-log"}
PART_LABEL = {"parameters": "parameters", "gradients": "gradients", "optimizer_states": "optimizer states",
              "activations": "activations (saved for backward)", "temporaries": "temporaries", "other": "other"}
SMALLEST_SHARE = 0.001  # a part under 0.1 % of the peak (a running loss) is a sliver: left out of the key
OUTCOME_CLASS = {"fits": "dot-fits", "over-limit": "dot-over", "oom": "dot-over", "failed": "dot-failed"}


def _unit(top_bytes: float) -> tuple[float, str]:
    """Charts are drawn in MiB, or GiB from 4 GiB up, so the axis ticks are round numbers."""
    return (GIB, "GiB") if top_bytes >= 4 * GIB else (MIB, "MiB")


def _axis(unit: str):
    return lambda v: f"{v:g} {unit}"


def breakdown_bar(fig: MemoryFigure) -> str:
    plot = Plot((0.0, float(max(fig.peak_bytes, 1))), (0.0, 1.0), height=56, left=8)
    x = 0.0
    for part in PARTS:
        value = fig.parts.get(part, 0)
        if value > 0:
            plot.hbar(x, x + value, 8, 40, PART_CLASS[part], f"{PART_LABEL[part]}: {format_bytes(value)}")
            plot.points += 1
            x += value
    rows = "".join(f'<tr><td><span class="key {PART_CLASS[p]}"></span>{esc_line(PART_LABEL[p])}</td>'
                   f'<td class="num">{format_bytes(fig.parts[p])}</td>'
                   f'<td class="num">{fig.parts[p] / fig.peak_bytes:.0%}</td></tr>'
                   for p in PARTS if fig.parts.get(p, 0) > SMALLEST_SHARE * fig.peak_bytes)
    table = ('<table class="grid split"><thead><tr><th>part</th><th class="num">bytes</th>'
             f'<th class="num">share</th></tr></thead><tbody>{rows}</tbody></table>')
    return plot.svg(f"tensor memory at the {fig.title}, stacked") + table


def timeline_chart(fig: MemoryFigure) -> str | None:
    if len(fig.timeline) < 2:
        return None
    events = [e for e, _ in fig.timeline]
    size, unit = _unit(max(b for _, b in fig.timeline))
    values = [b / size for _, b in fig.timeline]
    plot = Plot((0.0, float(max(events[-1], 1))), (0.0, upper(values, 1e-3)), height=170)
    plot.axes(lambda v: f"{v:.0f}", _axis(unit), "allocations and frees in the step, in order")
    keys = [("k-line", "live tensor memory")]
    for event, label, kind in ((fig.backward_event, "backward begins", "eval"),
                               (fig.optimizer_event, "optimizer step begins", "checkpoint")):
        if event is not None:
            plot.vline(event, f"mk mk-{kind}", label)
            keys.append((f"k-{kind}", label))
    plot.line(events, values, "l-mem", "live tensor memory")
    return legend(keys) + plot.svg("live tensor memory through the peak step")


def scaling_charts(fig: ScalingFigure) -> list[tuple[str, str]]:
    points = sorted(fig.points, key=lambda p: p.batch)
    if not points:
        return []
    right = max([p.batch for p in points] + [fig.verified_max_batch or 0, fig.predicted_max_batch or 0]) * 1.08
    charts = []
    needs = [p.need_bytes for p in points if p.need_bytes]
    if needs:
        size, unit = _unit(max([*needs, fig.capacity_bytes or 0]))
        top = upper([v / size for v in (*needs, fig.usable_bytes, fig.capacity_bytes) if v], 1e-3)
        plot = Plot((0.0, right), (0.0, top), height=200)
        plot.axes(lambda v: f"{v:.0f}", _axis(unit), "batch size (samples per step)")
        keys = [("k-fits", "measured: fits"), ("k-over", "measured: does not fit")]
        if fig.fits:
            xs = [right * i / 40 for i in range(41)]
            plot.line(xs, [max(f + b * x for _, f, b in fig.fits) / size for x in xs], "l-fit", "the fit: peak(b)")
            keys.append(("k-fit", "fit: fixed + b × per sample"))
        for value, label in ((fig.capacity_bytes, "capacity"), (fig.usable_bytes, "usable (capacity − headroom)")):
            if value:
                plot.hline(value / size, "ref ref-limit" if label == "capacity" else "ref",
                           f"{label} {format_bytes(value)}")
                keys.append(("k-limit" if label == "capacity" else "k-ref", f"{label} {format_bytes(value)}"))
        for outcome, cls in OUTCOME_CLASS.items():
            chosen = [p for p in points if p.outcome == outcome and p.need_bytes]
            plot.dots([p.batch for p in chosen], [p.need_bytes / size for p in chosen], cls,
                      [f"batch {p.batch}: {outcome}, {format_bytes(p.need_bytes)}" for p in chosen])
            plot.points += len(chosen)
        charts.append(("Peak memory against batch size", legend(keys) + plot.svg("peak memory against batch size")))
    rates = [p for p in points if p.samples_per_s]
    if len(rates) >= 2:
        plot = Plot((0.0, right), (0.0, upper([p.samples_per_s for p in rates], 1.0)), height=170)
        plot.axes(lambda v: f"{v:.0f}", lambda v: f"{v:g}", "batch size (samples per step)")
        plot.line([p.batch for p in rates], [p.samples_per_s for p in rates], "l-step", "samples/s")
        plot.dots([p.batch for p in rates], [p.samples_per_s for p in rates], "dot-fits",
                  [f"batch {p.batch}: {p.samples_per_s:,.1f} samples/s" for p in rates])
        charts.append(("Samples/s against batch size", legend([("k-line", "samples/s over each trial's timed steps")])
                       + plot.svg("samples per second against batch size")))
    return charts
