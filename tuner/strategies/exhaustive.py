"""Exhaustive search: every candidate once.

Without a budget below the space's size it follows the space's own order. With one (the
engine passes ``budget`` when ``max_variants`` cuts the space and the space has no
problem-aware order of its own), it never takes the first N of the enumeration, which would
hold a few values of the leading axes only: it takes a stratified sample, greedily choosing
the candidate that covers the most (axis, value) pairs not yet covered, then the one farthest
from those chosen, so that every value of every axis is measured as soon as the budget allows.
The first candidate always leads the sample: where a backend discovered the vendor's default,
the engine puts it there, so any budget measures what the user would call anyway.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tuner.spaces.base import Params
from tuner.strategies.base import FixedOrderStrategy

__all__ = ["ExhaustiveStrategy", "stratified_order"]


def _distance(a: Params, b: Params, spans: dict[str, float]) -> float:
    """Sum over axes: |log2 a - log2 b| / span for positive ints, 0/1 for anything else."""
    total = 0.0
    for key in spans:
        x, y = a.get(key), b.get(key)
        if spans[key] > 0 and isinstance(x, int) and isinstance(y, int):  # positive ints
            total += abs(math.log2(x) - math.log2(y)) / spans[key]
        else:
            total += float(x != y)
    return total


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def stratified_order(candidates: Sequence[Params]) -> list[int]:
    """Every candidate index, in the order described in the module doc (deterministic)."""
    keys = sorted({key for params in candidates for key in params})
    spans: dict[str, float] = {}
    for key in keys:
        values = [p.get(key) for p in candidates]
        ints = [v for v in values if isinstance(v, int) and _positive_int(v)]
        if len(ints) == len(values):
            spans[key] = math.log2(max(ints)) - math.log2(min(ints))
        else:
            spans[key] = 0.0
    pairs = [{(key, repr(params.get(key))) for key in keys} for params in candidates]
    uncovered = set().union(*pairs) if pairs else set()
    nearest = [math.inf] * len(candidates)
    order: list[int] = []
    left = set(range(len(candidates)))

    def take(chosen: int) -> None:
        order.append(chosen)
        left.discard(chosen)
        uncovered.difference_update(pairs[chosen])
        for i in left:
            nearest[i] = min(nearest[i], _distance(candidates[i], candidates[chosen], spans))

    if candidates:  # the first candidate leads (the vendor default, where there is one)
        take(0)
    while left:
        # most new (axis, value) pairs first, then farthest from the chosen, then lowest index
        take(min(left, key=lambda i: (-len(pairs[i] & uncovered), -nearest[i], i)))
    return order


class ExhaustiveStrategy(FixedOrderStrategy):
    name = "exhaustive"

    def order(self) -> list[int]:
        cut = self.budget is not None and self.budget < len(self.candidates)
        return stratified_order(self.candidates) if cut else list(range(len(self.candidates)))
