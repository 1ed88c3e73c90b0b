"""Timing finished candidates again: suspects once the device is quiet, near-ties side by side.

    results = settle_suspects(results, runner.remeasure, config)
    results = confirm_contenders(results, runner.remeasure, config, anchors,
                                 new_window=runner.new_window)

:func:`settle_suspects` re-measures every suspect result that could win or tie
(:func:`tuner.winner.needs_remeasure`); :func:`confirm_contenders` times the near-fastest
again in interleaved rounds, each round in a measurement window of its own, and records each
contender's round medians, in round order, under :data:`tuner.winner.ROUNDS_KEY`: the
confidence intervals of :mod:`tuner.winner` are taken from them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

from tuner import winner
from tuner.types import BenchResult, EngineConfig, Outcome

__all__ = ["REMEASURE_PAUSE_S", "settle_suspects", "confirm_contenders"]

log = logging.getLogger(__name__)

#: pause before the n-th re-measurement of suspect contenders, times n (interference passes)
REMEASURE_PAUSE_S = 0.05


def _optimistic_us(result: BenchResult) -> float | None:
    """The fastest a suspect run might really be: its p20, the least disturbed fifth of its
    samples (interference only adds time), or, where it records the share of a core it got
    (``winner.CPU_SHARE_KEY``), its median times that share, whichever is lower: a run
    preempted through every sample has no undisturbed fifth (one at 0.65 of a core measured
    2609 us a call, p20 included, where it takes 1720 us alone). A clean run's median."""
    if result.timing is None:
        return None
    if not result.suspect:
        return result.timing.median_us
    share = winner.cpu_share_of(result.provenance)
    if share is None or share <= 0:
        return result.timing.p20_us
    return min(result.timing.p20_us, result.timing.median_us * min(share, 1.0))


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
    *,
    new_window: Callable[[], None] = lambda: None,
) -> list[BenchResult]:
    """Time the near-fastest results again in ``config.confirm_rounds`` interleaved rounds
    (A B C, B C A, C A B, ...), each after ``new_window()`` (a window of its own), and keep
    for each the round whose median is the median of its rounds, with every round's median
    (in round order) under ``winner.ROUNDS_KEY`` and its first-pass median under
    ``winner.FIRST_PASS_KEY``. The ``anchors`` (variant names of
    the stored winner and of the vendor's default) join the rounds wherever they ranked, when
    timed, so the winner is compared with them side by side.

    A machine whose speed drifts (a GPU at its power cap, other tenants, memory bandwidth
    shared with other cores) makes medians taken seconds apart disagree by more than any
    fixed band. Timed in the same rounds, two contenders' ratio round by round cancels the
    drift of the window, and the spread of the ratios over the rounds is the uncertainty
    that tuner.winner turns into the tie set; the first pass, which chose the contenders,
    is kept out of it (the fastest of many noisy first passes is biased low).

    What all runs of one window share does not divide out, though: on the CPU the runner
    process places the inputs once, and that placement (which physical pages) can move two
    variants' ratio: 8-12% in one runner of three and of five, the same through 40 rounds
    within each (docs/benchmarks/retune-stability-cpu.md). Rounds inside one window can be
    confidently sure of a ranking the next tune's window reverses. So every round starts a
    window of its own (``new_window``): the ratios' spread then includes the between-window
    variation, and variants that windows rank differently land in the tie set."""
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
        new_window()
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
