"""The search views' SVG charts (search_views.py chooses the points): a scatter of time
against one parameter's values, and the best-so-far time against candidates tried.

Time runs on a log10 axis (a legal variant can be 17x slower than its neighbour: on a linear
axis the fast ones would sit on the floor). A verified candidate is a filled dot
(``class="point ok"``), one stopped early as slower a hollow one (``point aborted``), one that
failed (compile error, wrong result, crash, timeout) a red cross on the strip above the plot
(``point failed``): it has no time. The winner has a diamond (``winner-mark``), the
best-so-far line is ``class="best-so-far"``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from service.api.ui.svg import (
    HEIGHT,
    LEFT,
    TOP,
    WIDTH,
    document,
    frame,
    tick_text,
    winner_mark,
    ytick,
)

__all__ = ["Dot", "scatter_chart", "best_so_far_chart"]


@dataclass(frozen=True)
class _Box:
    """A chart's drawing size; the plot inside it. The failed candidates' strip sits above
    the plot, inside the top margin."""

    width: int
    height: int
    top: int = TOP + 16
    right: int = 24
    bottom: int = 44

    @property
    def plot_w(self) -> int:
        return self.width - LEFT - self.right

    @property
    def plot_h(self) -> int:
        return self.height - self.top - self.bottom


#: the best-so-far chart is as wide as the job page's; a scatter, one of a grid, is smaller
_WIDE = _Box(WIDTH, HEIGHT)
_SMALL = _Box(440, 300)
_COLOURS = {"ok": "#0072B2", "aborted": "#0072B2", "failed": "#B22222"}


@dataclass(frozen=True)
class Dot:
    x: float
    #: median µs; None for a candidate that failed (no time)
    y: float | None
    hover: str
    kind: str = "ok"  # ok | aborted | failed
    winner: bool = False
    #: the measurement id (a link target)
    ref: int = 0


class _LogAxis:
    """A log10 time axis over [lo, hi] µs, with ticks at 1, 2 and 5 of each decade."""

    def __init__(self, values: Sequence[float], box: _Box) -> None:
        self.box = box
        lo, hi = min(values), max(values)
        self.lo = math.floor(math.log10(lo) * 4) / 4
        self.hi = math.ceil(math.log10(hi) * 4) / 4
        if self.hi - self.lo < 0.5:
            self.lo, self.hi = self.lo - 0.25, self.hi + 0.25

    def __call__(self, value: float) -> float:
        share = (math.log10(value) - self.lo) / (self.hi - self.lo)
        return self.box.top + self.box.plot_h - share * self.box.plot_h

    def ticks(self) -> list[float]:
        found = []
        for decade in range(math.floor(self.lo), math.ceil(self.hi) + 1):
            for step in (1, 2, 5):
                value = step * 10.0**decade
                if self.lo <= math.log10(value) <= self.hi:
                    found.append(value)
        return found


def _parts(axis: _LogAxis, x_label: str) -> list[str]:
    box = axis.box
    parts = [frame(x_label, "median µs (log scale)", box.plot_w, box.plot_h, box.top, box.height)]
    parts.extend(ytick(axis(value), escape(tick_text(value))) for value in axis.ticks())
    return parts


def _dot_markup(dot: Dot, x: float, axis: _LogAxis | None) -> str:
    hover = f"<title>{escape(dot.hover)}</title>"
    if dot.y is None or axis is None:
        y = TOP + 6
        return (
            f'<path class="point failed" data-ref="{dot.ref}" d="M{x - 4:.1f},{y - 4} '
            f'L{x + 4:.1f},{y + 4} M{x - 4:.1f},{y + 4} L{x + 4:.1f},{y - 4}" '
            f'stroke="{_COLOURS["failed"]}" stroke-width="2">{hover}</path>'
        )
    fill = "#fff" if dot.kind == "aborted" else _COLOURS[dot.kind]
    return (
        f'<circle class="point {dot.kind}" data-ref="{dot.ref}" cx="{x:.1f}" '
        f'cy="{axis(dot.y):.1f}" r="3.5" fill="{fill}" fill-opacity="0.75" '
        f'stroke="{_COLOURS[dot.kind]}" stroke-width="1.2">{hover}</circle>'
    )


def _winner(dots: Sequence[tuple[Dot, float]], axis: _LogAxis) -> str:
    for dot, x in dots:
        if dot.winner and dot.y is not None:
            return winner_mark(x, axis(dot.y), f"winner: {dot.hover}", str(dot.ref))
    return ""


def _empty(dots: Sequence[Dot]) -> bool:
    return not any(dot.y for dot in dots)


def scatter_chart(param: str, categories: Sequence[str], dots: Sequence[Dot]) -> Markup:
    """Time against the values of ``param``: ``categories`` are the values in order, a
    dot's x its category's index; dots of one value spread across its band."""
    if not dots or _empty(dots):
        return Markup('<p class="empty">no timed candidate to plot</p>')
    axis = _LogAxis([d.y for d in dots if d.y], _SMALL)
    band = _SMALL.plot_w / max(1, len(categories))
    parts = _parts(axis, param)
    for index, text in enumerate(categories):
        centre = LEFT + band * (index + 0.5)
        parts.append(
            f'<text class="tick" x="{centre:.1f}" y="{_SMALL.top + _SMALL.plot_h + 16}" '
            f'text-anchor="middle">{escape(text[:18])}</text>'
        )
    placed: list[tuple[Dot, float]] = []
    counts: dict[float, int] = {}
    for dot in dots:
        seen = counts.get(dot.x, 0)
        counts[dot.x] = seen + 1
        # a deterministic spread (golden-ratio steps) so dots of one value do not hide
        offset = ((seen * 0.618) % 1.0 - 0.5) * min(band * 0.6, 60)
        placed.append((dot, LEFT + band * (dot.x + 0.5) + offset))
    parts.extend(_dot_markup(dot, x, axis) for dot, x in placed)
    parts.append(_winner(placed, axis))
    attrs = f'data-param="{escape(param)}"'
    title = f"median time against {param}"
    return document(parts, _SMALL.height, title, "chart scatter", attrs, _SMALL.width)


def best_so_far_chart(dots: Sequence[Dot], steps: Sequence[tuple[float, float]]) -> Markup:
    """Each candidate's time at its place in measurement order, and the best-so-far line (a
    step down where a verified candidate beat every earlier one, flat to the last)."""
    if not dots or _empty(dots):
        return Markup('<p class="empty">no timed candidate to plot</p>')
    axis = _LogAxis([d.y for d in dots if d.y], _WIDE)
    last = max(d.x for d in dots)

    def px(place: float) -> float:
        return LEFT + (place - 0.5) / max(last, 1.0) * _WIDE.plot_w

    parts = _parts(axis, "candidates tried, in the order they were measured")
    tick_step = max(1, math.ceil(last / 10))
    for tick in range(1, int(last) + 1, tick_step):
        parts.append(
            f'<text class="tick" x="{px(tick):.1f}" y="{_WIDE.top + _WIDE.plot_h + 16}" '
            f'text-anchor="middle">{tick}</text>'
        )
    if steps:
        coords = []
        for index, (place, best) in enumerate(steps):
            if index:
                coords.append(f"{px(place):.1f},{axis(steps[index - 1][1]):.1f}")
            coords.append(f"{px(place):.1f},{axis(best):.1f}")
        coords.append(f"{px(last):.1f},{axis(steps[-1][1]):.1f}")
        hover = f"best so far: {steps[-1][1]:.3f} µs after {len(steps)} improvements"
        parts.append(
            f'<polyline class="best-so-far" data-steps="{len(steps)}" points="{" ".join(coords)}" '
            f'fill="none" stroke="#009E73" stroke-width="2.5"><title>{escape(hover)}</title>'
            "</polyline>"
        )
    placed = [(dot, px(dot.x)) for dot in dots]
    parts.extend(_dot_markup(dot, x, axis) for dot, x in placed)
    parts.append(_winner(placed, axis))
    return document(parts, HEIGHT, "best time so far against candidates tried", "chart progress")
