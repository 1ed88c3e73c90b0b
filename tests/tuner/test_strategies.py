"""Search strategies: each asks every candidate at most once, in its own documented order."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from tuner.registry import load_strategy_class
from tuner.spaces.base import Params
from tuner.strategies.base import Strategy
from tuner.strategies.exhaustive import ExhaustiveStrategy
from tuner.strategies.random_search import RandomStrategy
from tuner.strategies.tpe import TpeStrategy

STRATEGIES = [ExhaustiveStrategy, RandomStrategy, TpeStrategy]


def gemm_like_candidates() -> list[Params]:
    """A register-tile x cache-block x packing grid like the CPU gemm space's."""
    return [
        {"mr": mr, "nr": nr, "kc": kc, "packed": packed, "order": order}
        for mr, nr, kc, packed, order in itertools.product(
            [2, 4, 6, 8], [4, 8, 16], [64, 128, 256], [True, False], ["jik", "ijk"]
        )
    ]


def synthetic_score(params: Params) -> float:
    """A smooth bowl with its minimum near mr=5, nr=14, kc=128, packed, jik."""
    return (
        1.0
        + (math.log2(params["mr"]) - 2.3) ** 2
        + 0.7 * (math.log2(params["nr"]) - 3.8) ** 2
        + 0.3 * abs(math.log2(params["kc"]) - 7)
        + (0.0 if params["packed"] else 0.4)
        + (0.0 if params["order"] == "jik" else 0.2)
    )


def drain(strategy: Strategy, batch: int, score=synthetic_score) -> list[int]:
    asked: list[int] = []
    while True:
        indices = strategy.ask(batch)
        if not indices:
            return asked
        for index in indices:
            strategy.tell(index, score(strategy.candidates[index]))
        asked.extend(indices)


@pytest.mark.parametrize("cls", STRATEGIES)
@pytest.mark.parametrize("batch", [1, 3])
def test_every_candidate_asked_exactly_once_then_empty(cls: type[Strategy], batch: int) -> None:
    candidates = gemm_like_candidates()
    strategy = cls(candidates, seed=7)
    asked = drain(strategy, batch)
    assert sorted(asked) == list(range(len(candidates)))
    assert strategy.ask(4) == []
    assert strategy.ask(1) == []


@pytest.mark.parametrize("cls", STRATEGIES)
def test_ask_respects_n(cls: type[Strategy]) -> None:
    strategy = cls(gemm_like_candidates(), seed=1)
    assert strategy.ask(0) == []
    assert len(strategy.ask(5)) == 5
    assert len(strategy.ask(2)) == 2


def test_exhaustive_visits_in_the_space_order() -> None:
    candidates = gemm_like_candidates()
    assert drain(ExhaustiveStrategy(candidates), batch=4) == list(range(len(candidates)))


def test_random_is_a_seeded_permutation() -> None:
    candidates = gemm_like_candidates()
    first = drain(RandomStrategy(candidates, seed=3), batch=5)
    again = drain(RandomStrategy(candidates, seed=3), batch=2)
    other = drain(RandomStrategy(candidates, seed=4), batch=5)
    assert first == again  # the batch size does not change the order
    assert first != other
    assert first != list(range(len(candidates)))


def test_tpe_is_deterministic_per_seed() -> None:
    candidates = gemm_like_candidates()
    first = drain(TpeStrategy(candidates, seed=11), batch=2)[:30]
    again = drain(TpeStrategy(candidates, seed=11), batch=2)[:30]
    assert first == again


def test_tpe_starts_random_then_follows_the_model() -> None:
    candidates = gemm_like_candidates()
    strategy = TpeStrategy(candidates, seed=0, startup=4)
    startup = strategy.ask(4)
    assert startup == RandomStrategy(candidates, seed=0).ask(4)


def evaluations_to_near_optimum(strategy: Strategy, batch: int = 2) -> int:
    best = min(synthetic_score(c) for c in strategy.candidates)
    count = 0
    while indices := strategy.ask(batch):
        for index in indices:
            count += 1
            score = synthetic_score(strategy.candidates[index])
            strategy.tell(index, score)
            if score <= best * 1.03:
                return count
    raise AssertionError("never reached the optimum although every candidate was asked")


def test_tpe_needs_fewer_evaluations_than_random() -> None:
    candidates = gemm_like_candidates()
    seeds = range(12)
    tpe = [evaluations_to_near_optimum(TpeStrategy(candidates, seed=s)) for s in seeds]
    rnd = [evaluations_to_near_optimum(RandomStrategy(candidates, seed=s)) for s in seeds]
    assert statistics.mean(tpe) < 0.8 * statistics.mean(rnd)
    assert statistics.median(tpe) < len(candidates) * 0.35


def test_tpe_steers_away_from_failures() -> None:
    """Candidates with packed=False all fail; the model should mostly avoid them after start-up."""
    candidates = gemm_like_candidates()
    strategy = TpeStrategy(candidates, seed=5, startup=4)

    def score(params: Params) -> float | None:
        return None if not params["packed"] else synthetic_score(params)

    asked = drain(strategy, batch=1, score=score)
    after_startup = [candidates[i]["packed"] for i in asked[4:24]]
    assert sum(after_startup) > len(after_startup) * 0.7


def test_tpe_with_a_single_candidate_or_constant_params() -> None:
    def score(params: Params) -> float:
        return 1.0

    assert drain(TpeStrategy([{"mr": 4}], seed=0), batch=3, score=score) == [0]
    constant = [{"mr": 4, "tag": "x"}] * 3
    assert sorted(drain(TpeStrategy(constant, seed=0), batch=1, score=score)) == [0, 1, 2]


@pytest.mark.parametrize("name", ["exhaustive", "random", "tpe"])
def test_registry_names(name: str) -> None:
    cls = load_strategy_class(name)
    assert cls.name == name


def test_a_budget_cut_samples_every_value_of_every_axis() -> None:
    from tuner.spaces.cpu_reduce import CpuReduceSpace

    spaces = [gemm_like_candidates(), list(CpuReduceSpace().enumerate("f32", "row", "x86_64"))]
    for candidates in spaces:
        axes = {key: {p[key] for p in candidates} for key in candidates[0]}
        budget = max(len(values) for values in axes.values())
        strategy = ExhaustiveStrategy(candidates, budget=budget)
        picked = [candidates[i] for i in strategy.ask(budget)]
        for key, values in axes.items():
            assert {p[key] for p in picked} == values, key
        # the rest follows, each candidate once
        rest = strategy.ask(len(candidates))
        assert len(set(rest)) == len(candidates) - budget
    # no cut: the space's own order
    plain = ExhaustiveStrategy(gemm_like_candidates())
    assert plain.ask(5) == [0, 1, 2, 3, 4]
