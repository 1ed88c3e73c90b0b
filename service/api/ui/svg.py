"""Server-side SVG charts (no JavaScript): a line chart on a log2 x axis and a horizontal bar
chart. Every text that reaches the markup is escaped; numbers are formatted by us.

Each drawn series is an element with ``class="series"`` and a ``data-series`` label (lines are
``<polyline>``, bars ``<rect>``), a ceiling is ``class="ceiling"``, so tests and users can find
them; ``<title>`` children give hover text in any browser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

__all__ = ["Series", "Bar", "line_chart", "bar_chart", "PALETTE"]

#: colour-blind-safe palette (Okabe-Ito), then greys
PALETTE = (
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
    "#999999", "#666666",
)  # fmt: skip
_WIDTH, _HEIGHT = 720, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 190, 20, 44


@dataclass
class Series:
    label: str
    #: (x, y, hover text) points; x > 0 (log2 axis)
    points: list[tuple[float, float, str]] = field(default_factory=list)


@dataclass
class Bar:
    label: str
    value: float
    kind: str = "variant"  # variant | winner | baseline
    note: str = ""


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exponent:
            return step * exponent
    return 10 * exponent


def line_chart(
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    ceiling: float | None = None,
    ceiling_label: str = "",
) -> Markup:
    """Lines over a log2 x axis (K), y from zero; an optional dashed ceiling line."""
    xs = [p[0] for s in series for p in s.points if p[0] > 0]
    ys = [p[1] for s in series for p in s.points]
    if not xs:
        return Markup('<p class="empty">nothing verified to plot yet</p>')
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    top = _nice_max(max(ys + ([ceiling] if ceiling else [])) * 1.05)
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + (math.log2(x) - lo) / (hi - lo) * plot_w

    def py(y: float) -> float:
        return _TOP + plot_h - y / top * plot_h

    parts = [_frame(x_label, y_label, plot_w, plot_h)]
    for step in range(5):
        value = top * step / 4
        parts.append(_ytick(py(value), _fmt(value)))
    for x in sorted(set(xs)):
        parts.append(
            f'<text class="tick" x="{px(x):.1f}" y="{_TOP + plot_h + 16}" '
            f'text-anchor="middle">{escape(_fmt(x))}</text>'
        )
    if ceiling:
        parts.append(
            f'<line class="ceiling" data-value="{ceiling:.1f}" x1="{_LEFT}" x2="{_LEFT + plot_w}" '
            f'y1="{py(ceiling):.1f}" y2="{py(ceiling):.1f}" stroke="#444" stroke-dasharray="6 4">'
            f"<title>{escape(ceiling_label)}</title></line>"
            f'<text class="ceiling-label" x="{_LEFT + plot_w - 4}" y="{py(ceiling) - 5:.1f}" '
            f'text-anchor="end">{escape(ceiling_label)}</text>'
        )
    for index, line in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        points = sorted(line.points)
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in points)
        if len(points) == 1:  # one point has no extent: draw it as a short dash through it
            x, y, _ = points[0]
            coords = f"{px(x) - 6:.1f},{py(y):.1f} {px(x) + 6:.1f},{py(y):.1f}"
        label = escape(line.label)
        parts.append(
            f'<g class="line"><polyline class="series" data-series="{label}" points="{coords}" '
            f'fill="none" stroke="{colour}" stroke-width="2"><title>{label}</title></polyline>'
        )
        for x, y, hover in points:
            parts.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(hover)}</title></circle>"
            )
        parts.append("</g>")
        legend_y = _TOP + 14 * index + 6
        parts.append(
            f'<line x1="{_WIDTH - _RIGHT + 12}" x2="{_WIDTH - _RIGHT + 30}" y1="{legend_y}" '
            f'y2="{legend_y}" stroke="{colour}" stroke-width="3"/>'
            f'<text class="legend" x="{_WIDTH - _RIGHT + 34}" y="{legend_y + 4}">{label}</text>'
        )
    return _svg(parts, _HEIGHT, y_label)


def bar_chart(bars: Sequence[Bar], *, unit: str, title: str) -> Markup:
    """Horizontal bars, longest first; the winner and vendor baselines stand out."""
    if not bars:
        return Markup('<p class="empty">nothing verified to plot yet</p>')
    row, left, right = 18, 300, 90
    height = _TOP + row * len(bars) + 30
    top = _nice_max(max(b.value for b in bars))
    plot_w = _WIDTH - left - right
    colours = {"variant": "#56B4E9", "winner": "#0072B2", "baseline": "#D55E00"}
    parts = []
    for index, bar in enumerate(sorted(bars, key=lambda b: -b.value)):
        y = _TOP + index * row
        width = max(1.0, bar.value / top * plot_w)
        label = escape(bar.label)
        hover = escape(f"{bar.label}: {_fmt(bar.value)} {unit} {bar.note}".strip())
        parts.append(
            f'<text class="bar-label" x="{left - 6}" y="{y + 12}" text-anchor="end">{label}</text>'
            f'<rect class="series {bar.kind}" data-series="{label}" x="{left}" y="{y + 2}" '
            f'width="{width:.1f}" height="{row - 5}" fill="{colours.get(bar.kind, "#999")}">'
            f"<title>{hover}</title></rect>"
            f'<text class="bar-value" x="{left + width + 4:.1f}" y="{y + 12}">'
            f"{escape(_fmt(bar.value))}</text>"
        )
    parts.append(f'<text class="axis-label" x="{left}" y="{height - 8}">{escape(unit)}</text>')
    return _svg(parts, height, title)


def _frame(x_label: str, y_label: str, plot_w: int, plot_h: int) -> str:
    return (
        f'<rect class="frame" x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" '
        f'fill="none" stroke="#bbb"/>'
        f'<text class="axis-label" x="{_LEFT + plot_w / 2:.0f}" y="{_HEIGHT - 8}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
        f'<text class="axis-label" transform="translate(14 {_TOP + plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )


def _ytick(y: float, text: str) -> str:
    return (
        f'<line x1="{_LEFT - 4}" x2="{_LEFT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#888"/>'
        f'<text class="tick" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>'
    )


def _svg(parts: list[str], height: int, title: str) -> Markup:
    body = "".join(parts)
    return Markup(
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_WIDTH} {height}" '
        f'width="{_WIDTH}" height="{height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>{body}</svg>"
    )
