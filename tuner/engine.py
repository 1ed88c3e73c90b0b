"""The tuning loop: enumerate, prune, ask the strategy, build, run, pick the winner.

    result = tune(request, backend, config, observer)

A :class:`BatchRunner` builds, verifies and times candidates (and re-measures one), and
:func:`tune` is the loop that asks the strategy for candidates, has them built
(:mod:`tuner.feed`), times each once built, enforces the budgets (``max_variants``,
``max_seconds``), settles suspect contenders and times the near-ties again side by side
(:mod:`tuner.remeasure`), and decides the winner and its tie set with :mod:`tuner.winner`.
A variant's failure is a :class:`BenchResult` with a failing outcome; only exceptions from
:mod:`tuner.errors` (or a bug) leave this module.

Compiling and measuring overlap only where they do not share the measured resource: a
backend with ``compile_overlaps_measure`` (a GPU, measured while its host's CPUs compile)
times each candidate as soon as its build finishes, while slower builds go on (a cold
CUTLASS build takes ~40 s); the CPU backend builds a batch, then times it. A budget that ends
with budgeted candidates unmeasured says so (``ProblemResult.unmeasured``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Protocol

from tuner import winner
from tuner.backends.base import Backend
from tuner.capabilities import Capabilities
from tuner.epilogues import params_epilogue
from tuner.errors import InvalidRequestError, NoVariantsError
from tuner.feed import BatchFeed, StreamFeed
from tuner.problems import problem_epilogue
from tuner.registry import load_space, load_strategy_class
from tuner.remeasure import confirm_contenders, settle_suspects
from tuner.spaces.base import Params, VariantSpace
from tuner.types import (
    BenchResult,
    CompileResult,
    DeviceInfo,
    EngineConfig,
    Objective,
    Outcome,
    ProblemResult,
    TuneRequest,
    Variant,
)

__all__ = [
    "TuneObserver",
    "BatchRunner",
    "tune",
    "winning_result",
    "decide_winner",
    "candidate_params",
]

log = logging.getLogger(__name__)

#: a non-adaptive strategy is asked this many candidates at once (one compile batch each)
LARGE_BATCH = 64


class TuneObserver(Protocol):
    """Progress hooks; the CLI draws a bar from them, the worker heartbeats with them."""

    def on_start(self, total: int, pruned: int) -> None: ...

    def on_result(self, result: BenchResult, done: int, total: int) -> None: ...


def candidate_params(
    request: TuneRequest,
    arch: str,
    backend_name: str,
    discovered: Sequence[Params] = (),
    *,
    space: VariantSpace | None = None,
) -> tuple[list[Params], list[tuple[Params, str]]]:
    """The space for the request split into (runnable candidates, [(pruned, reason)]);
    ``discovered``: params the backend found on the device for this problem (vendor
    algorithms), pruned and ordered with the rest. ``space``: the request's space when the
    caller loaded it already (else it is loaded here)."""
    space = space if space is not None else load_space(request.op, backend_name)
    kept: list[Params] = []
    pruned: list[tuple[Params, str]] = []
    enumerated = space.enumerate(request.dtype, request.layout, arch)
    # a space lists each fused family once per epilogue: only the problem's are candidates
    epilogue = problem_epilogue(request.problem)
    for params in [*discovered, *(p for p in enumerated if p not in discovered)]:
        if params_epilogue(params) != epilogue:
            continue
        reason = space.prune(params, request.problem, request.dtype, request.layout)
        if reason is None:
            kept.append(params)
        else:
            pruned.append((params, reason))
    kept = space.order(kept, request.problem, request.dtype, request.layout)
    return kept, pruned


def has_problem_order(space: VariantSpace) -> bool:
    """True when the space orders candidates for the problem (its first N are meant)."""
    return type(space).order is not VariantSpace.order


def decide_winner(
    results: Sequence[BenchResult],
    tie_band: float,
    objective: Objective = "time",
    incumbents: Collection[str] = (),
) -> winner.Decision[BenchResult]:
    """The engine's side of :func:`tuner.winner.decide_for` over its results: the verified
    winner of ``results`` and its tie set, by time (confirmation rounds, else medians) or,
    under objective ``energy``, by joules per launch (among results that carry one)."""
    return winner.decide_for(
        results,
        objective,
        median_us=lambda r: r.timing.median_us if r.timing else None,
        energy_j=lambda r: r.energy_j,
        name=lambda r: r.variant_name,
        ok=lambda r: r.ok,
        provenance=lambda r: r.provenance,
        incumbent=lambda r: r.variant_name in incumbents,
        tie_band=tie_band,
    )


def winning_result(
    results: Sequence[BenchResult],
    tie_band: float,
    objective: Objective = "time",
    incumbents: Collection[str] = (),
) -> BenchResult | None:
    """The winning result of :func:`decide_winner` (None when nothing verified)."""
    return decide_winner(results, tie_band, objective, incumbents).winner


class BatchRunner:
    """Builds, verifies and times candidates of one request on one backend."""

    def __init__(
        self, backend: Backend, space: VariantSpace, request: TuneRequest, device: DeviceInfo
    ) -> None:
        self.backend = backend
        self.space = space
        self.request = request
        self.device = device
        self.artifacts: dict[str, tuple[Variant, str, float]] = {}

    def render(self, params: Sequence[Params]) -> list[Variant]:
        arch = self.device.arch
        return [
            self.backend.render(self.space, p, self.request.dtype, self.request.layout, arch)
            for p in params
        ]

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        return self.backend.build(variants)

    def measure(
        self, variant: Variant, built: CompileResult, abort_above_us: float | None
    ) -> BenchResult:
        """Verify and time one built variant (a failed build becomes its outcome)."""
        if not built.ok or built.artifact is None:
            outcome = Outcome.TIMEOUT if built.timed_out else Outcome.COMPILE_ERROR
            return BenchResult(
                variant.id,
                variant.name,
                variant.params,
                outcome,
                compile_seconds=built.seconds,
                log=built.log[-4000:],
            )
        self.artifacts[variant.id] = (variant, built.artifact, built.seconds)
        result = self.backend.run(variant, built.artifact, self.request, abort_above_us)
        return replace(result, compile_seconds=built.seconds)

    def remeasure(self, result: BenchResult) -> BenchResult:
        """Time a measured variant again, without an early stop."""
        variant, artifact, seconds = self.artifacts[result.variant_id]
        again = self.backend.run(variant, artifact, self.request, None)
        return replace(again, compile_seconds=seconds)

    def new_window(self) -> None:
        """The next measurements in a window of their own (``Backend.new_window``)."""
        self.backend.new_window(self.request)


def tune(
    request: TuneRequest,
    backend: Backend,
    config: EngineConfig,
    observer: TuneObserver | None = None,
    should_stop: Callable[[], bool] | None = None,
    *,
    space: VariantSpace | None = None,
) -> ProblemResult:
    """Tune one problem on the backend's device and return every candidate's result.
    ``space``: the request's variant space when the caller loaded it already (a worker loads
    it once per task); else it is loaded here, once."""
    capabilities = getattr(backend, "capabilities", Capabilities())  # doubles may lack it
    if request.objective == "energy" and not capabilities.measures_energy:
        raise InvalidRequestError(
            "objective", f"the {backend.name} backend cannot measure energy; use 'time'"
        )
    started = time.monotonic()
    device = backend.device()
    space = space if space is not None else load_space(request.op, backend.name)
    discovered = backend.discover(request, device.arch)
    candidates, pruned = candidate_params(
        request, device.arch, backend.name, discovered, space=space
    )
    if not candidates:
        reasons = sorted({reason for _, reason in pruned})[:3]
        raise NoVariantsError(f"every variant was pruned for {request.problem.key()}: {reasons}")
    # the vendor's default (a backend discovers it first): timed whole, confirmed side by side
    # with the near-fastest, and preferred in a tie (tuner.winner rule 3)
    vendor_default = (
        space.name(discovered[0], request.dtype, request.layout)
        if discovered and discovered[0] in candidates
        else None
    )
    protected = {*request.incumbents, *([vendor_default] if vendor_default else [])}
    budget = request.budget
    cap = budget.max_variants or space.default_max_variants or len(candidates)
    total = min(len(candidates), cap)
    # a cut space without a problem-aware order: the strategy samples it (never the first N)
    sample = total if total < len(candidates) and not has_problem_order(space) else None
    strategy = load_strategy_class(request.strategy)(candidates, seed=request.seed, budget=sample)
    deadline = started + budget.max_seconds if budget.max_seconds else math.inf
    workers = config.compile_workers or os.cpu_count() or 1
    if observer:
        observer.on_start(total, len(pruned))
    log.info(
        "tuning %s %s: %d candidates, %d pruned",
        request.op,
        request.problem.key(),
        total,
        len(pruned),
    )

    runner = BatchRunner(backend, space, request, device)
    # what "clearly slower than the best so far" means to this backend's early stop
    slower = 1.0 + config.tie_band if capabilities.ci_early_stop else config.abort_slower_than
    results: list[BenchResult] = []
    best_us: float | None = None
    asked = 0
    # a slow variant may still draw the least energy: stop early on time only
    timed = request.objective == "time"

    def out_of_budget() -> bool:
        return time.monotonic() >= deadline or bool(should_stop and should_stop())

    def ask(size: int) -> list[tuple[int, Variant]]:
        nonlocal asked
        # the vendor default alone first: it builds in seconds, so it is timed whatever the
        # budget (what the user calls anyway), and first on the CPU
        size = 1 if asked == 0 and vendor_default else size
        indices = strategy.ask(min(size, total - asked)) if asked < total else []
        asked += len(indices)
        variants = runner.render([candidates[i] for i in indices])
        return list(zip(indices, variants, strict=True))

    if capabilities.compile_overlaps_measure:  # time what is built while the rest compiles
        remaining = lambda: deadline - time.monotonic()  # noqa: E731
        feed: StreamFeed | BatchFeed = StreamFeed(
            ask, runner.build, workers, out_of_budget, remaining, lead_first=bool(vendor_default)
        )
    else:  # compiles would disturb the timing: build a batch, then time it
        size = workers if strategy.adaptive else max(workers, LARGE_BATCH)
        feed = BatchFeed(ask, runner.build, size, out_of_budget)
    try:
        while not out_of_budget() and (ready := feed.next()) is not None:
            index, variant, built = ready
            # the incumbent and the vendor default are never stopped early: a drifting
            # moment must not unseat them
            stop_early = timed and variant.name not in protected
            abort = best_us * slower if best_us and stop_early else None
            result = runner.measure(variant, built, abort)
            if variant.name == vendor_default:
                result = replace(
                    result, provenance={**result.provenance, winner.VENDOR_DEFAULT_KEY: True}
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
    finally:
        feed.close()
    # the budgeted candidates a spent budget (or a cancel) left unmeasured: the answer says so
    unmeasured = max(0, total - len(results)) if out_of_budget() else 0
    if unmeasured:
        log.info("budget spent with %d of %d candidates unmeasured", unmeasured, total)

    # both re-time finished candidates: a spent budget or a cancel skips them (then a suspect
    # contender stays flagged in its provenance)
    if not out_of_budget():
        results = settle_suspects(results, runner.remeasure, config)
    if not out_of_budget():
        results = confirm_contenders(
            results, runner.remeasure, config, protected, new_window=runner.new_window
        )
    decision = decide_winner(results, config.tie_band, request.objective, request.incumbents)
    return ProblemResult(
        request=request,
        device=device,
        toolchain=backend.toolchain(space),
        results=results,
        winner=decision.winner,
        seconds=time.monotonic() - started,
        tie_set=tuple(r.variant_name for r in decision.tie_set),
        unmeasured=unmeasured,
    )
