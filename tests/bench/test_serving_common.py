"""bench/serving_common.py's record of where each cuBLASLt candidate came from: the discovery
answer's ``source`` per algorithm (its first), attached to the candidates that are cuBLASLt's,
and counted per source."""

from __future__ import annotations

from bench.serving_common import candidate_rows, discovery_sources
from tuner.types import BenchResult, Outcome, Timing

ATTRS = {"tile": 10, "stages": 36, "splitk": 1, "reduction": 0, "swizzle": 0, "custom": 0,
         "inner_shape": 0, "cluster_shape": 4}  # fmt: skip


def _result(name: str, params: dict) -> BenchResult:
    timing = Timing(median_us=8.0, p20_us=7.9, p80_us=8.1, min_us=7.8, reps=10)
    return BenchResult("id-" + name, name, params, Outcome.OK, timing=timing)


def test_sources_keep_the_first_of_each_algorithm_and_default_to_heuristic() -> None:
    answer = [
        {"algo": 66, **ATTRS},  # an older answer item without a source is the heuristic's
        {"algo": 66, **ATTRS, "splitk": 2, "reduction": 2, "source": "enumerated"},
        {"algo": 66, **ATTRS, "source": "enumerated"},  # repeats the first: stays heuristic
    ]
    sources = discovery_sources(answer)
    assert list(sources.values()) == ["heuristic", "enumerated"]


def test_candidates_name_their_source_and_others_do_not() -> None:
    answer = [
        {"algo": 66, **ATTRS, "source": "heuristic"},
        {"algo": 66, **ATTRS, "tile": 13, "source": "enumerated"},
    ]
    results = [
        _result("lt_pick", {"family": "cublaslt_fp8", "algo": 66, **ATTRS, "fast_accum": 1}),
        _result("lt_extra", {"family": "cublaslt_fp8", "algo": 66, **ATTRS, "tile": 13}),
        _result("lt_unknown", {"family": "cublaslt_fp8", "algo": 7, **ATTRS}),
        _result("swapab", {"family": "swapab_fp8", "m_tiles": 1}),
    ]
    rows = candidate_rows(results, answer)
    assert [row.get("source") for row in rows] == ["heuristic", "enumerated", None, None]
    assert [row["name"] for row in rows] == ["lt_pick", "lt_extra", "lt_unknown", "swapab"]
    assert candidate_rows(results, []) == [
        {k: v for k, v in row.items() if k != "source"} for row in rows
    ]
