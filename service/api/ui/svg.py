"""Server-side SVG charts (no JavaScript): a line chart on a log2 x axis and a horizontal bar
chart, and the frame, ticks and document that plots.py's charts share. Every text that
reaches the markup is escaped; numbers are formatted by us. A chart scales to its container
(``viewBox`` and ``width="100%"``), so it fits a narrow window.

Each drawn series is an element with ``class="series"`` and a ``data-series`` label (lines are
``<polyline>``, bars ``<rect>``), a ceiling is ``class="ceiling"``, a winner's marker
``class="winner-mark"``, a point or bar of a variant stopped early as slower
``class="... aborted"``, so tests and users can find them; ``<title>`` children give hover
text in any browser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from markupsafe import Markup, escape

from tuner.units import axis_scale, format_number

__all__ = [
    "Point",
    "Series",
    "Bar",
    "line_chart",
    "bar_chart",
    "PALETTE",
    "WIDTH",
    "HEIGHT",
    "LEFT",
    "RIGHT",
    "TOP",
    "BOTTOM",
    "nice_max",
    "frame",
    "ytick",
    "document",
    "winner_mark",
    "tick_text",
    "ABORTED_NOTE",
]

#: colour-blind-safe palette (Okabe-Ito), then greys
PALETTE = (
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
    "#999999", "#666666",
)  # fmt: skip
WIDTH, HEIGHT = 720, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 20, 44
#: how a point or bar of an aborted variant is explained in a legend or hover text
ABORTED_NOTE = "aborted early as slower: its time is a partial median"


class Point(NamedTuple):
    x: float
    y: float
    hover: str
    #: ``ok`` (verified) or ``aborted`` (timing stopped early as slower: a partial median)
    kind: str = "ok"


@dataclass
class Series:
    label: str
    #: points; x > 0 (log2 axis)
    points: list[Point] = field(default_factory=list)


@dataclass
class Bar:
    label: str
    value: float
    kind: str = "variant"  # variant | winner | baseline | aborted
    note: str = ""


def nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exponent:
            return step * exponent
    return 10 * exponent


def tick_text(value: float) -> str:
    """An axis tick: ``0``, ``2.5``, ``50``, ``1,000``."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:g}"


def winner_mark(x: float, y: float, hover: str, key: str, css: str = "winner-mark") -> str:
    """A diamond around a winner's point."""
    return (
        f'<path class="{css}" data-x="{escape(key)}" d="M{x:.1f},{y - 8:.1f} '
        f'L{x + 8:.1f},{y:.1f} L{x:.1f},{y + 8:.1f} L{x - 8:.1f},{y:.1f} Z" fill="none" '
        f'stroke="#000" stroke-width="2"><title>{escape(hover)}</title></path>'
    )


def _legend_entry(index: int, mark: str, text: str) -> str:
    y = TOP + 14 * index + 6
    return f'{mark}<text class="legend" x="{WIDTH - RIGHT + 34}" y="{y + 4}">{escape(text)}</text>'


def line_chart(
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    unit: str,
    ceiling: float | None = None,
    ceiling_label: str = "",
    winners: Sequence[Point] = (),
) -> Markup:
    """Lines over a log2 x axis (K), y from zero in the unit of the largest value; hollow
    points for aborted variants, a diamond on each winner, an optional dashed ceiling."""
    xs = [p.x for s in series for p in s.points if p.x > 0]
    if not xs:
        return Markup('<p class="empty">nothing verified to plot yet</p>')
    ys = [p.y for s in series for p in s.points] + [w.y for w in winners]
    factor, shown = axis_scale(ys + ([ceiling] if ceiling else []), unit)
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    top = nice_max(max(ys + ([ceiling] if ceiling else [])) * factor * 1.05)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (math.log2(x) - lo) / (hi - lo) * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - y * factor / top * plot_h

    parts = [frame(x_label, f"{y_label} {shown}", plot_w, plot_h)]
    for step in range(5):
        value = top * step / 4
        parts.append(ytick(TOP + plot_h - value / top * plot_h, tick_text(value)))
    for x in sorted(set(xs)):
        parts.append(
            f'<text class="tick" x="{px(x):.1f}" y="{TOP + plot_h + 16}" '
            f'text-anchor="middle">{escape(format_number(x))}</text>'
        )
    if ceiling:
        parts.append(
            f'<line class="ceiling" data-value="{ceiling:.1f}" x1="{LEFT}" x2="{LEFT + plot_w}" '
            f'y1="{py(ceiling):.1f}" y2="{py(ceiling):.1f}" stroke="#444" stroke-dasharray="6 4">'
            f"<title>{escape(ceiling_label)}</title></line>"
            f'<text class="ceiling-label" x="{LEFT + plot_w - 4}" y="{py(ceiling) - 5:.1f}" '
            f'text-anchor="end">{escape(ceiling_label)}</text>'
        )
    for index, line in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        points = sorted(line.points)
        coords = " ".join(f"{px(p.x):.1f},{py(p.y):.1f}" for p in points)
        if len(points) == 1:  # one point has no extent: draw it as a short dash through it
            x, y = px(points[0].x), py(points[0].y)
            coords = f"{x - 6:.1f},{y:.1f} {x + 6:.1f},{y:.1f}"
        label = escape(line.label)
        parts.append(
            f'<g class="line"><polyline class="series" data-series="{label}" points="{coords}" '
            f'fill="none" stroke="{colour}" stroke-width="2"><title>{label}</title></polyline>'
        )
        for p in points:
            fill = "#fff" if p.kind == "aborted" else colour
            parts.append(
                f'<circle class="point {p.kind}" cx="{px(p.x):.1f}" cy="{py(p.y):.1f}" r="3.5" '
                f'fill="{fill}" stroke="{colour}" stroke-width="1.5">'
                f"<title>{escape(p.hover)}</title></circle>"
            )
        parts.append("</g>")
        legend_y = TOP + 14 * index + 6
        parts.append(
            _legend_entry(
                index,
                f'<line x1="{WIDTH - RIGHT + 12}" x2="{WIDTH - RIGHT + 30}" y1="{legend_y}" '
                f'y2="{legend_y}" stroke="{colour}" stroke-width="3"/>',
                line.label,
            )
        )
    for w in winners:
        parts.append(winner_mark(px(w.x), py(w.y), w.hover, f"{w.x:g}"))
    extra = len(series)
    if winners:
        y = TOP + 14 * extra + 6
        mark = winner_mark(WIDTH - RIGHT + 21, y, "", "", "legend-mark")
        parts.append(_legend_entry(extra, mark, "winner"))
        extra += 1
    if any(p.kind == "aborted" for s in series for p in s.points):
        y = TOP + 14 * extra + 6
        circle = f'<circle cx="{WIDTH - RIGHT + 21}" cy="{y}" r="3.5" fill="#fff" stroke="#333"/>'
        parts.append(_legend_entry(extra, circle, "aborted early (partial time)"))
    return document(parts, HEIGHT, f"{y_label} {shown}")


def bar_chart(bars: Sequence[Bar], *, unit: str, title: str) -> Markup:
    """Horizontal bars, longest first, in the unit of the largest; the winner, vendor
    baselines and aborted variants stand out."""
    if not bars:
        return Markup('<p class="empty">nothing verified to plot yet</p>')
    factor, shown = axis_scale([b.value for b in bars], unit)
    row, left, right = 18, 300, 90
    height = TOP + row * len(bars) + 30
    top = nice_max(max(b.value for b in bars) * factor)
    plot_w = WIDTH - left - right
    colours = {"variant": "#56B4E9", "winner": "#0072B2", "baseline": "#D55E00"}
    parts = []
    for index, bar in enumerate(sorted(bars, key=lambda b: -b.value)):
        y = TOP + index * row
        value = bar.value * factor
        width = max(1.0, value / top * plot_w)
        label = escape(bar.label)
        hover = escape(f"{bar.label}: {format_number(value)} {shown} {bar.note}".strip())
        paint = (
            'fill="#fff" stroke="#777" stroke-dasharray="3 2"'
            if bar.kind == "aborted"
            else f'fill="{colours.get(bar.kind, "#999")}"'
        )
        parts.append(
            f'<text class="bar-label" x="{left - 6}" y="{y + 12}" text-anchor="end">{label}</text>'
            f'<rect class="series {bar.kind}" data-series="{label}" x="{left}" y="{y + 2}" '
            f'width="{width:.1f}" height="{row - 5}" {paint}>'
            f"<title>{hover}</title></rect>"
            f'<text class="bar-value" x="{left + width + 4:.1f}" y="{y + 12}">'
            f"{escape(format_number(value))}</text>"
        )
    parts.append(f'<text class="axis-label" x="{left}" y="{height - 8}">{escape(shown)}</text>')
    return document(parts, height, title)


def frame(
    x_label: str, y_label: str, plot_w: int, plot_h: int, top: int = TOP, height: int = HEIGHT
) -> str:
    return (
        f'<rect class="frame" x="{LEFT}" y="{top}" width="{plot_w}" height="{plot_h}" '
        f'fill="none" stroke="#bbb"/>'
        f'<text class="axis-label" x="{LEFT + plot_w / 2:.0f}" y="{height - 8}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
        f'<text class="axis-label" transform="translate(14 {top + plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )


def ytick(y: float, text: str) -> str:
    return (
        f'<line x1="{LEFT - 4}" x2="{LEFT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#888"/>'
        f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>'
    )


def document(
    parts: list[str],
    height: int,
    title: str,
    css: str = "chart",
    attrs: str = "",
    width: int = WIDTH,
) -> Markup:
    """The ``<svg>``: its drawing size in ``viewBox``, its width the container's. ``attrs``
    (already escaped) are added to the element."""
    body = "".join(parts)
    return Markup(
        f'<svg class="{css}" {attrs} xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMinYMin meet" '
        f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>{body}</svg>'
    )
