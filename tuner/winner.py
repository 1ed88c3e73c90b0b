"""The one winner rule, used by the engine (over BenchResults) and the store (over rows).

1. Only verified measurements (outcome ``ok`` with a median) can win.
2. The fastest median leads; every median within ``TIE_BAND`` of it ties with it, and a tie
   is broken by variant name (a caller may add an id to the key), so re-tuning a space does
   not flip winners on noise.
3. ``suspect`` (measured under interference) does not change the ranking: interference only
   slows a measurement down, so a suspect median is an upper bound of the true one. Instead
   the engine re-measures every suspect candidate that could win or tie once the device is
   quiet (:func:`needs_remeasure`), so the rule never silently trusts or drops one.
4. A stored winner (the incumbent) is replaced only by a candidate more than ``TIE_BAND``
   faster (:func:`replaces_incumbent`); otherwise the incumbent is kept and the job says so.

The functions take key functions, so the engine and the store apply the same code to their
own types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["TIE_BAND", "pick", "needs_remeasure", "replaces_incumbent", "tied_with"]

#: relative band inside which two medians are the same speed
TIE_BAND = 0.02

T = TypeVar("T")


def tied_with(best_us: float, median_us: float, tie_band: float = TIE_BAND) -> bool:
    """True when ``median_us`` is inside the tie band above ``best_us``."""
    return median_us <= best_us * (1.0 + tie_band)


def pick(
    items: Sequence[T],
    *,
    median: Callable[[T], float | None],
    name: Callable[[T], Any],
    ok: Callable[[T], bool],
    tie_band: float = TIE_BAND,
) -> T | None:
    """The winner of ``items`` by the rule above, or None when none is verified."""
    verified = [(m, item) for item in items if ok(item) and (m := median(item)) is not None]
    if not verified:
        return None
    best = min(m for m, _ in verified)
    tied = [item for m, item in verified if tied_with(best, m, tie_band)]
    return min(tied, key=name)  # min keeps the first of equal names: stable


def needs_remeasure(
    items: Sequence[T],
    *,
    median: Callable[[T], float | None],
    ok: Callable[[T], bool],
    suspect: Callable[[T], bool],
    tie_band: float = TIE_BAND,
    bound: Callable[[T], float | None] | None = None,
) -> list[T]:
    """The suspect verified items that could win or tie: those whose ``bound`` (the fastest
    they might really be; their median by default) is within the tie band of the best clean
    median, or of the best median of all when none is clean."""
    verified = [(m, item) for item in items if ok(item) and (m := median(item)) is not None]
    if not verified:
        return []
    clean = [m for m, item in verified if not suspect(item)]
    reference = min(clean) if clean else min(m for m, _ in verified)
    fastest = bound or median
    return [
        item
        for m, item in verified
        if suspect(item) and tied_with(reference, fastest(item) or m, tie_band)
    ]


def replaces_incumbent(
    incumbent_us: float | None, candidate_us: float, tie_band: float = TIE_BAND
) -> bool:
    """True when the candidate is more than the tie band faster than the stored winner."""
    return incumbent_us is None or candidate_us < incumbent_us * (1.0 - tie_band)
