"""What a tuning engineer looks at besides the winner (as in KTdashboard and Optuna's
dashboard), from the measurement dicts of the UI's data (MeasurementOut dumped):

- time against each parameter of one problem's candidates (:func:`param_scatters`): which
  values of a parameter are fast, which fail;
- the search's best-so-far against candidates tried, in the order they were measured
  (:func:`best_so_far`): how soon the strategy found the winner, and what more budget bought;
- two jobs side by side (:func:`compare_problems`): per problem, each job's winner and
  time, and the speed-up of B over A.

The charts are drawn by plots.py; this module only chooses and orders the points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.api.ui.charts import TIMED_OUTCOMES
from service.api.ui.labels import problem_label, problem_sort_key
from service.api.ui.plots import Dot
from service.api.ui.svg import ABORTED_NOTE

__all__ = [
    "ParamAxis",
    "param_axes",
    "param_scatters",
    "best_so_far",
    "CompareRow",
    "compare_problems",
    "geomean",
]


@dataclass
class ParamAxis:
    """A parameter and its values among the candidates, in order (numbers as numbers)."""

    name: str
    values: list[Any] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return [str(v) for v in self.values]


def _value_key(value: Any) -> tuple[int, float, str]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return (1, 0.0, str(value))
    return (0, float(value), "")


def param_axes(rows: Sequence[Mapping[str, Any]]) -> tuple[list[ParamAxis], dict[str, Any]]:
    """The params that vary among ``rows`` (each with its sorted values), and those that do
    not (name: the one value), in the params' own order."""
    names: list[str] = []
    seen: dict[str, dict[str, Any]] = {}
    for m in rows:
        for name, value in m["params"].items():
            if name not in seen:
                names.append(name)
                seen[name] = {}
            seen[name][repr(value)] = value
    varying, fixed = [], {}
    for name in names:
        values = sorted(seen[name].values(), key=_value_key)
        if len(values) > 1:
            varying.append(ParamAxis(name, values))
        else:
            fixed[name] = values[0]
    return varying, fixed


def _kind(m: Mapping[str, Any]) -> str:
    if m["outcome"] == "ok" and m.get("median_us"):
        return "ok"
    if m["outcome"] in TIMED_OUTCOMES and m.get("median_us"):
        return "aborted"
    return "failed"


def _hover(m: Mapping[str, Any]) -> str:
    kind = _kind(m)
    if kind == "failed":
        return f"{m['variant_name']}: {m['outcome']}"
    text = f"{m['variant_name']}: {m['median_us']:.3f} µs"
    return text + (f" ({ABORTED_NOTE})" if kind == "aborted" else "")


def _dot(m: Mapping[str, Any], x: float, winner_id: int | None) -> Dot:
    kind = _kind(m)
    return Dot(
        x=x,
        y=float(m["median_us"]) if kind != "failed" else None,
        hover=_hover(m),
        kind=kind,
        winner=m["id"] == winner_id,
        ref=int(m["id"]),
    )


def param_scatters(
    rows: Sequence[Mapping[str, Any]], winner_id: int | None
) -> list[tuple[ParamAxis, list[Dot]]]:
    """Per varying param: a dot per candidate at its value's position (0, 1, ... in the
    axis' order) and its median time; failed candidates have no time (``y`` None)."""
    axes, _ = param_axes(rows)
    scatters = []
    for axis in axes:
        position = {repr(v): i for i, v in enumerate(axis.values)}
        dots = [
            _dot(m, float(position[repr(m["params"][axis.name])]), winner_id)
            for m in rows
            if axis.name in m["params"]
        ]
        scatters.append((axis, dots))
    return scatters


def best_so_far(
    rows: Sequence[Mapping[str, Any]], winner_id: int | None
) -> tuple[list[Dot], list[tuple[float, float]]]:
    """A dot per candidate at its place in measurement order (1, 2, ...), and the steps of
    the best verified time so far ((place, time) where it improved). Re-timings of a
    candidate (confirmation rounds) are later rows of the same variant: they count where
    they were measured."""
    ordered = sorted(rows, key=lambda m: m["id"])
    dots, steps = [], []
    best: float | None = None
    for place, m in enumerate(ordered, start=1):
        dot = _dot(m, float(place), winner_id)
        dots.append(dot)
        if dot.kind == "ok" and dot.y is not None and (best is None or dot.y < best):
            best = dot.y
            steps.append((float(place), best))
    return dots, steps


@dataclass
class CompareRow:
    problem: Mapping[str, Any]
    a: Mapping[str, Any] | None
    b: Mapping[str, Any] | None

    @property
    def label(self) -> str:
        return problem_label(self.problem)

    @property
    def speedup(self) -> float | None:
        """A's time over B's: above 1, B's winner is faster."""
        a = (self.a or {}).get("median_us")
        b = (self.b or {}).get("median_us")
        if a and b and a > 0 and b > 0:
            return float(a) / float(b)
        return None


def _winners(job: Mapping[str, Any]) -> dict[str, tuple[Mapping[str, Any], Any]]:
    """{problem label: (problem, winner)}; the first task of a problem that has a winner."""
    found: dict[str, tuple[Mapping[str, Any], Any]] = {}
    for p in job["problems"]:
        label = problem_label(p["problem"])
        if label not in found or (found[label][1] is None and p["winner"]):
            found[label] = (p["problem"], p["winner"])
    return found


def compare_problems(job_a: Mapping[str, Any], job_b: Mapping[str, Any]) -> list[CompareRow]:
    """A row per problem of either job (matched by dims), sorted by dims as numbers."""
    a, b = _winners(job_a), _winners(job_b)
    rows = []
    for label in {**a, **b}:
        problem = (a.get(label) or b[label])[0]
        winner_a = a[label][1] if label in a else None
        winner_b = b[label][1] if label in b else None
        rows.append(CompareRow(problem, winner_a, winner_b))
    return sorted(rows, key=lambda r: problem_sort_key(r.problem))


def geomean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))
