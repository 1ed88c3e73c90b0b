"""The tuning loop: enumerate, prune, ask the strategy, build, run, pick the winner.

    result = tune(request, backend, config, observer)

Two parts: a :class:`BatchRunner` builds, verifies and times the candidates of one batch (and
re-measures one), and :func:`tune` is the loop that asks the strategy for batches, enforces
the budgets (``max_variants``, ``max_seconds``), settles suspect contenders, times the
near-ties again side by side (:func:`confirm_contenders`) and picks the winner with
:mod:`tuner.winner`. A variant's failure is a :class:`BenchResult` with a failing
outcome; only exceptions from :mod:`tuner.errors` (or a bug) leave this module.

Compiling and measuring overlap only where they do not share the measured resource: a
backend with ``compile_overlaps_measure`` (a GPU, measured while its host's CPUs compile) gets
the next batch built while the current one is timed; the CPU backend never compiles while it
times.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Protocol

from tuner import winner
from tuner.backends.base import Backend
from tuner.capabilities import Capabilities
from tuner.errors import InvalidRequestError, NoVariantsError
from tuner.registry import load_space, load_strategy_class
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

__all__ = ["TuneObserver", "BatchRunner", "tune", "pick_winner", "candidate_params"]

log = logging.getLogger(__name__)

#: a non-adaptive strategy is asked this many candidates at once (one compile batch each)
LARGE_BATCH = 64
#: pause before the n-th re-measurement of suspect contenders, times n (interference passes)
REMEASURE_PAUSE_S = 0.05


class TuneObserver(Protocol):
    """Progress hooks; the CLI draws a bar from them, the worker heartbeats with them."""

    def on_start(self, total: int, pruned: int) -> None: ...

    def on_result(self, result: BenchResult, done: int, total: int) -> None: ...


def candidate_params(
    request: TuneRequest, arch: str, backend_name: str, discovered: Sequence[Params] = ()
) -> tuple[list[Params], list[tuple[Params, str]]]:
    """The space for the request split into (runnable candidates, [(pruned, reason)]);
    ``discovered``: params the backend found on the device for this problem (vendor
    algorithms), pruned and ordered with the rest."""
    space = load_space(request.op, backend_name)
    kept: list[Params] = []
    pruned: list[tuple[Params, str]] = []
    enumerated = space.enumerate(request.dtype, request.layout, arch)
    for params in [*discovered, *(p for p in enumerated if p not in discovered)]:
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


def pick_winner(
    results: Sequence[BenchResult], tie_band: float, objective: Objective = "time"
) -> BenchResult | None:
    """The engine's side of :mod:`tuner.winner`: the verified winner of ``results``, by median
    time or, under objective ``energy``, by joules per launch (among results that carry one)."""
    if objective == "energy":
        return winner.pick(
            [r for r in results if r.timing is not None],
            median=lambda r: r.energy_j,
            name=lambda r: r.variant_name,
            ok=lambda r: r.ok,
            tie_band=tie_band,
        )
    return winner.pick(
        results,
        median=lambda r: r.timing.median_us if r.timing else None,
        name=lambda r: r.variant_name,
        ok=lambda r: r.ok,
        tie_band=tie_band,
        vendor_default=lambda r: winner.is_vendor_default(r.provenance),
    )


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


def _optimistic_us(result: BenchResult) -> float | None:
    """The fastest a suspect run might really be: its p20, the least disturbed fifth of its
    samples (interference only adds time); a clean run's median."""
    if result.timing is None:
        return None
    return result.timing.p20_us if result.suspect else result.timing.median_us


def _merge(old: BenchResult, new: BenchResult, tries: int) -> BenchResult:
    """The result to keep after a re-measurement of a suspect one."""
    note: dict[str, Any] = {
        "remeasured": tries,
        "first_median_us": old.timing.median_us if old.timing else None,
    }
    if not new.ok or new.timing is None:
        if new.outcome in (Outcome.RUNTIME_ERROR, Outcome.TIMEOUT, Outcome.WRONG_RESULT):
            return replace(new, provenance={**new.provenance, **note})  # flaky: say so
        return replace(old, provenance={**old.provenance, **note})
    if not new.suspect or old.timing is None or old.outcome is not Outcome.OK:
        return replace(new, provenance={**new.provenance, **note})
    # both disturbed: interference only slows a run down, so the faster one is nearer the truth
    keep = new if new.timing.median_us <= old.timing.median_us else old
    return replace(keep, provenance={**keep.provenance, **note})


def settle_suspects(
    results: list[BenchResult],
    remeasure: Callable[[BenchResult], BenchResult],
    config: EngineConfig,
    sleep: Callable[[float], None] = time.sleep,
) -> list[BenchResult]:
    """Re-measure every suspect result that could win or tie (tuner.winner.needs_remeasure),
    up to ``config.remeasure_tries`` times each, and return the results with them replaced."""
    results = list(results)
    position = {r.variant_id: i for i, r in enumerate(results)}
    for attempt in range(1, config.remeasure_tries + 1):
        contenders = winner.needs_remeasure(
            results,
            median=lambda r: r.timing.median_us if r.timing else None,
            bound=_optimistic_us,
            ok=lambda r: r.timing is not None and r.outcome in (Outcome.OK, Outcome.ABORTED_SLOW),
            suspect=lambda r: r.suspect,
            tie_band=config.tie_band,
        )
        if not contenders:
            break
        log.info("re-measuring %d suspect contenders (try %d)", len(contenders), attempt)
        sleep(REMEASURE_PAUSE_S * attempt)
        for old in contenders:
            results[position[old.variant_id]] = _merge(old, remeasure(old), attempt)
    return results


def confirm_contenders(
    results: list[BenchResult],
    remeasure: Callable[[BenchResult], BenchResult],
    config: EngineConfig,
    anchors: Collection[str] = (),
) -> list[BenchResult]:
    """Time the near-fastest results again, interleaved (A B C, B C A, C A B), and keep for
    each the round whose median is the median of its rounds. The ``anchors`` (variant names
    of the stored winner and of the vendor's default) join the rounds wherever they ranked,
    when timed, so the winner is compared with them side by side.

    A machine whose speed drifts (other tenants, memory bandwidth shared with other cores)
    makes medians taken seconds apart disagree by more than the tie band; timed side by side,
    true ties fall inside the band and the name breaks them, so re-tuning does not flip."""
    verified = [r for r in results if r.ok and r.timing is not None]
    if config.confirm_rounds < 1 or not verified:
        return results
    best = min(r.timing.median_us for r in verified if r.timing)
    # an early stop judged against the best of one moment: its partial median may be drift
    timed = [r for r in results if r.timing and r.outcome in (Outcome.OK, Outcome.ABORTED_SLOW)]
    near = sorted(
        (r for r in timed if r.timing and r.timing.median_us <= best * (1 + config.confirm_band)),
        key=lambda r: r.timing.median_us if r.timing else 0.0,
    )[: config.confirm_max]
    chosen = {r.variant_id for r in near}
    near += [r for r in timed if r.variant_name in anchors and r.variant_id not in chosen]
    if len(near) < 2:
        return results
    log.info("confirming %d near-ties in %d interleaved rounds", len(near), config.confirm_rounds)
    rounds: dict[str, list[BenchResult]] = {r.variant_id: [] for r in near}
    for index in range(config.confirm_rounds):
        shift = index % len(near)
        for old in near[shift:] + near[:shift]:
            rounds[old.variant_id].append(remeasure(old))
    position = {r.variant_id: i for i, r in enumerate(results)}
    results = list(results)
    for old in near:
        timed = [r for r in rounds[old.variant_id] if r.ok and r.timing is not None]
        if len(timed) < len(rounds[old.variant_id]):  # failed when timed again: say so
            failed = next(r for r in rounds[old.variant_id] if not r.ok)
            results[position[old.variant_id]] = replace(
                failed, provenance={**failed.provenance, "confirm_failed_after_ok": True}
            )
            continue
        timed.sort(key=lambda r: r.timing.median_us if r.timing else 0.0)
        middle = timed[(len(timed) - 1) // 2]
        note = {
            winner.ROUNDS_KEY: [r.timing.median_us for r in rounds[old.variant_id] if r.timing],
            winner.FIRST_PASS_KEY: old.timing.median_us if old.timing else None,
        }
        results[position[old.variant_id]] = replace(
            middle,
            compile_seconds=old.compile_seconds,
            provenance={**old.provenance, **middle.provenance, **note},
            suspect=middle.suspect,
        )
    return results


def tune(
    request: TuneRequest,
    backend: Backend,
    config: EngineConfig,
    observer: TuneObserver | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ProblemResult:
    """Tune one problem on the backend's device and return every candidate's result."""
    capabilities = getattr(backend, "capabilities", Capabilities())  # doubles may lack it
    if request.objective == "energy" and not capabilities.measures_energy:
        raise InvalidRequestError(
            "objective", f"the {backend.name} backend cannot measure energy; use 'time'"
        )
    started = time.monotonic()
    device = backend.device()
    space = load_space(request.op, backend.name)
    discovered = backend.discover(request, device.arch)
    candidates, pruned = candidate_params(request, device.arch, backend.name, discovered)
    if not candidates:
        reasons = sorted({reason for _, reason in pruned})[:3]
        raise NoVariantsError(f"every variant was pruned for {request.problem.key()}: {reasons}")
    # the vendor's default (a backend discovers it first): timed whole, confirmed side by side
    # with the near-fastest, and preferred in a tie (tuner.winner rule 2)
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
    overlap = capabilities.compile_overlaps_measure
    # small batches where the strategy learns from each or compiles pipeline with timing
    batch_size = workers if strategy.adaptive or overlap else max(workers, LARGE_BATCH)
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
    ci_stop = capabilities.ci_early_stop
    slower = 1.0 + config.tie_band if ci_stop else config.abort_slower_than
    results: list[BenchResult] = []
    best_us: float | None = None
    asked = 0
    # a slow variant may still draw the least energy: stop early on time only
    timed = request.objective == "time"

    def out_of_budget() -> bool:
        return time.monotonic() >= deadline or bool(should_stop and should_stop())

    def next_batch() -> tuple[list[int], list[Variant]]:
        nonlocal asked
        # the vendor default alone first: it builds in seconds, so a time budget that long
        # compiles (CUTLASS: ~40 s each) would exhaust still holds what the user calls anyway
        size = 1 if asked == 0 and vendor_default else batch_size
        indices = strategy.ask(min(size, total - asked)) if asked < total else []
        asked += len(indices)
        return indices, runner.render([candidates[i] for i in indices])

    pool = ThreadPoolExecutor(max_workers=1) if overlap else None
    try:
        batch, variants = next_batch()
        builds = runner.build(variants) if batch else {}
        while batch and not out_of_budget():
            upcoming: Future[dict[str, CompileResult]] | None = None
            if pool is not None:  # the host compiles the next batch while the device times
                following = next_batch()
                if following[0]:
                    upcoming = pool.submit(runner.build, following[1])
            for index, variant in zip(batch, variants, strict=True):
                if out_of_budget():
                    break
                # the incumbent and the vendor default are never stopped early: a drifting
                # moment must not unseat them
                stop_early = timed and variant.name not in protected
                abort = best_us * slower if best_us and stop_early else None
                result = runner.measure(variant, builds[variant.id], abort)
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
            if pool is not None:
                batch, variants = following if upcoming is not None else ([], [])
                builds = upcoming.result() if upcoming is not None else {}
            else:
                batch, variants = next_batch()
                builds = runner.build(variants) if batch and not out_of_budget() else {}
    finally:
        if pool is not None:
            pool.shutdown(wait=True)

    # both re-time finished candidates: a spent budget or a cancel skips them (then a suspect
    # contender stays flagged in its provenance)
    if not out_of_budget():
        results = settle_suspects(results, runner.remeasure, config)
    if not out_of_budget():
        results = confirm_contenders(results, runner.remeasure, config, protected)
    return ProblemResult(
        request=request,
        device=device,
        toolchain=backend.toolchain(space),
        results=results,
        winner=pick_winner(results, config.tie_band, request.objective),
        seconds=time.monotonic() - started,
    )
