"""A small SVG plotting kit: scales, ticks, axes, lines, bands, bars and markers.

Drawn from Python so report.html needs no script and no library: the page is static markup
that prints, works offline and runs nothing. Colours come from CSS classes, so the same
SVG follows the page's light or dark palette. Every text that reaches the SVG is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from torchdoctor.report.html.text import esc, esc_line

WIDTH = 880
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 12, 34  # room for the y tick labels and the x axis label
RUG_ROW_PX = 9


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 × 10^k) covering [lo, hi]."""
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def upper(values: Sequence[float | None], floor: float) -> float:
    """A y-axis top a little above the largest value (and at least `floor`)."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    return max([floor, *present]) * 1.08


class Scale:
    """Maps data values in [lo, hi] onto pixels in [a, b]."""

    def __init__(self, lo: float, hi: float, a: float, b: float) -> None:
        self.lo, self.hi, self.a, self.b = lo, hi, a, b

    def __call__(self, value: float) -> float:
        if not math.isfinite(value) or not self.hi > self.lo:  # a damaged record's NaN must not reach the SVG
            return (self.a + self.b) / 2
        clipped = min(max(value, self.lo), self.hi)
        return self.a + (clipped - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


class Plot:
    """One chart: data coordinates in, SVG elements out, in drawing order."""

    def __init__(self, x: tuple[float, float], y: tuple[float, float], height: int = 200,
                 left: int = LEFT) -> None:
        self.height = height
        self.x = Scale(x[0], x[1], left, WIDTH - RIGHT)
        self.y = Scale(y[0], y[1], height - BOTTOM, TOP)
        self.parts: list[str] = []
        self.points = 0  # data points drawn, for the page and its tests

    def axes(self, x_fmt: Callable[[float], str], y_fmt: Callable[[float], str], x_label: str) -> None:
        x0, x1, y0, y1 = self.x.a, self.x.b, self.y.a, self.y.b
        grid, labels = [], []
        for tick in nice_ticks(self.y.lo, self.y.hi, 4):
            py = self.y(tick)
            grid.append(f"M{_n(x0)} {_n(py)}H{_n(x1)}")
            labels.append(f'<text x="{_n(x0 - 6)}" y="{_n(py + 4)}" text-anchor="end">{esc_line(y_fmt(tick))}</text>')
        for tick in nice_ticks(self.x.lo, self.x.hi, 8):
            px = self.x(tick)
            labels.append(f'<text x="{_n(px)}" y="{_n(y0 + 16)}" text-anchor="middle">{esc_line(x_fmt(tick))}</text>')
        self.parts.append(f'<path class="grid" d="{"".join(grid)}"/>')
        self.parts.append(f'<path class="axis" d="M{_n(x0)} {_n(y1)}V{_n(y0)}H{_n(x1)}"/>')
        self.parts.append(f'<g class="ticks">{"".join(labels)}</g>')
        self.parts.append(f'<text class="axis-label" x="{_n((x0 + x1) / 2)}" y="{self.height - 2}" '
                          f'text-anchor="middle">{esc_line(x_label)}</text>')

    def line(self, xs: Sequence[float], ys: Sequence[float | None], cls: str, title: str = "") -> None:
        """A polyline; a missing value (None) breaks it instead of dropping to zero."""
        d, pen_down = [], False
        for x, y in zip(xs, ys):
            if y is None or not math.isfinite(y):
                pen_down = False
                continue
            d.append(f"{'L' if pen_down else 'M'}{_n(self.x(x))} {_n(self.y(y))}")
            pen_down = True
            self.points += 1
        if d:
            self.parts.append(f'<path class="series {cls}" d="{"".join(d)}">{_title(title)}</path>')

    def band(self, xs: Sequence[float], lows: Sequence[float], highs: Sequence[float], cls: str,
             title: str = "") -> None:
        top = [f"{_n(self.x(x))} {_n(self.y(h))}" for x, h in zip(xs, highs)]
        bottom = [f"{_n(self.x(x))} {_n(self.y(lo))}" for x, lo in reversed(list(zip(xs, lows)))]
        if top:
            self.parts.append(f'<path class="{cls}" d="M{"L".join(top + bottom)}Z">{_title(title)}</path>')

    def bars(self, xs: Sequence[float], ys: Sequence[float], width: float, cls: str, title: str = "") -> None:
        """Vertical bars from zero, `width` in data units, as one path."""
        half = max(0.5, (self.x(width) - self.x(0)) * 0.4)
        base = self.y(0)
        d = [f"M{_n(self.x(x) - half)} {_n(base)}V{_n(self.y(y))}h{_n(2 * half)}V{_n(base)}Z" for x, y in zip(xs, ys)]
        self.points += len(d)
        if d:
            self.parts.append(f'<path class="series {cls}" d="{"".join(d)}">{_title(title)}</path>')

    def dots(self, xs: Sequence[float], ys: Sequence[float], cls: str, titles: Sequence[str]) -> None:
        for x, y, title in zip(xs, ys, titles):
            self.parts.append(f'<circle class="{cls}" cx="{_n(self.x(x))}" cy="{_n(self.y(y))}" r="3">'
                              f'{_title(title)}</circle>')

    def vline(self, x: float, cls: str, title: str) -> None:
        px = _n(self.x(x))
        self.parts.append(f'<path class="{cls}" d="M{px} {_n(self.y.b)}V{_n(self.y.a)}">{_title(title)}</path>')

    def hline(self, y: float, cls: str, title: str) -> None:
        """A reference line across the plot; its label belongs in the chart's legend."""
        py = _n(self.y(y))
        self.parts.append(f'<path class="{cls}" d="M{_n(self.x.a)} {py}H{_n(self.x.b)}">{_title(title)}</path>')

    def rug(self, xs: Sequence[float], row: int, cls: str, title: str) -> None:
        """Short ticks along the top edge, one row per kind: many events without hiding the data."""
        top = self.y.b + 2 + RUG_ROW_PX * row
        d = "".join(f"M{_n(self.x(x))} {_n(top)}v7" for x in xs)
        if d:
            self.parts.append(f'<path class="{cls}" d="{d}">{_title(title)}</path>')

    def span(self, x0: float, x1: float, cls: str, title: str) -> None:
        a, b = self.x(x0), self.x(x1)
        self.parts.append(f'<rect class="{cls}" x="{_n(a)}" y="{_n(self.y.b)}" width="{_n(max(b - a, 1))}" '
                          f'height="{_n(self.y.a - self.y.b)}">{_title(title)}</rect>')

    def hbar(self, x0: float, x1: float, y: float, height: float, cls: str, title: str) -> None:
        """A horizontal bar from data x0 to x1 at pixel row y (bar charts run left to right)."""
        a, b = self.x(x0), self.x(x1)
        self.parts.append(f'<rect class="{cls}" x="{_n(a)}" y="{_n(y)}" width="{_n(max(b - a, 0.5))}" '
                          f'height="{_n(height)}">{_title(title)}</rect>')

    def label(self, x: float, y: float, text: str, cls: str, anchor: str = "start", title: str = "") -> None:
        """Text at pixel coordinates (row labels, values next to bars)."""
        self.parts.append(f'<text class="{cls}" x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}">{esc_line(text)}'
                          f'{_title(title)}</text>')

    def svg(self, label: str) -> str:
        return (f'<svg class="chart" viewBox="0 0 {WIDTH} {self.height}" role="img" aria-label="{esc_line(label)}" '
                f'data-points="{self.points}">'
                f'{"".join(self.parts)}</svg>')


def legend(items: Sequence[tuple[str, str]]) -> str:
    """The key to a chart, as HTML above it: (CSS class of the swatch, label) pairs."""
    keys = "".join(f'<li><span class="key {cls}"></span>{esc_line(label)}</li>' for cls, label in items)
    return f'<ul class="legend">{keys}</ul>'


def _title(text: str) -> str:
    return f"<title>{esc(text)}</title>" if text else ""
