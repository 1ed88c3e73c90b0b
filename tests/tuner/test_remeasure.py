"""Suspect measurements are re-measured once quiet; a slower clean one never out-ranks them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.tuner.cpu_helpers import quick_config
from tuner.backends.base import Backend
from tuner.engine import tune
from tuner.problems import ReduceProblem
from tuner.spaces.base import VariantSpace
from tuner.types import (
    BenchResult,
    Budget,
    CompileResult,
    DeviceInfo,
    EngineConfig,
    Outcome,
    Timing,
    Toolchain,
    Trial,
    TuneRequest,
    Variant,
)


@dataclass
class Script:
    """Per variant name: the (median us, suspect) of each successive run."""

    runs: dict[str, list[tuple[float, bool]]]
    calls: dict[str, int] = field(default_factory=dict)


class ScriptedBackend(Backend):
    """Real space and engine; builds and runs replaced by a script of medians."""

    name = "cpu"  # the CPU's capabilities (tuner.capabilities): an early stop by interval

    def __init__(self, config: EngineConfig, script: Script, default_us: float = 50.0) -> None:
        super().__init__(config)
        self.script = script
        self.default_us = default_us

    def device(self) -> DeviceInfo:
        return DeviceInfo("cpu", "Scripted CPU", "x86_64-avx2", 2)

    def toolchain(self, space: VariantSpace) -> Toolchain:
        return Toolchain("g++ 0", "tpl")

    def base_flags(self, arch: str) -> tuple[str, ...]:
        return ()

    def compiler_identity(self) -> str:
        return "scripted"

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        return {v.id: CompileResult(v.id, True, "artifact", 0.0, True) for v in variants}

    def measure(self, trial: Trial) -> BenchResult:
        variant, abort_above_us = trial.variant, trial.abort_above_us
        n = self.script.calls.get(variant.name, 0)
        self.script.calls[variant.name] = n + 1
        runs = self.script.runs.get(variant.name, [(self.default_us, False)])
        median, suspect = runs[min(n, len(runs) - 1)]
        share = 0.5 if suspect else 1.0
        slower = abort_above_us is not None and median > abort_above_us
        return BenchResult(
            variant.id,
            variant.name,
            variant.params,
            Outcome.ABORTED_SLOW if slower else Outcome.OK,
            Timing(median, median * share, median, median * share, 20),
            provenance={"cpu_share": share},
            suspect=suspect,
        )


REQUEST = TuneRequest(
    "reduce", "f32", "row", ReduceProblem(m=64, k=4096), budget=Budget(max_variants=6)
)


def _config(tmp_path: Path) -> EngineConfig:
    return quick_config(tmp_path, remeasure_tries=3)


def _names(tmp_path: Path) -> list[str]:
    backend = ScriptedBackend(_config(tmp_path), Script({}))
    return [r.variant_name for r in tune(REQUEST, backend, backend.config).results]


def test_a_suspect_fastest_is_remeasured_and_not_outranked(tmp_path: Path) -> None:
    fast, slow = _names(tmp_path)[:2]
    # fast: 10 us under interference first, 10.2 us clean on the re-run; slow: 14.4 us clean
    script = Script({fast: [(10.0, True), (10.2, False)], slow: [(14.4, False)]})
    backend = ScriptedBackend(_config(tmp_path), script)
    result = tune(REQUEST, backend, backend.config)
    assert script.calls[fast] == 2 and script.calls[slow] == 1
    assert result.winner is not None and result.winner.variant_name == fast
    assert not result.winner.suspect
    assert result.winner.provenance["remeasured"] == 1
    assert result.winner.provenance["first_median_us"] == 10.0


def test_a_slowed_down_contender_is_remeasured_too(tmp_path: Path) -> None:
    fast, slow = _names(tmp_path)[:2]
    # the truly fastest was measured at 16 us with half the core, its p20 at 8 us: it is
    # re-measured (and wins) although its first median lost to a clean 12 us
    script = Script({fast: [(16.0, True), (8.0, False)], slow: [(12.0, False)]})
    backend = ScriptedBackend(_config(tmp_path), script)
    result = tune(REQUEST, backend, backend.config)
    assert script.calls[fast] == 2
    assert result.winner is not None and result.winner.variant_name == fast


def test_never_quiet_keeps_the_best_try_flagged(tmp_path: Path) -> None:
    fast = _names(tmp_path)[0]
    script = Script({fast: [(11.0, True), (10.0, True), (12.0, True), (10.5, True)]})
    backend = ScriptedBackend(_config(tmp_path), script)
    result = tune(REQUEST, backend, backend.config)
    assert script.calls[fast] == 4  # the first run and three re-measurements
    assert result.winner is not None and result.winner.variant_name == fast
    assert result.winner.suspect and result.winner.timing is not None
    assert result.winner.timing.median_us == 10.0


def test_clean_or_clearly_slower_suspects_are_not_remeasured(tmp_path: Path) -> None:
    names = _names(tmp_path)
    script = Script({names[0]: [(10.0, False)], names[1]: [(30.0, True)]})
    backend = ScriptedBackend(_config(tmp_path), script)
    tune(REQUEST, backend, backend.config)
    assert all(count == 1 for count in script.calls.values())


def test_near_ties_are_confirmed_side_by_side(tmp_path: Path) -> None:
    first, second = sorted(_names(tmp_path)[:2])
    # the machine drifted: `second` looked 4% faster in the first pass, but timed side by
    # side the two are within the tie band, so the name decides, as in every re-tuning
    script = Script(
        {first: [(10.4, False), (10.0, False)], second: [(10.0, False), (10.05, False)]}
    )
    backend = ScriptedBackend(_config(tmp_path), script)
    result = tune(REQUEST, backend, backend.config)
    rounds = backend.config.confirm_rounds
    assert script.calls[first] == 1 + rounds and script.calls[second] == 1 + rounds
    assert result.winner is not None and result.winner.variant_name == first
    assert result.winner.provenance["confirm_medians_us"] == [10.0] * rounds
    assert result.winner.provenance["first_pass_median_us"] == 10.4
    # without the confirmation the drift would have decided
    plain = ScriptedBackend(quick_config(tmp_path, confirm_rounds=0), Script(dict(script.runs)))
    assert tune(REQUEST, plain, plain.config).winner.variant_name == second  # type: ignore[union-attr]


def test_a_candidate_stopped_early_by_drift_is_confirmed_too(tmp_path: Path) -> None:
    early, late = _names(tmp_path)[:2]
    # `late` is timed while the machine is slower: 6% above the best, stopped early; side by
    # side it ties with `early`, so it is verified again and the name decides
    script = Script({early: [(10.0, False)], late: [(10.6, False), (10.05, False)]})
    backend = ScriptedBackend(_config(tmp_path), script)
    result = tune(REQUEST, backend, backend.config)
    again = next(r for r in result.results if r.variant_name == late)
    assert again.outcome is Outcome.OK and again.timing is not None
    assert again.timing.median_us == 10.05
    assert result.winner is not None and result.winner.variant_name == min(early, late)


def test_the_incumbent_is_timed_whole_and_confirmed_beside_the_winner(tmp_path: Path) -> None:
    """A stored winner named in the request is never stopped early and joins the confirmation
    rounds even when its first pass looked 30% slower (a drifting moment), so the store can
    judge it side by side; faster beyond the band in no round, it keeps its place."""
    from dataclasses import replace as with_field

    from tuner.winner import FIRST_PASS_KEY, ROUNDS_KEY, replaces_incumbent, rounds_of

    names = _names(tmp_path)
    best, incumbent = names[0], names[3]
    script = Script(
        {best: [(10.0, False), (10.0, False)], incumbent: [(13.0, False), (10.1, False)]}
    )
    backend = ScriptedBackend(_config(tmp_path), script)
    request = with_field(REQUEST, incumbents=(incumbent,))
    result = tune(request, backend, backend.config)
    timed = {r.variant_name: r for r in result.results}
    assert timed[incumbent].outcome is Outcome.OK  # not aborted as slower
    assert script.calls[incumbent] == 1 + backend.config.confirm_rounds
    assert timed[incumbent].provenance[ROUNDS_KEY] == [10.1] * backend.config.confirm_rounds
    # the first pass chose the contenders: it is kept, but the rule reads only the rounds
    assert timed[incumbent].provenance[FIRST_PASS_KEY] == 13.0
    assert rounds_of(timed[incumbent].provenance) == [10.1] * backend.config.confirm_rounds
    winner = result.winner
    assert winner is not None and winner.timing is not None
    assert not replaces_incumbent(
        13.0,
        winner.timing.median_us,
        incumbent_rounds=rounds_of(timed[incumbent].provenance),
        candidate_rounds=rounds_of(winner.provenance),
    )
    # without the request naming it, the 30% slower first pass stops it early
    plain = ScriptedBackend(_config(tmp_path), Script(dict(script.runs)))
    alone = {r.variant_name: r for r in tune(REQUEST, plain, plain.config).results}
    assert alone[incumbent].outcome is Outcome.ABORTED_SLOW


class VendorDefaultBackend(ScriptedBackend):
    """The scripted backend whose discovery names one of the space's params first, as a
    vendor library's heuristic names its default."""

    def __init__(self, config: EngineConfig, script: Script, default: dict) -> None:
        super().__init__(config, script)
        self.default = default
        self.batches: list[list[str]] = []

    def discover(self, request: TuneRequest, arch: str) -> list[dict]:
        return [self.default]

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        self.batches.append([v.name for v in variants])
        return super().build(variants)


def test_the_vendor_default_is_timed_whole_and_wins_a_tie(tmp_path: Path) -> None:
    """The vendor's default is never stopped early, joins the confirmation rounds and wins
    every tie (rule 2 of tuner.winner); a candidate faster beyond the band still wins."""
    from dataclasses import replace as with_field

    from tuner.winner import ROUNDS_KEY, is_vendor_default

    whole = with_field(REQUEST, budget=Budget())  # every candidate: the rival is measured
    plain = ScriptedBackend(_config(tmp_path), Script({}))
    listed = tune(whole, plain, plain.config).results
    default = listed[3]
    rival = listed[0].variant_name
    # first pass: the default looks 30% slower (a drifting moment), then ties within 1%
    script = Script({rival: [(10.0, False)], default.variant_name: [(13.0, False), (10.1, False)]})
    backend = VendorDefaultBackend(_config(tmp_path), script, dict(default.params))
    result = tune(whole, backend, backend.config)
    timed = {r.variant_name: r for r in result.results}
    assert result.results[0].variant_name == default.variant_name  # discovered: first
    assert backend.batches[0] == [default.variant_name]  # built and timed alone, first
    assert len(result.results) == len(timed)  # the enumerated duplicate is dropped
    assert timed[default.variant_name].outcome is Outcome.OK  # not aborted as slower
    assert ROUNDS_KEY in timed[default.variant_name].provenance
    assert result.winner is not None and result.winner.variant_name == default.variant_name
    assert is_vendor_default(result.winner.provenance)
    # 10% faster in every round: the tuned kernel wins
    faster = Script({rival: [(9.0, False)], default.variant_name: [(10.0, False)]})
    backend = VendorDefaultBackend(_config(tmp_path), faster, dict(default.params))
    won = tune(whole, backend, backend.config).winner
    assert won is not None and won.variant_name == rival
    # a cut budget samples the space but always measures the vendor default first
    sampled = tune(REQUEST, backend, backend.config).results
    assert sampled[0].variant_name == default.variant_name


class WindowedBackend(ScriptedBackend):
    """Two variants whose ranking is a property of the window (on the CPU, the runner
    process and where it placed the buffers): 7% apart, the faster one swapping from one
    window to the next, steady within a window; every other variant far slower."""

    def __init__(self, config: EngineConfig, pair: tuple[str, str], first_window: int) -> None:
        super().__init__(config, Script({}), default_us=1000.0)
        self.pair = pair
        self.window = first_window
        self.windows_opened = 0

    def new_window(self, request: TuneRequest) -> None:
        self.window += 1
        self.windows_opened += 1

    def run(
        self,
        variant: Variant,
        artifact: str,
        request: TuneRequest,
        abort_above_us: float | None = None,
    ) -> BenchResult:
        if variant.name in self.pair:
            ahead = self.pair[self.window % 2]
            median = 100.0 if variant.name == ahead else 107.0
            self.script.runs[variant.name] = [(median, False)]
        return super().run(variant, artifact, request, abort_above_us)


def test_rounds_sample_independent_windows_so_a_window_effect_is_a_tie(tmp_path: Path) -> None:
    """Two tunes that each start in a window ranking the pair the other way (as the CPU's
    runner placement did to reduce m=4096,k=128 and gemm m=64,n=2048,k=1024): confirmation
    rounds inside the first-pass window were confidently sure of opposite winners; rounds in
    windows of their own see the ranking change and answer a tie both times."""
    from dataclasses import replace as with_field

    names = _names(tmp_path)
    pair = (names[0], names[1])
    config = _config(tmp_path)
    first = WindowedBackend(config, pair, first_window=0)
    one = tune(REQUEST, first, config)
    assert one.winner is not None
    second = WindowedBackend(config, pair, first_window=1)
    two = tune(with_field(REQUEST, incumbents=(one.winner.variant_name,)), second, config)
    assert two.winner is not None
    assert set(pair) <= set(one.tie_set) and set(pair) <= set(two.tie_set)
    assert two.winner.variant_name == one.winner.variant_name
    assert first.windows_opened == config.confirm_rounds  # a window for every round


class PreemptedBackend(ScriptedBackend):
    """A suspect run preempted through every sample: its p20 is 3% under its median, its
    share of a core 0.65 (the median is 1 / 0.65 of its time alone)."""

    def run(
        self,
        variant: Variant,
        artifact: str,
        request: TuneRequest,
        abort_above_us: float | None = None,
    ) -> BenchResult:
        result = super().run(variant, artifact, request, abort_above_us)
        if not result.suspect or result.timing is None:
            return result
        timing = replace(result.timing, p20_us=result.timing.median_us * 0.97)
        return replace(result, timing=timing, provenance={"cpu_share": 0.65})


def test_a_contender_preempted_in_every_sample_is_remeasured(tmp_path: Path) -> None:
    fast, other = _names(tmp_path)[:2]
    # `fast` measured 26.1 us at 0.65 of a core (17 us alone), p20 25.3: a bound of its p20
    # alone left it out and `other` won at 20.5
    script = Script({fast: [(26.1, True), (17.2, False)], other: [(20.5, False)]})
    backend = PreemptedBackend(_config(tmp_path), script)
    result = tune(REQUEST, backend, backend.config)
    assert script.calls[fast] > 1
    assert result.winner is not None and result.winner.variant_name == fast
