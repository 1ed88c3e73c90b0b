"""The winner rule on recorded timings shaped like issue 22's H200 run: winners must not flip
on noise.

Two tuning passes of the same shapes. Between them every kernel's time moved by -3% to +7%
(the card at its 700 W cap, another window), within a pass each round drifted by a few
percent for all kernels alike, and the first pass's winner had been measured 2-5% low (the
fastest of many noisy first passes: the winner's curse). The fixed 2% band over medians
flipped winners there; tuner.winner must keep the same winner or report the two as a tie.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tuner.winner import TIE_BAND, Decision, decide, replaces_incumbent, tied_with

#: per-round drift of a window, shared by every kernel timed in it (pass 1, pass 2)
DRIFT = ([1.00, 1.03, 0.99, 1.05, 1.02], [1.04, 1.00, 1.06, 1.01, 0.98])
#: each kernel's own noise per round (rotated by kernel), in units of the shape's noise
NOISE = [0.75, -0.5, 1.0, -0.875, 0.25]


@dataclass
class Kernel:
    name: str
    rounds: list[float]
    first_pass: float
    vendor: bool = False
    rest: dict[str, float] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return sorted(self.rounds)[len(self.rounds) // 2]


@dataclass(frozen=True)
class Shape:
    """True times (us) of the kernels, their move between the passes, the first winner's
    bias, and how much a kernel's own time varies from round to round (beyond the drift)."""

    name: str
    true_us: dict[str, float]
    moved: dict[str, float]
    bias: float
    noise: float


#: shapes of the kind that flipped (kernels 0-5% apart), moves in [-3%, +7%]; round-to-round
#: noise of 0.8% (a quiet window) to 3% (the card at its power cap)
SHAPES = [
    Shape(
        "m4096",
        {"k_a": 100.0, "k_b": 101.2, "k_c": 104.5},
        {"k_a": 0.05, "k_b": -0.03, "k_c": 0.0},
        0.04,
        0.008,
    ),
    Shape(
        "m128",
        {"k_a": 50.0, "k_b": 50.4, "k_c": 51.5, "k_d": 56.0},
        {"k_a": 0.07, "k_b": 0.02, "k_c": -0.01, "k_d": 0.03},
        0.05,
        0.008,
    ),
    Shape(
        "m16",
        {"k_a": 20.0, "k_b": 20.5, "k_c": 21.6},
        {"k_a": -0.02, "k_b": 0.04, "k_c": -0.03},
        0.02,
        0.01,
    ),
    Shape(
        "prefill",
        {"k_a": 900.0, "k_b": 905.0, "k_c": 930.0},
        {"k_a": 0.06, "k_b": 0.0, "k_c": -0.02},
        0.03,
        0.008,
    ),
    Shape(
        "decode",
        {"k_a": 8.0, "k_b": 8.08, "k_c": 8.3},
        {"k_a": 0.03, "k_b": -0.01, "k_c": 0.07},
        0.045,
        0.01,
    ),
    Shape(
        "capped",
        {"k_a": 100.0, "k_b": 102.5, "k_c": 108.0},
        {"k_a": 0.07, "k_b": -0.03, "k_c": 0.0},
        0.04,
        0.03,
    ),
    Shape(
        "capped_odd",
        {"k_a": 30.0, "k_b": 30.75, "k_c": 33.0},
        {"k_a": 0.04, "k_b": -0.02, "k_c": 0.01},
        0.03,
        0.025,
    ),
]


def _pass(shape: Shape, number: int, biased: str | None) -> list[Kernel]:
    kernels = []
    for k, (name, true_us) in enumerate(shape.true_us.items()):
        now = true_us * (1 + shape.moved[name]) if number == 2 else true_us
        noise = [n * shape.noise for n in NOISE[k:] + NOISE[:k]]
        rounds = [now * d * (1 + n) for d, n in zip(DRIFT[number - 1], noise, strict=True)]
        first = now * (1 - shape.bias) if name == biased else now * (1 + noise[0])
        kernels.append(Kernel(name, rounds, first))
    return kernels


def _decide(kernels: list[Kernel], incumbent: str | None = None) -> Decision[Kernel]:
    return decide(
        kernels,
        median=lambda k: k.median,
        name=lambda k: k.name,
        ok=lambda k: True,
        rounds=lambda k: k.rounds,
        incumbent=lambda k: k.name == incumbent,
    )


def _names(decision: Decision[Kernel]) -> list[str]:
    return [k.name for k in decision.tie_set]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_a_retune_keeps_the_winner_or_reports_a_tie(shape: Shape) -> None:
    # pass 1: the fastest first pass is biased low by 2-5% (it is the one that looked best)
    fastest_true = min(shape.true_us, key=shape.true_us.__getitem__)
    first = _decide(_pass(shape, 1, biased=fastest_true))
    assert first.winner is not None and first.method == "rounds"
    w1 = first.winner.name
    # pass 2: every kernel moved by -3%..+7%; the stored winner is the incumbent, timed in
    # the same rounds as the rest
    second_kernels = _pass(shape, 2, biased=None)
    second = _decide(second_kernels, incumbent=w1)
    assert second.winner is not None
    w2 = second.winner.name
    same_or_tie = w2 == w1 or w1 in _names(second) or w2 in _names(first)
    assert same_or_tie, (w1, _names(first), w2, _names(second))
    # the store replaces the incumbent only when the new winner is faster with confidence,
    # and then the first answer had already named it a tie
    by = {k.name: k for k in second_kernels}
    replaced = w2 != w1 and replaces_incumbent(
        by[w1].median,
        by[w2].median,
        incumbent_rounds=by[w1].rounds,
        candidate_rounds=by[w2].rounds,
    )
    assert not replaced or w2 in _names(first)


def _fixed_band(kernels: list[Kernel]) -> tuple[str, list[str]]:
    """The old instrument: the fixed 2% band over the medians, the name breaking ties."""
    best = min(k.median for k in kernels)
    tied = sorted(k.name for k in kernels if tied_with(best, k.median, TIE_BAND))
    return tied[0], tied


def test_the_recorded_timings_flip_winners_under_the_fixed_band() -> None:
    """The timings above have the issue's shape: the first winner (its first pass biased
    low) measures more than 2% behind the second pass's best in some shapes, and the fixed
    2% band alone reports a different winner with no tie in at least one; the rule above
    keeps each of them (test_a_retune_keeps_the_winner_or_reports_a_tie)."""
    behind = flipped = 0
    for shape in SHAPES:
        moves = list(shape.moved.values())
        assert -0.03 <= min(moves) and max(moves) <= 0.07 and 0.02 <= shape.bias <= 0.05
        fastest_true = min(shape.true_us, key=shape.true_us.__getitem__)
        first_kernels = _pass(shape, 1, biased=fastest_true)
        w1 = min(first_kernels, key=lambda k: k.first_pass).name
        second = {k.name: k.median for k in _pass(shape, 2, biased=None)}
        behind += not tied_with(min(second.values()), second[w1], TIE_BAND)
        old_w1, old_tie1 = _fixed_band(first_kernels)
        old_w2, old_tie2 = _fixed_band(_pass(shape, 2, biased=None))
        flipped += old_w2 != old_w1 and old_w1 not in old_tie2 and old_w2 not in old_tie1
    assert behind >= 3 and flipped >= 1
