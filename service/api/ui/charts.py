"""From a job's measurements to chart data.

Bandwidth ops (reduce, softmax, rms_norm): achieved GB/s against K, one line per variant family. A
family is named by the params that do not vary with the problem (a param whose value changes
for one variant id across problems is derived from the shape, so it cannot name a line), and
of those the ones in LINE_AXES when any is present (pack x strategy for the CUDA row kernels,
pack x algo for CPU softmax, pack for CPU reduce); each point is the family's best variant at
that K (the other params, e.g. threads, are chosen per K like the tuner does). A variant whose
timing stopped early as slower (``aborted_slow``) has a partial median: it counts for its
family's point as well, drawn hollow, so a family whose best was stopped early shows no false
dip. The winner of each K is marked.

Compute ops (gemm, conv2d): TFLOP/s of every timed variant per shape, the winner marked,
aborted variants hollow, vendor baselines beside it when a benchmark file has them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from service.api.ui.labels import problem_label
from service.api.ui.svg import ABORTED_NOTE, Bar, Point, Series
from tuner.units import format_rate

__all__ = [
    "BANDWIDTH_OPS",
    "LINE_AXES",
    "problem_varying_params",
    "line_params",
    "bandwidth_series",
    "winner_points",
    "shape_bars",
    "problem_label",
    "TIMED_OUTCOMES",
]

BANDWIDTH_OPS = frozenset({"reduce", "softmax", "rms_norm"})
#: params that name a line of the bandwidth plot, when a family has them
LINE_AXES = ("pack", "strategy", "algo")
#: outcomes with a time: verified, and stopped early as slower (a partial median)
TIMED_OUTCOMES = ("ok", "aborted_slow")


def _timed(measurements: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [m for m in measurements if m["outcome"] in TIMED_OUTCOMES and m.get("throughput")]


def _kind(m: Mapping[str, Any]) -> str:
    return "ok" if m["outcome"] == "ok" else "aborted"


def problem_varying_params(measurements: Sequence[Mapping[str, Any]]) -> set[str]:
    """Params whose value differs for the same variant id between problems."""
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for m in measurements:
        for name, value in m["params"].items():
            seen[(m["variant_id"], name)].add(repr(value))
    return {name for (_, name), values in seen.items() if len(values) > 1}


def line_params(measurements: Sequence[Mapping[str, Any]]) -> list[str]:
    varying = problem_varying_params(measurements)
    stable = sorted({n for m in measurements for n in m["params"]} - varying)
    preferred = [name for name in LINE_AXES if name in stable]
    return preferred or stable


def bandwidth_series(
    measurements: Sequence[Mapping[str, Any]], x_dim: str = "k"
) -> tuple[list[Series], list[str]]:
    """Lines of best throughput against ``x_dim``, and the params that name the lines."""
    timed = [m for m in _timed(measurements) if isinstance(m["problem"].get(x_dim), int)]
    names = line_params(timed)
    best: dict[tuple[str, ...], dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for m in timed:
        label = tuple(f"{n}={m['params'].get(n, '-')}" for n in names)
        x = m["problem"][x_dim]
        current = best[label].get(x)
        if current is None or m["throughput"] > current["throughput"]:
            best[label][x] = m
    series = []
    for label in sorted(best):
        points = []
        for x, m in best[label].items():
            hover = f"{m['variant_name']} at {x_dim}={x}: " + format_rate(
                m["throughput"], m["throughput_unit"]
            )
            if _kind(m) == "aborted":
                hover += f" ({ABORTED_NOTE})"
            points.append(Point(float(x), float(m["throughput"]), hover, _kind(m)))
        series.append(Series(" ".join(label) or "all", points))
    return series, names


def winner_points(problems: Sequence[Mapping[str, Any]], x_dim: str = "k") -> list[Point]:
    """The winner of each problem at its ``x_dim``, for the line chart's markers."""
    points = []
    for p in problems:
        winner, x = p.get("winner"), p["problem"].get(x_dim)
        if winner and winner.get("throughput") and isinstance(x, int) and x > 0:
            rate = format_rate(winner["throughput"], winner["throughput_unit"])
            hover = f"winner at {x_dim}={x}: {winner['variant_name']}, {rate}"
            points.append(Point(float(x), float(winner["throughput"]), hover))
    return points


def shape_bars(
    measurements: Sequence[Mapping[str, Any]],
    winners: Mapping[str, str],
    baselines: Mapping[str, tuple[dict[str, float], str]],
) -> list[tuple[str, list[Bar], str]]:
    """Per problem (label): a bar per timed variant (the winner marked, aborted ones hollow)
    and per vendor baseline; the unit. ``winners`` maps problem label to the winning variant
    id and ``baselines`` problem label to (figures, unit)."""
    by_problem: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for m in _timed(measurements):
        by_problem[problem_label(m["problem"])].append(m)
    charts = []
    for label, rows in by_problem.items():
        unit = rows[0]["throughput_unit"]
        bars = []
        for m in rows:
            if _kind(m) == "aborted":
                bars.append(Bar(m["variant_name"], float(m["throughput"]), "aborted", ABORTED_NOTE))
            elif winners.get(label) == m["variant_id"]:
                bars.append(Bar(m["variant_name"], float(m["throughput"]), "winner", "(winner)"))
            else:
                bars.append(Bar(m["variant_name"], float(m["throughput"])))
        figures, figure_unit = baselines.get(label, ({}, ""))
        if figures and figure_unit == unit:
            bars += [Bar(f"vendor: {name}", value, "baseline") for name, value in figures.items()]
        charts.append((label, bars, unit))
    return charts
