"""engine.tune end to end on the CPU backend: budgets, a verified winner, failures as data."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.tuner.cpu_helpers import quick_config
from tuner.backends.cpu import CpuBackend
from tuner.capabilities import Capabilities
from tuner.engine import candidate_params, tune, winning_result
from tuner.errors import InvalidRequestError, NoVariantsError
from tuner.problems import ReduceProblem, SoftmaxProblem
from tuner.types import BenchResult, Budget, Outcome, Timing, TuneRequest


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-cache")


@pytest.fixture()
def backend(cache_dir: Path) -> Iterator[CpuBackend]:
    b = CpuBackend(quick_config(cache_dir))
    yield b
    b.close()


class Recorder:
    def __init__(self) -> None:
        self.start: tuple[int, int] | None = None
        self.done: list[int] = []

    def on_start(self, total: int, pruned: int) -> None:
        self.start = (total, pruned)

    def on_result(self, result: BenchResult, done: int, total: int) -> None:
        self.done.append(done)


def test_tune_reduce_exhaustive_with_max_variants(backend: CpuBackend) -> None:
    problem = ReduceProblem(m=16, k=24, kind="sum")
    request = TuneRequest(
        "reduce", "f32", "row", problem, strategy="exhaustive", budget=Budget(max_variants=3)
    )
    recorder = Recorder()
    result = tune(request, backend, backend.config, recorder)
    assert len(result.results) == 3
    assert recorder.start is not None and recorder.start[0] == 3 and recorder.start[1] > 0
    assert recorder.done == [1, 2, 3]
    assert result.winner is not None and result.winner.outcome is Outcome.OK
    assert result.winner.timing is not None
    assert result.winner in result.results
    assert result.device.backend == "cpu" and result.toolchain.compiler.startswith("g++")
    # a cut space without a problem-aware order is sampled over every axis, not its first 3
    kept, _ = candidate_params(request, backend.device().arch, "cpu")
    assert [r.params for r in result.results] != kept[:3]
    for axis in ("pack", "acc", "unroll"):  # the first 3 hold one pack and one acc only
        assert len({r.params[axis] for r in result.results}) >= 2, axis


def test_tune_softmax_again_hits_the_compile_cache(backend: CpuBackend) -> None:
    request = TuneRequest(
        "softmax", "bf16", "row", SoftmaxProblem(m=8, k=40), budget=Budget(max_variants=2)
    )
    first = tune(request, backend, backend.config)
    second = tune(request, backend, backend.config)
    assert first.winner is not None and second.winner is not None
    assert [r.variant_id for r in first.results] == [r.variant_id for r in second.results]
    assert all(r.compile_seconds == 0.0 for r in second.results)  # cached builds


def test_tune_uses_the_space_it_is_handed(
    backend: CpuBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker loads a task's space once and hands it on: tune() loads no other."""
    import tuner.engine as engine
    from tuner.registry import load_space

    space = load_space("softmax", "cpu")
    loads: list[str] = []
    monkeypatch.setattr(engine, "load_space", lambda op, name: loads.append(op) or space)
    request = TuneRequest(
        "softmax", "f32", "row", SoftmaxProblem(m=8, k=40), budget=Budget(max_variants=2)
    )
    handed = tune(request, backend, backend.config, space=space)
    assert loads == [] and handed.winner is not None
    tune(request, backend, backend.config)  # alone, the engine loads it itself, once
    assert loads == ["softmax"]


def test_everything_pruned_raises(backend: CpuBackend) -> None:
    # k=1 still admits pack 1 / acc 1 / unroll 1, so check the error path with a foreign op space
    request = TuneRequest("reduce", "f32", "row", SoftmaxProblem(m=1, k=1))
    with pytest.raises(NoVariantsError):
        tune(request, backend, backend.config)


def test_bad_dtype_is_invalid_request(backend: CpuBackend) -> None:
    request = TuneRequest("reduce", "f64", "row", ReduceProblem(m=1, k=8))
    with pytest.raises(InvalidRequestError):
        tune(request, backend, backend.config)


def test_winning_result_breaks_ties_by_name() -> None:
    def result(name: str, median: float, outcome: Outcome = Outcome.OK) -> BenchResult:
        return BenchResult(name, name, {}, outcome, Timing(median, median, median, median, 5))

    results = [result("b", 10.0), result("a", 10.1), result("c", 5.0, Outcome.WRONG_RESULT)]
    winner = winning_result(results, tie_band=0.02)
    assert winner is not None and winner.variant_name == "a"


def test_space_default_cap_applies_when_the_budget_names_none(
    backend: CpuBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.spaces.cpu_reduce import CpuReduceSpace

    monkeypatch.setattr(CpuReduceSpace, "default_max_variants", 2)
    uncapped = TuneRequest("reduce", "f32", "row", ReduceProblem(m=4, k=64))
    assert len(tune(uncapped, backend, backend.config).results) == 2
    named = TuneRequest(
        "reduce", "f32", "row", ReduceProblem(m=4, k=64), budget=Budget(max_variants=3)
    )
    assert len(tune(named, backend, backend.config).results) == 3  # the job's budget wins


def test_energy_objective_is_refused_by_a_backend_without_a_counter(backend: CpuBackend) -> None:
    assert backend.capabilities.measures_energy is False
    request = TuneRequest("reduce", "f32", "row", ReduceProblem(m=4, k=64), objective="energy")
    with pytest.raises(InvalidRequestError, match="cannot measure energy") as caught:
        tune(request, backend, backend.config)
    assert caught.value.field == "objective"


class EnergyMeteredCpuBackend(CpuBackend):
    """Test double: the real CPU backend, plus made-up joules per launch that fall as the
    variant's position in the space rises, so that the least-energy variant is not the
    fastest one the CPU happens to measure."""

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(measures_energy=True)

    def run(self, variant, artifact, request, abort_above_us=None):  # type: ignore[no-untyped-def]
        result = super().run(variant, artifact, request, abort_above_us)
        self.seen = getattr(self, "seen", []) + [variant.name]
        return replace(result, energy_j=1.0 / len(self.seen))


def test_energy_winner_is_the_least_energy_verified_variant(cache_dir: Path) -> None:
    metered = EnergyMeteredCpuBackend(quick_config(cache_dir))
    try:
        request = TuneRequest(
            "reduce",
            "f32",
            "row",
            ReduceProblem(m=16, k=24, kind="sum"),
            budget=Budget(max_variants=3),
            objective="energy",
        )
        result = tune(request, metered, metered.config)
    finally:
        metered.close()
    assert len(result.results) == 3 and all(r.energy_j for r in result.results)
    least = min(result.results, key=lambda r: r.energy_j or 1e9)
    assert result.winner is not None and result.winner.variant_name == least.variant_name
    assert result.winner.variant_name == metered.seen[-1]


def test_winning_result_energy_skips_unmetered_and_unverified() -> None:
    def result(name: str, energy: float | None, outcome: Outcome = Outcome.OK) -> BenchResult:
        timing = Timing(1.0, 1.0, 1.0, 1.0, 5)
        return BenchResult(name, name, {}, outcome, timing, energy_j=energy)

    results = [result("a", 3.0), result("b", None), result("c", 0.5, Outcome.WRONG_RESULT)]
    results.append(result("d", 2.0))
    winner = winning_result(results, tie_band=0.02, objective="energy")
    assert winner is not None and winner.variant_name == "d"
    assert winning_result([result("b", None)], tie_band=0.02, objective="energy") is None
