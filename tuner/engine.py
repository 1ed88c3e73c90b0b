"""The tuning loop: enumerate, prune, ask the strategy, build, run, pick the winner.

    result = tune(request, backend, config, observer)

Budgets (``max_variants``, ``max_seconds``) are enforced here. A variant's failure is a
:class:`BenchResult` with a failing outcome; only exceptions from :mod:`tuner.errors` (or a
bug) leave this function.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from tuner.backends.base import Backend
from tuner.errors import InvalidRequestError, NoVariantsError
from tuner.registry import load_space, load_strategy_class
from tuner.render import render_variant
from tuner.spaces.base import Params
from tuner.types import (
    BenchResult,
    EngineConfig,
    Objective,
    Outcome,
    ProblemResult,
    TuneRequest,
)

__all__ = ["TuneObserver", "tune", "pick_winner", "candidate_params"]

log = logging.getLogger(__name__)


class TuneObserver(Protocol):
    """Progress hooks; the CLI draws a bar from them, the worker heartbeats with them."""

    def on_start(self, total: int, pruned: int) -> None: ...

    def on_result(self, result: BenchResult, done: int, total: int) -> None: ...


def candidate_params(
    request: TuneRequest, arch: str, backend_name: str
) -> tuple[list[Params], list[tuple[Params, str]]]:
    """The space for the request split into (runnable candidates, [(pruned, reason)])."""
    space = load_space(request.op, backend_name)
    kept: list[Params] = []
    pruned: list[tuple[Params, str]] = []
    for params in space.enumerate(request.dtype, request.layout, arch):
        reason = space.prune(params, request.problem, request.dtype, request.layout)
        if reason is None:
            kept.append(params)
        else:
            pruned.append((params, reason))
    kept = space.order(kept, request.problem, request.dtype, request.layout)
    return kept, pruned


def pick_winner(
    results: Sequence[BenchResult], tie_band: float, objective: Objective = "time"
) -> BenchResult | None:
    """The best verified result: the fastest median (``time``) or the fewest joules per launch
    (``energy``, among results that carry energy); values within ``tie_band`` of the best are a
    tie, broken by name so that re-tuning the same space does not flip the winner on noise."""
    verified = [r for r in results if r.ok and r.timing is not None]
    if objective == "energy":
        verified = [r for r in verified if r.energy_j is not None]
    if not verified:
        return None

    def score(r: BenchResult) -> float:
        if objective == "energy":
            assert r.energy_j is not None
            return r.energy_j
        assert r.timing is not None
        return r.timing.median_us

    best = min(score(r) for r in verified)
    tied = [r for r in verified if score(r) <= best * (1.0 + tie_band)]
    return min(tied, key=lambda r: r.variant_name)


def tune(
    request: TuneRequest,
    backend: Backend,
    config: EngineConfig,
    observer: TuneObserver | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ProblemResult:
    """Tune one problem on the backend's device and return every candidate's result."""
    if request.objective == "energy" and not backend.measures_energy:
        raise InvalidRequestError(
            "objective", f"the {backend.name} backend cannot measure energy; use 'time'"
        )
    started = time.monotonic()
    device = backend.device()
    space = load_space(request.op, backend.name)
    candidates, pruned = candidate_params(request, device.arch, backend.name)
    if not candidates:
        reasons = sorted({reason for _, reason in pruned})[:3]
        raise NoVariantsError(f"every variant was pruned for {request.problem.key()}: {reasons}")
    strategy = load_strategy_class(request.strategy)(candidates, seed=request.seed)
    budget = request.budget
    cap = budget.max_variants or space.default_max_variants or len(candidates)
    total = min(len(candidates), cap)
    deadline = started + budget.max_seconds if budget.max_seconds else math.inf
    batch_size = config.compile_workers or os.cpu_count() or 1
    if observer:
        observer.on_start(total, len(pruned))
    log.info(
        "tuning %s %s: %d candidates, %d pruned",
        request.op,
        request.problem.key(),
        total,
        len(pruned),
    )

    results: list[BenchResult] = []
    best_us: float | None = None

    def out_of_budget() -> bool:
        return time.monotonic() >= deadline or bool(should_stop and should_stop())

    while len(results) < total and not out_of_budget():
        batch = strategy.ask(min(batch_size, total - len(results)))
        if not batch:
            break
        variants = [
            render_variant(
                space,
                candidates[i],
                request.dtype,
                request.layout,
                device.arch,
                backend.base_flags(device.arch),
                backend.compiler_identity(),
            )
            for i in batch
        ]
        builds = backend.build(variants)
        for index, variant in zip(batch, variants, strict=True):
            if out_of_budget():
                break
            built = builds[variant.id]
            if not built.ok or built.artifact is None:
                outcome = Outcome.TIMEOUT if built.timed_out else Outcome.COMPILE_ERROR
                result = BenchResult(
                    variant.id,
                    variant.name,
                    variant.params,
                    outcome,
                    compile_seconds=built.seconds,
                    log=built.log[-4000:],
                )
            else:
                # a slow variant may still draw the least energy: abort on time only
                timed = request.objective == "time"
                abort = best_us * config.abort_slower_than if best_us and timed else None
                result = replace(
                    backend.run(variant, built.artifact, request, abort),
                    compile_seconds=built.seconds,
                )
            if (
                result.ok
                and result.timing
                and (best_us is None or result.timing.median_us < best_us)
            ):
                best_us = result.timing.median_us
            strategy.tell(index, result.timing.median_us if result.timing else None)
            results.append(result)
            if observer:
                observer.on_result(result, len(results), total)

    return ProblemResult(
        request=request,
        device=device,
        toolchain=backend.toolchain(space),
        results=results,
        winner=pick_winner(results, config.tie_band, request.objective),
        seconds=time.monotonic() - started,
    )
