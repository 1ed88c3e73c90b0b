"""The one winner rule, used by the engine (over BenchResults) and the store (over rows).

1. Only verified measurements (outcome ``ok`` with a median) can win.
2. The fastest median leads; every median within ``TIE_BAND`` of it ties with it, and a tie
   goes to the vendor's default (the algorithm the vendor library's heuristic names first,
   marked in provenance under :data:`VENDOR_DEFAULT_KEY`): what the user would call anyway is
   kept unless something is measurably faster. Then the variant name breaks it (a caller may
   add an id to the key), so re-tuning a space does not flip winners on noise.
3. ``suspect`` (measured under interference) does not change the ranking: interference only
   slows a measurement down, so a suspect median is an upper bound of the true one. Instead
   the engine re-measures every suspect candidate that could win or tie once the device is
   quiet (:func:`needs_remeasure`), so the rule never silently trusts or drops one.
4. A stored winner (the incumbent) is replaced only by a candidate more than ``TIE_BAND``
   faster (:func:`replaces_incumbent`); otherwise the incumbent is kept and the job says so.
   When the new job measured the incumbent too, that measurement is the one compared
   (:func:`incumbent_reference`): two medians taken side by side, not minutes apart on a
   machine whose speed drifts. When the job timed both again in interleaved confirmation
   rounds (:func:`rounds_of`: the first pass and the rounds under :data:`ROUNDS_KEY`), the
   candidate must be faster beyond the band with confidence: its slowest median more than
   ``TIE_BAND`` below the incumbent's fastest (:func:`confidently_faster`), so noise cannot
   flip winners; the band grows by the share of a core the incumbent's runs lost to another
   process (interference only slows a run down, the incumbent's as much as any).

The functions take key functions, so the engine and the store apply the same code to their
own types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = [
    "TIE_BAND",
    "pick",
    "needs_remeasure",
    "replaces_incumbent",
    "incumbent_reference",
    "tied_with",
    "confidently_faster",
    "ROUNDS_KEY",
    "VENDOR_DEFAULT_KEY",
    "is_vendor_default",
    "FIRST_PASS_KEY",
    "CPU_SHARE_KEY",
    "rounds_of",
    "cpu_share_of",
    "MIN_ROUNDS",
]

#: relative band inside which two medians are the same speed
TIE_BAND = 0.02
#: provenance key of a result's medians in the interleaved confirmation rounds of its job
ROUNDS_KEY = "confirm_medians_us"
#: provenance key of its median in the job's first pass, before the confirmation rounds
FIRST_PASS_KEY = "first_pass_median_us"
#: provenance key of the share of a core the timed process got (CPU backend; absent: unknown)
CPU_SHARE_KEY = "cpu_share"
#: rounds each side needs before the confident rule applies (fewer: medians are compared)
MIN_ROUNDS = 2

T = TypeVar("T")


#: provenance key marking the vendor's default algorithm (its heuristic's first answer)
VENDOR_DEFAULT_KEY = "vendor_default"


def is_vendor_default(provenance: Any) -> bool:
    """True when a result's or row's provenance marks it as the vendor's default."""
    return isinstance(provenance, dict) and provenance.get(VENDOR_DEFAULT_KEY) is True


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
    vendor_default: Callable[[T], bool] = lambda _: False,
) -> T | None:
    """The winner of ``items`` by the rule above, or None when none is verified."""
    verified = [(m, item) for item in items if ok(item) and (m := median(item)) is not None]
    if not verified:
        return None
    best = min(m for m, _ in verified)
    tied = [item for m, item in verified if tied_with(best, m, tie_band)]
    # min keeps the first of equal keys: stable
    return min(tied, key=lambda item: (not vendor_default(item), name(item)))


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


def confidently_faster(
    candidate_rounds: Sequence[float],
    incumbent_rounds: Sequence[float],
    tie_band: float = TIE_BAND,
) -> bool | None:
    """Whether the candidate is faster than the incumbent beyond the tie band with confidence,
    from their medians in the same interleaved rounds: the ranges of the round medians (the
    order-statistics interval of a median of few rounds) must be separated by more than the
    band. None when either has fewer than :data:`MIN_ROUNDS` rounds."""
    if len(candidate_rounds) < MIN_ROUNDS or len(incumbent_rounds) < MIN_ROUNDS:
        return None
    return max(candidate_rounds) < min(incumbent_rounds) * (1.0 - tie_band)


def cpu_share_of(provenance: Any) -> float | None:
    """The core share a result's provenance records (None when it records none)."""
    share = provenance.get(CPU_SHARE_KEY) if isinstance(provenance, dict) else None
    return float(share) if isinstance(share, int | float) else None


def rounds_of(provenance: Any) -> list[float]:
    """The medians of a confirmed result in its job: the first pass and every confirmation
    round ([] when it was not confirmed). Four medians a side make a chance separation of two
    true ties rare (1 in 70 when all orders are equally likely, against 1 in 20 with three)."""
    rounds = provenance.get(ROUNDS_KEY) if isinstance(provenance, dict) else None
    if not isinstance(rounds, list):
        return []
    first = provenance.get(FIRST_PASS_KEY)
    every = [first, *rounds] if isinstance(first, int | float) else rounds
    return [float(r) for r in every if isinstance(r, int | float)]


def replaces_incumbent(
    incumbent_us: float | None,
    candidate_us: float,
    tie_band: float = TIE_BAND,
    *,
    incumbent_rounds: Sequence[float] = (),
    candidate_rounds: Sequence[float] = (),
    incumbent_cpu_share: float | None = None,
) -> bool:
    """True when the candidate is more than the tie band faster than the stored winner: by
    :func:`confidently_faster` when both were timed in the same confirmation rounds, else by
    their medians. An incumbent timed with less than a whole core (``incumbent_cpu_share``)
    may have been slowed by up to the share it lost: the band grows by that share, so
    interference on the incumbent's runs cannot unseat it."""
    if incumbent_us is None:
        return True
    lost = 1.0 - incumbent_cpu_share if incumbent_cpu_share is not None else 0.0
    band = tie_band + min(max(lost, 0.0), 1.0)
    confident = confidently_faster(candidate_rounds, incumbent_rounds, band)
    if confident is not None:
        return confident
    return candidate_us < incumbent_us * (1.0 - tie_band)


def incumbent_reference(
    stored_us: float | None, now_ok: bool | None, now_us: float | None
) -> float | None:
    """The incumbent median a new winner is compared with: its median in the same job when
    the job verified and timed it (``now_ok``), None (replace it) when the job measured it
    and it did not verify or stopped early as slower, the stored median when the job did not
    measure it (``now_ok`` None)."""
    if now_ok is None:
        return stored_us
    return now_us if now_ok else None
