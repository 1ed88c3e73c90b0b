"""Cold starts: a slow build must not starve the search, and an answer says when its budget
left candidates unmeasured (issue 22, item 3).

A stand-in backend with the GPU's capability (compiles overlap timing) whose builds take
different times: one candidate's build never finishes within the budget, as a cold CUTLASS
build (~40 s) under a 40 s budget. The engine times every other candidate while it runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tuner.cpu_helpers import quick_config
from tests.tuner.stand_ins import Script, StandInBackend
from tuner.capabilities import Capabilities
from tuner.engine import tune
from tuner.problems import ReduceProblem
from tuner.types import Budget, TuneRequest, Variant

OVERLAP = Capabilities(compile_overlaps_measure=True)
#: long enough to build and time the quick candidates, well before a slow build would finish
BUDGET_S = 2.0


def _request(max_seconds: float | None = BUDGET_S) -> TuneRequest:
    problem = ReduceProblem(m=64, k=4096)
    budget = Budget(max_variants=6, max_seconds=max_seconds)
    return TuneRequest("reduce", "f32", "row", problem, budget=budget)


@pytest.fixture
def never_built() -> Iterator[threading.Event]:
    """The gate of a build that does not finish during the test's budget (opened at the end,
    so its thread ends)."""
    gate = threading.Event()
    yield gate
    gate.set()


def _names(tmp_path: Path) -> list[str]:
    backend = StandInBackend(quick_config(tmp_path), capabilities=OVERLAP)
    return [r.variant_name for r in tune(_request(None), backend, backend.config).results]


def _slow(name: str, gate: threading.Event):  # type: ignore[no-untyped-def]
    return lambda variant: gate if variant.name == name else None


@pytest.mark.parametrize("slow_position", [0, 2])
def test_candidates_built_are_timed_while_a_slow_build_runs(
    tmp_path: Path, never_built: threading.Event, slow_position: int
) -> None:
    names = _names(tmp_path)
    slow = names[slow_position]
    fastest = next(n for n in names if n != slow)
    script = Script(roles=[fastest], times={fastest: [10.0]}, other_us=20.0)
    backend = StandInBackend(
        quick_config(tmp_path), script, capabilities=OVERLAP, gate=_slow(slow, never_built)
    )
    result = tune(_request(), backend, backend.config)
    timed = {r.variant_name for r in result.results}
    # every candidate but the slow one was built and timed, whichever build was slow
    assert timed == set(names) - {slow}
    assert result.winner is not None and result.winner.variant_name == fastest
    # and the answer says that a budgeted candidate was left unmeasured
    assert result.unmeasured == 1 and result.complete is False


def test_a_budget_that_measures_everything_is_complete(tmp_path: Path) -> None:
    backend = StandInBackend(quick_config(tmp_path), capabilities=OVERLAP)
    result = tune(_request(), backend, backend.config)
    assert len(result.results) == 6
    assert result.complete and result.unmeasured == 0


def test_a_slow_build_that_finishes_in_time_is_timed_too(tmp_path: Path) -> None:
    """Builds finish out of order: the late one is timed when it is ready."""
    names = _names(tmp_path)
    gate = threading.Event()
    order: list[str] = []

    class OpensTheGate(StandInBackend):
        def run(self, variant: Variant, *args, **kwargs):  # type: ignore[no-untyped-def]
            order.append(variant.name)
            if len(order) == len(names) - 1:
                gate.set()  # the slow build ends once the others are timed
            return super().run(variant, *args, **kwargs)

    backend = OpensTheGate(quick_config(tmp_path), capabilities=OVERLAP, gate=_slow(names[0], gate))
    result = tune(_request(60.0), backend, backend.config)
    first_pass = order[: len(names)]
    assert first_pass[-1] == names[0] and set(first_pass) == set(names)
    assert result.complete


def test_the_cpu_builds_a_batch_before_timing_it(tmp_path: Path) -> None:
    """Without the overlap capability no compile runs while a candidate is timed: the batch
    is built whole first (its builds all precede its first timing)."""
    backend = StandInBackend(quick_config(tmp_path))  # named cpu: the CPU's capabilities
    result = tune(_request(None), backend, backend.config)
    kinds = [kind for kind, _ in backend.events]
    assert kinds[:6] == ["build"] * 6 and "build" not in kinds[6:]
    assert result.complete
