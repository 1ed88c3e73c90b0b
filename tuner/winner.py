"""The one winner rule, used by the engine (over BenchResults) and the store (over rows).

A *contender* is a verified result the job timed again in its interleaved confirmation
rounds (``tuner.engine.confirm_contenders``: round r times every contender once, back to
back, in a rotated order); its round medians are kept in provenance under
:data:`ROUNDS_KEY`, in round order, so round r of two contenders was taken in the same window.

1. Only verified measurements (outcome ``ok`` with a median) can win.
2. The tie set. With confirmation rounds (at least :data:`MIN_ROUNDS` for a contender), the
   *fastest* is the contender with the lowest median (the middle of its rounds). For each
   contender the ratio of its time to the fastest's is taken round by round: paired, so
   the drift of a window (clocks, power cap, other tenants) divides out. Each round is a
   window of its own (``Backend.new_window``; on the CPU a fresh runner, its inputs in
   new pages), so what differs between windows shows in the spread. Over the rounds
   the log ratios give a :data:`CONFIDENCE` interval (Student t; :func:`ratio_interval`).
   A contender whose interval reaches down to ``1 + TIE_BAND`` cannot be told from the
   fastest: it is in the tie set. The band is thus what was measured (noisy rounds widen
   it), never narrower than ``TIE_BAND``: a difference that small is not worth a change
   of kernel. The first-pass median is not used: the contenders were chosen by it, so
   the fastest of many first passes is biased low (the winner's curse). Results without
   rounds were not contenders (their first pass was beyond the confirm band) and do not
   win while any contender is left. Without rounds (one candidate, confirmation off, a
   budget spent before the rounds), the medians decide: every median within ``TIE_BAND``
   of the fastest is in the tie set.
3. Within the tie set a fixed order picks the winner: the vendor's default (the algorithm
   the vendor library's heuristic names first, marked under :data:`VENDOR_DEFAULT_KEY`:
   what the user would call anyway), then an incumbent (a stored winner), then the
   variant name (a caller may add an id to the key). So re-tuning does not flip winners on
   noise, and the answer carries its tie set: the variants it cannot be told apart from.
4. ``suspect`` (measured under interference) does not change the ranking: interference only
   slows a measurement down, so a suspect median is an upper bound of the true one. Instead
   the engine re-measures every suspect candidate that could win or tie once the device is
   quiet (:func:`needs_remeasure`), so the rule never silently trusts or drops one.
5. A stored winner (the incumbent) is replaced only by a challenger faster with confidence
   (:func:`replaces_incumbent`). When the job timed both in the same confirmation rounds,
   the incumbent's ratio interval to the challenger must lie wholly above ``1 + band``
   (:func:`confidently_faster`), ``band`` being ``TIE_BAND`` grown by the share of a core
   the incumbent's runs lost to another process (interference only slows a run down).
   Otherwise their medians decide: the challenger must be more than ``TIE_BAND`` faster,
   against the incumbent as the same job measured it when it did
   (:func:`incumbent_reference`), else as stored.

6. Under objective ``energy`` the score is joules per launch instead of the median, among the
   verified items that carry both; confirmation rounds time, they do not meter, so the medians
   rule (2, without rounds) decides within the tie band; rule 3's order holds as under time
   (:func:`decide_for`).
7. A record: a winner that beats the stored one by more than a team's margin (a fraction of
   the stored median) is held until another host confirms it (:func:`is_record`).

The functions take key functions, so the engine and the store apply the same code to their
own types: the engine's :func:`tuner.engine.decide_winner` and the store's
:func:`service.store.best.decide_winner` only say where each figure is kept and call
:func:`decide_for`; the store's replace decision is :func:`replaces_stored_winner`. Nothing
else decides who wins.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, TypeVar

__all__ = [
    "TIE_BAND",
    "MIN_ROUNDS",
    "CONFIDENCE",
    "ROUNDS_KEY",
    "FIRST_PASS_KEY",
    "VENDOR_DEFAULT_KEY",
    "CPU_SHARE_KEY",
    "Decision",
    "Timed",
    "decide",
    "decide_for",
    "replaces_stored_winner",
    "is_record",
    "ratio_interval",
    "needs_remeasure",
    "replaces_incumbent",
    "confidently_faster",
    "incumbent_reference",
    "tied_with",
    "same_speed",
    "is_vendor_default",
    "rounds_of",
    "cpu_share_of",
]

#: the narrowest tie band: two speeds closer than this are the same speed, however sure the
#: rounds are; also the whole band where there are no rounds to measure one from
TIE_BAND = 0.02
#: confirmation rounds a contender needs before its interval is taken (fewer: medians decide)
MIN_ROUNDS = 3
#: two-sided confidence of the ratio intervals
CONFIDENCE = 0.95
#: provenance key of a result's medians in the interleaved confirmation rounds of its job
ROUNDS_KEY = "confirm_medians_us"
#: provenance key of its median in the job's first pass, before the confirmation rounds
FIRST_PASS_KEY = "first_pass_median_us"
#: provenance key of the share of a core the timed process got (CPU backend; absent: unknown)
CPU_SHARE_KEY = "cpu_share"
#: provenance key marking the vendor's default algorithm (its heuristic's first answer)
VENDOR_DEFAULT_KEY = "vendor_default"

#: Student t, two-sided 95%, by degrees of freedom (above 10: 1.96 + 2.4 / df, within 0.3%)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}
_T95 |= {9: 2.262, 10: 2.228}

T = TypeVar("T")


def _t95(df: int) -> float:
    return _T95.get(df, 1.96 + 2.4 / df)


def is_vendor_default(provenance: Any) -> bool:
    """True when a result's or row's provenance marks it as the vendor's default."""
    return isinstance(provenance, dict) and provenance.get(VENDOR_DEFAULT_KEY) is True


def cpu_share_of(provenance: Any) -> float | None:
    """The core share a result's provenance records (None when it records none)."""
    share = provenance.get(CPU_SHARE_KEY) if isinstance(provenance, dict) else None
    return float(share) if isinstance(share, int | float) else None


def rounds_of(provenance: Any) -> list[float]:
    """The medians of a result in its job's confirmation rounds, in round order ([] when it
    was not a contender). The first pass is not one of them (rule 2)."""
    rounds = provenance.get(ROUNDS_KEY) if isinstance(provenance, dict) else None
    if not isinstance(rounds, list):
        return []
    return [float(r) for r in rounds if isinstance(r, int | float) and r > 0]


def tied_with(best_us: float, median_us: float, tie_band: float = TIE_BAND) -> bool:
    """True when ``median_us`` is inside the tie band above ``best_us`` (medians only)."""
    return median_us <= best_us * (1.0 + tie_band)


def same_speed(a_us: float, b_us: float, tie_band: float = TIE_BAND) -> bool:
    """True when two medians of one variant (say from two hosts, which share no rounds) are
    within the tie band of each other, whichever is faster."""
    return tied_with(min(a_us, b_us), max(a_us, b_us), tie_band)


def ratio_interval(
    rounds: Sequence[float], reference: Sequence[float]
) -> tuple[float, float] | None:
    """The :data:`CONFIDENCE` interval (low, high) of the time ratio ``rounds / reference``,
    from medians taken in the same rounds (paired by position): the mean of the log ratios
    plus and minus Student's t times their standard error. None with fewer than
    :data:`MIN_ROUNDS` pairs."""
    pairs = [(a, b) for a, b in zip(rounds, reference, strict=False) if a > 0 and b > 0]
    if len(pairs) < MIN_ROUNDS:
        return None
    logs = [math.log(a / b) for a, b in pairs]
    mean = statistics.fmean(logs)
    half = _t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean - half), math.exp(mean + half)


@dataclass(frozen=True)
class Decision(Generic[T]):
    """What the rule decided over a set of measurements."""

    #: the winner (None when nothing is verified)
    winner: T | None
    #: every item that cannot be told from the fastest, in the rule's order (winner first)
    tie_set: tuple[T, ...]
    #: the fastest item (the winner unless the order in the tie set preferred another)
    fastest: T | None
    #: "rounds": decided by the confirmation rounds' intervals; "medians": by the tie band
    method: Literal["rounds", "medians", "none"]


def decide(
    items: Sequence[T],
    *,
    median: Callable[[T], float | None],
    name: Callable[[T], Any],
    ok: Callable[[T], bool],
    rounds: Callable[[T], Sequence[float]] = lambda _: (),
    vendor_default: Callable[[T], bool] = lambda _: False,
    incumbent: Callable[[T], bool] = lambda _: False,
    tie_band: float = TIE_BAND,
) -> Decision[T]:
    """The winner of ``items`` and its tie set, by the rule above."""
    verified = [(m, item) for item in items if ok(item) and (m := median(item)) is not None]
    if not verified:
        return Decision(None, (), None, "none")
    measured = {id(item): list(rounds(item)) for _, item in verified}
    contenders = [(m, item) for m, item in verified if len(measured[id(item)]) >= MIN_ROUNDS]
    order = lambda item: (not vendor_default(item), not incumbent(item), name(item))  # noqa: E731
    if contenders:
        _, fastest = min(contenders, key=lambda pair: (pair[0], name(pair[1])))
        reference = measured[id(fastest)]
        tied = []
        for _, item in contenders:
            interval = ratio_interval(measured[id(item)], reference)
            if item is fastest or (interval is not None and interval[0] <= 1.0 + tie_band):
                tied.append(item)
        ranked = tuple(sorted(tied, key=order))
        return Decision(ranked[0], ranked, fastest, "rounds")
    best, fastest = min(verified, key=lambda pair: (pair[0], name(pair[1])))
    ranked = tuple(sorted((i for m, i in verified if tied_with(best, m, tie_band)), key=order))
    return Decision(ranked[0], ranked, fastest, "medians")


def decide_for(
    items: Sequence[T],
    objective: str,
    *,
    median_us: Callable[[T], float | None],
    energy_j: Callable[[T], float | None],
    name: Callable[[T], Any],
    ok: Callable[[T], bool],
    provenance: Callable[[T], Any],
    incumbent: Callable[[T], bool] = lambda _: False,
    tie_band: float = TIE_BAND,
) -> Decision[T]:
    """The winner under ``objective`` (rules 1-3 and 6): by time, the median and the
    confirmation rounds kept in ``provenance``; by energy, the joules per launch, medians
    only. Only verified (``ok``) items with a median take part under either."""
    energy = objective == "energy"
    return decide(
        items,
        median=energy_j if energy else median_us,
        name=name,
        ok=lambda item: ok(item) and median_us(item) is not None,
        rounds=(lambda _: ()) if energy else (lambda item: rounds_of(provenance(item))),
        vendor_default=lambda item: is_vendor_default(provenance(item)),
        incumbent=incumbent,
        tie_band=tie_band,
    )


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
    """Whether the candidate is faster than the incumbent beyond ``tie_band`` with
    confidence: the interval of the incumbent's time over the candidate's, from their
    medians in the same rounds, lies wholly above ``1 + tie_band``. None when they do not
    share :data:`MIN_ROUNDS` rounds."""
    interval = ratio_interval(incumbent_rounds, candidate_rounds)
    if interval is None:
        return None
    return interval[0] > 1.0 + tie_band


def replaces_incumbent(
    incumbent_us: float | None,
    candidate_us: float,
    tie_band: float = TIE_BAND,
    *,
    incumbent_rounds: Sequence[float] = (),
    candidate_rounds: Sequence[float] = (),
    incumbent_cpu_share: float | None = None,
) -> bool:
    """True when the candidate replaces the stored winner (rule 5): faster with confidence
    by :func:`confidently_faster` when both were timed in the same confirmation rounds, else
    more than the tie band faster by their medians. An incumbent timed with less than a
    whole core (``incumbent_cpu_share``) may have been slowed by up to the share it lost:
    the band grows by that share, so interference on its runs cannot unseat it."""
    if incumbent_us is None:
        return True
    lost = 1.0 - incumbent_cpu_share if incumbent_cpu_share is not None else 0.0
    band = tie_band + min(max(lost, 0.0), 1.0)
    confident = confidently_faster(candidate_rounds, incumbent_rounds, band)
    if confident is not None:
        return confident
    return candidate_us < incumbent_us * (1.0 - band)


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


class Timed(NamedTuple):
    """How a job measured a variant: verified or not, its median, its provenance."""

    ok: bool
    median_us: float | None
    provenance: Any


def replaces_stored_winner(
    stored_us: float | None,
    candidate_us: float,
    candidate_provenance: Any,
    again: Timed | None = None,
    tie_band: float = TIE_BAND,
) -> bool:
    """Whether a verified candidate replaces the stored winner (rule 5): against the incumbent
    as the candidate's own job measured it (``again``), when it did, with their shared
    confirmation rounds and the incumbent's CPU share; else against its stored median."""
    reference = incumbent_reference(
        stored_us,
        None if again is None else (again.ok and again.median_us is not None),
        again.median_us if again is not None else None,
    )
    return replaces_incumbent(
        reference,
        candidate_us,
        tie_band,
        # rounds only where the incumbent was timed in the candidate's own job (else medians)
        incumbent_rounds=rounds_of(again.provenance) if again is not None else (),
        candidate_rounds=rounds_of(candidate_provenance),
        incumbent_cpu_share=cpu_share_of(again.provenance) if again is not None else None,
    )


def is_record(stored_us: float | None, candidate_us: float | None, margin: float | None) -> bool:
    """Whether ``candidate_us`` beats the stored winner's ``stored_us`` by more than
    ``margin`` (a fraction of the stored median; None: the policy is off) (rule 7)."""
    if margin is None or stored_us is None or candidate_us is None:
        return False
    return candidate_us < stored_us * (1.0 - margin)
