"""The one winner rule (tuner.winner), and the engine and the store applying it alike."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from service.store.best import winning_measurement as store_pick
from tuner.engine import winning_result as engine_pick
from tuner.types import BenchResult, Outcome, Timing
from tuner.winner import (
    CPU_SHARE_KEY,
    ROUNDS_KEY,
    TIE_BAND,
    VENDOR_DEFAULT_KEY,
    Timed,
    confidently_faster,
    decide,
    incumbent_reference,
    is_record,
    needs_remeasure,
    ratio_interval,
    replaces_incumbent,
    replaces_stored_winner,
    rounds_of,
    same_speed,
)


@dataclass
class Row:
    name: str
    median: float | None
    ok: bool = True
    suspect: bool = False
    rounds: list[float] = field(default_factory=list)


def _pick(rows: list[Row], band: float = TIE_BAND) -> Row | None:
    return decide(
        rows, median=lambda r: r.median, name=lambda r: r.name, ok=lambda r: r.ok, tie_band=band
    ).winner


def test_fastest_verified_wins() -> None:
    rows = [Row("b", 12.0), Row("a", 20.0), Row("c", 5.0, ok=False), Row("d", None)]
    assert _pick(rows) == rows[0]


def test_ties_break_by_name_whatever_the_order() -> None:
    rows = [Row("zeta", 10.0), Row("alpha", 10.15), Row("mid", 11.0)]
    assert _pick(rows).name == "alpha"  # type: ignore[union-attr]
    assert _pick(list(reversed(rows))).name == "alpha"  # type: ignore[union-attr]
    # outside the band the faster one wins
    assert _pick([Row("zeta", 10.0), Row("alpha", 10.5)]).name == "zeta"  # type: ignore[union-attr]


def test_nothing_verified_is_no_winner() -> None:
    assert _pick([Row("a", 1.0, ok=False), Row("b", None)]) is None
    assert _pick([]) is None


def test_a_suspect_fastest_is_not_outranked_by_a_slower_clean_one() -> None:
    rows = [Row("slow_clean", 14.0), Row("fast_suspect", 10.0, suspect=True)]
    assert _pick(rows).name == "fast_suspect"  # type: ignore[union-attr]


def test_suspects_that_could_win_or_tie_need_a_remeasure() -> None:
    rows = [
        Row("clean", 10.0),
        Row("faster", 8.0, suspect=True),
        Row("tied", 10.1, suspect=True),
        Row("slower", 12.0, suspect=True),
        Row("failed", 1.0, ok=False, suspect=True),
    ]

    def contenders(items: list[Row]) -> list[str]:
        return [
            r.name
            for r in needs_remeasure(
                items, median=lambda r: r.median, ok=lambda r: r.ok, suspect=lambda r: r.suspect
            )
        ]

    assert contenders(rows) == ["faster", "tied"]
    # with nothing clean, the suspects that tie the fastest of them contend
    nothing_clean = [Row("x", 3.0, suspect=True), Row("y", 30.0, suspect=True)]
    assert contenders(nothing_clean) == ["x"]
    # a bound (the fastest a disturbed run might be) widens who contends
    widened = needs_remeasure(
        rows,
        median=lambda r: r.median,
        ok=lambda r: r.ok,
        suspect=lambda r: r.suspect,
        bound=lambda r: r.median / 2 if r.median else None,
    )
    assert [r.name for r in widened] == ["faster", "tied", "slower"]


def test_an_incumbent_is_replaced_only_outside_the_band() -> None:
    assert replaces_incumbent(None, 50.0)
    assert not replaces_incumbent(10.0, 9.85)
    assert not replaces_incumbent(10.0, 12.0)
    assert replaces_incumbent(10.0, 9.5)


@dataclass
class FakeMeasurement:
    """The columns of service.store.models.Measurement that the store's rule reads."""

    id: int
    variant_id: str
    outcome: str
    median_us: float | None
    suspect: bool = False
    provenance: dict | None = None
    energy_j: float | None = None


def test_engine_and_store_pick_the_same_winner() -> None:
    cases = [
        [("b", 10.0, False), ("a", 10.1, False), ("c", 9.0, True)],
        [("fast", 5.0, True), ("clean", 8.0, False)],
        [("x", 7.0, False), ("y", 7.1, True), ("z", 7.12, False)],
        [("p", 3.0, False), ("q", 3.5, False)],
    ]
    for case in cases:
        results = [
            BenchResult(
                f"id-{name}",
                name,
                {},
                Outcome.OK,
                timing=Timing(median, median, median, median, 10),
                suspect=suspect,
            )
            for name, median, suspect in case
        ]
        rows = [
            FakeMeasurement(i, f"id-{name}", "ok", median, suspect)
            for i, (name, median, suspect) in enumerate(case)
        ]
        names = {f"id-{name}": name for name, _, _ in case}
        by_engine = engine_pick(results, TIE_BAND)
        by_store = store_pick(rows, names)  # type: ignore[arg-type]
        assert by_engine is not None and by_store is not None
        assert by_engine.variant_id == by_store.variant_id, case


def test_engine_and_store_decide_the_same_tie_set_from_the_rounds() -> None:
    """The store reads the rounds from the uploaded provenance: the same decision."""
    from service.store.best import decide_winner as store_decide
    from tuner.engine import decide_winner as engine_decide

    timings = {
        "a_fast": [10.0, 10.3, 9.9, 10.1, 10.0],
        "b_incumbent": [10.3, 10.1, 10.4, 10.2, 10.5],
        "c_slow": [11.0, 11.4, 10.9, 11.2, 11.1],
    }
    results, rows = [], []
    for i, (name, rounds) in enumerate(timings.items()):
        middle = sorted(rounds)[2]
        provenance = {ROUNDS_KEY: rounds, "first_pass_median_us": middle * 0.96}
        timing = Timing(middle, middle, middle, middle, 10)
        results.append(
            BenchResult(f"id-{name}", name, {}, Outcome.OK, timing, provenance=provenance)
        )
        rows.append(FakeMeasurement(i, f"id-{name}", "ok", middle, provenance=provenance))
    names = {f"id-{name}": name for name in timings}
    by_engine = engine_decide(results, TIE_BAND, "time", ["b_incumbent"])
    by_store = store_decide(rows, names, "time", ["b_incumbent"])  # type: ignore[arg-type]
    assert [r.variant_name for r in by_engine.tie_set] == ["b_incumbent", "a_fast"]
    assert [names[m.variant_id] for m in by_store.tie_set] == ["b_incumbent", "a_fast"]


def test_adaptive_timing_rule() -> None:
    from tuner.stats import ci_reached, cpu_share, median_ci, median_ci_rel

    steady = [100.0 + 0.1 * (i % 5) for i in range(40)]
    noisy = [100.0 * (1.0 + 0.3 * ((i * 7) % 11) / 10) for i in range(40)]
    assert median_ci_rel(steady) < 0.01 and ci_reached(steady, 0.01, 10)
    assert not ci_reached(noisy, 0.01, 10)
    assert not ci_reached(steady[:5], 0.01, 10)  # the floor of repetitions
    low, high = median_ci(list(range(100)))
    assert (low, high) == (40, 60)
    assert cpu_share(0.5, 1.0) == 0.5 and cpu_share(None, 1.0) is None


def test_the_incumbent_reference_prefers_the_same_job() -> None:
    assert incumbent_reference(10.0, None, None) == 10.0  # not measured by this job
    assert incumbent_reference(10.0, True, 11.0) == 11.0  # side by side wins over stored
    assert incumbent_reference(10.0, False, 30.0) is None  # broken or clearly slower now
    assert replaces_incumbent(incumbent_reference(10.0, True, 11.0), 10.5)
    assert not replaces_incumbent(incumbent_reference(10.0, True, 9.0), 8.9)


def test_a_challenger_within_noise_does_not_replace_the_incumbent() -> None:
    # timed side by side in five interleaved rounds: the challenger's median is 2% lower,
    # but round by round the two swap places (ratios 0.95 to 1.05): not confident
    incumbent = [10.0, 10.6, 9.9, 10.2, 10.1]
    challenger = [9.5, 10.7, 9.4, 10.3, 9.9]
    assert replaces_incumbent(10.2, 9.9)  # medians alone, 3% apart, would flip the winner
    assert confidently_faster(challenger, incumbent) is False
    assert not replaces_incumbent(
        10.2, 9.9, incumbent_rounds=incumbent, candidate_rounds=challenger
    )
    # 10% faster in every round: replaced
    clearly = [9.0, 9.5, 8.9, 9.2, 9.1]
    assert replaces_incumbent(10.1, 9.1, incumbent_rounds=incumbent, candidate_rounds=clearly)
    # fewer shared rounds than MIN_ROUNDS: the medians decide, as before
    assert confidently_faster(clearly, incumbent[:2]) is None
    assert replaces_incumbent(10.0, 9.5, incumbent_rounds=[], candidate_rounds=challenger)
    assert rounds_of({ROUNDS_KEY: [1, 2.5, "x"]}) == [1.0, 2.5] and rounds_of(None) == []
    # the first pass chose the contenders (biased low): it is not one of the rounds
    assert rounds_of({ROUNDS_KEY: [2.0], "first_pass_median_us": 3.0}) == [2.0]


def test_rounds_are_paired_so_the_drift_of_a_window_divides_out() -> None:
    # the machine drifted by 20% over the rounds; in each round the challenger was 10% faster
    incumbent = [10.0, 11.0, 12.0, 10.5, 11.5]
    challenger = [t * 0.9 for t in incumbent]
    assert min(incumbent) < max(challenger)  # the ranges overlap: unpaired, no decision
    low, high = ratio_interval(incumbent, challenger)  # type: ignore[misc]
    assert low == pytest.approx(1 / 0.9) and high == pytest.approx(1 / 0.9)
    assert replaces_incumbent(11.0, 9.9, incumbent_rounds=incumbent, candidate_rounds=challenger)
    # the band is never narrower than TIE_BAND: 1% faster in every round is still a tie
    near = [t * 0.99 for t in incumbent]
    assert not replaces_incumbent(11.0, 10.9, incumbent_rounds=incumbent, candidate_rounds=near)


def test_the_tie_set_is_every_contender_the_rounds_cannot_tell_from_the_fastest() -> None:
    rows = [
        Row("fast", 10.0, rounds=[10.0, 10.4, 9.8, 10.1, 10.0]),
        Row("noisy", 10.4, rounds=[10.4, 10.0, 10.9, 10.3, 10.6]),  # 0.96-1.11 of fast
        Row("steady_slower", 10.5, rounds=[10.5, 10.9, 10.3, 10.6, 10.5]),  # 5% in each round
        Row("no_rounds", 9.0),  # its first pass only: not a contender, cannot win
    ]
    decision = decide(
        rows,
        median=lambda r: r.median,
        name=lambda r: r.name,
        ok=lambda r: r.ok,
        rounds=lambda r: r.rounds,
    )
    assert decision.method == "rounds" and decision.fastest is rows[0]
    assert [r.name for r in decision.tie_set] == ["fast", "noisy"]
    assert decision.winner is rows[0]  # by name
    # the incumbent wins inside the tie set, the vendor's default before it
    by_incumbent = decide(
        rows,
        median=lambda r: r.median,
        name=lambda r: r.name,
        ok=lambda r: r.ok,
        rounds=lambda r: r.rounds,
        incumbent=lambda r: r.name == "noisy",
    )
    assert by_incumbent.winner is rows[1] and by_incumbent.tie_set[0] is rows[1]
    vendor_first = decide(
        rows,
        median=lambda r: r.median,
        name=lambda r: r.name,
        ok=lambda r: r.ok,
        rounds=lambda r: r.rounds,
        incumbent=lambda r: r.name == "noisy",
        vendor_default=lambda r: r.name == "fast",
    )
    assert vendor_first.winner is rows[0]
    # nobody was confirmed: the medians and the fixed band decide, as before
    plain = decide(rows, median=lambda r: r.median, name=lambda r: r.name, ok=lambda r: r.ok)
    assert plain.method == "medians" and plain.winner is rows[3]


def test_a_tie_goes_to_the_vendor_default_in_engine_and_store() -> None:
    from tuner.winner import VENDOR_DEFAULT_KEY

    rows = [("a_tuned", 10.0, {}), ("z_vendor", 10.15, {VENDOR_DEFAULT_KEY: True})]
    chosen = decide(
        rows,
        median=lambda r: r[1],
        name=lambda r: r[0],
        ok=lambda r: True,
        vendor_default=lambda r: bool(r[2].get(VENDOR_DEFAULT_KEY)),
    ).winner
    assert chosen is not None and chosen[0] == "z_vendor"
    # outside the band the faster one wins whatever it is
    rows[1] = ("z_vendor", 10.5, {VENDOR_DEFAULT_KEY: True})
    chosen = decide(
        rows,
        median=lambda r: r[1],
        name=lambda r: r[0],
        ok=lambda r: True,
        vendor_default=lambda r: bool(r[2].get(VENDOR_DEFAULT_KEY)),
    ).winner
    assert chosen is not None and chosen[0] == "a_tuned"


def test_an_incumbent_timed_under_interference_needs_a_wider_margin() -> None:
    incumbent, challenger = [10.0, 10.2, 10.1, 10.3], [9.5, 9.6, 9.4, 9.5]
    # 5% apart in every median: confident with a whole core
    assert replaces_incumbent(10.0, 9.5, incumbent_rounds=incumbent, candidate_rounds=challenger)
    # the incumbent got 85% of a core: it may have been up to 15% slowed, so it stays
    assert not replaces_incumbent(
        10.0,
        9.5,
        incumbent_rounds=incumbent,
        candidate_rounds=challenger,
        incumbent_cpu_share=0.85,
    )
    assert replaces_incumbent(
        10.0, 7.0, incumbent_rounds=incumbent, candidate_rounds=[7.0] * 4, incumbent_cpu_share=0.85
    )


def test_engine_and_store_decide_alike_under_energy() -> None:
    """Both sides go through tuner.winner.decide_for: joules decide within the tie band, the
    vendor default first (rule 3 holds under either objective), and a result without a time
    takes no part."""
    from service.store.best import decide_winner as store_decide
    from tuner.engine import decide_winner as engine_decide

    figures = {
        "a_lean": (10.0, 1.00, False),
        "b_vendor": (9.0, 1.01, True),
        "c_hungry": (8.0, 2.0, False),
        "d_untimed": (None, 0.5, False),
    }
    results, rows = [], []
    for i, (name, (us, joules, vendor)) in enumerate(figures.items()):
        provenance = {VENDOR_DEFAULT_KEY: True} if vendor else {}
        timing = Timing(us, us, us, us, 10) if us is not None else None
        results.append(
            BenchResult(
                f"id-{name}", name, {}, Outcome.OK, timing, energy_j=joules, provenance=provenance
            )
        )
        rows.append(
            FakeMeasurement(i, f"id-{name}", "ok", us, provenance=provenance, energy_j=joules)
        )
    names = {f"id-{name}": name for name in figures}
    by_engine = engine_decide(results, TIE_BAND, "energy")
    by_store = store_decide(rows, names, "energy")  # type: ignore[arg-type]
    assert [r.variant_name for r in by_engine.tie_set] == ["b_vendor", "a_lean"]
    assert [names[m.variant_id] for m in by_store.tie_set] == ["b_vendor", "a_lean"]


def test_the_stored_winner_replace_record_and_agreement_rules() -> None:
    # the incumbent as the candidate's own job timed it counts, not its stored median
    assert replaces_stored_winner(10.0, 10.5, {}, Timed(True, 11.0, {}))
    assert not replaces_stored_winner(10.0, 9.9, {})  # within the band of the stored median
    assert replaces_stored_winner(10.0, 9.9, {}, Timed(False, None, {}))  # it failed this time
    # an incumbent timed with half a core may have been slowed by half: the band grows
    assert replaces_stored_winner(10.0, 7.0, {}, Timed(True, 10.0, {CPU_SHARE_KEY: 1.0}))
    assert not replaces_stored_winner(10.0, 7.0, {}, Timed(True, 10.0, {CPU_SHARE_KEY: 0.5}))
    assert is_record(10.0, 8.9, 0.1) and not is_record(10.0, 9.1, 0.1)
    assert not is_record(10.0, 1.0, None) and not is_record(None, 1.0, 0.1)
    assert same_speed(10.0, 10.1) and same_speed(10.1, 10.0) and not same_speed(10.0, 10.5)
