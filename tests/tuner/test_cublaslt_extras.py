"""cuBLASLt algorithms beyond the heuristic: which of the enumerated ones a tuning job keeps, in
what order, and how they join the heuristic's (pure Python: no nvcc, no GPU)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tuner.engine import candidate_params
from tuner.problems import GemmProblem
from tuner.spaces import _cublaslt_extras as extras
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces.cuda_gemm import CudaGemmSpace
from tuner.types import TuneRequest

PICK = {"algo": 66, "tile": 24, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 0,
        "custom": 7, "inner_shape": 0, "cluster_shape": 5, "workspace": 0, "waves": 1.9394,
        "exact": True, "source": "heuristic"}  # fmt: skip


def _item(source: str = "enumerated", **change) -> dict:
    return {**PICK, "source": source, **change}


def test_wave_fill_is_the_share_of_the_last_wave_in_use() -> None:
    assert extras.wave_fill(2.0) == 1.0
    assert extras.wave_fill(0.5) == 0.5
    assert extras.wave_fill(1.1) == pytest.approx(0.55)
    assert extras.wave_fill(2.9) > extras.wave_fill(2.1)
    for unknown in (0, 0.0, -1.0, float("nan"), float("inf"), None, "2", True):
        assert extras.wave_fill(unknown) == 0.0


def test_kinship_tiers() -> None:
    second = {**PICK, "tile": 23, "cluster_shape": 3}
    picks = [PICK, second]
    assert extras.kinship(_item(splitk=2, reduction=2), picks) == (0, 0)
    assert extras.kinship(_item(tile=23, cluster_shape=3, custom=1), picks) == (0, 1)
    assert extras.kinship(_item(tile=23, cluster_shape=0), picks) == (1, 1)
    assert extras.kinship(_item(tile=209), picks) == (2, 0)
    assert extras.kinship(_item(algo=31, tile=24), picks) == (3, 31)


def _kind(item: Mapping[str, Any]) -> str:
    tier, _ = extras.kinship(item, [PICK])
    return "variation" if tier == 0 else "same algorithm" if tier < 3 else "other algorithm"


def test_the_cap_and_the_shares_hold() -> None:
    variations = [_item(custom=c, waves=1.0) for c in range(7)] + [
        _item(splitk=s, reduction=2, waves=1.0) for s in (2, 4, 8)
    ]
    same_algo = [_item(tile=t, waves=1.0) for t in (18, 20, 22)]
    others = [_item(algo=a, tile=t, waves=1.0) for a in (6, 21, 31) for t in (18, 20, 22)]
    ranked = extras.rank_extras([PICK], variations + same_algo + others, cap=6, shares=(4, 1, 1))
    # interleaved in the ratio of the shares, a variation first
    assert [_kind(r) for r in ranked] == [
        "variation",
        "same algorithm",
        "other algorithm",
        "variation",
        "variation",
        "variation",
    ]
    assert extras.rank_extras([PICK], variations, cap=0) == []
    pool = variations + same_algo + others
    assert len(pool) < extras.EXTRA_ALGOS and len(extras.rank_extras([PICK], pool)) == len(pool)


def test_a_short_stream_leaves_its_places_to_the_others() -> None:
    variations = [_item(custom=c) for c in range(7)]
    others = [_item(algo=6, tile=18)]
    ranked = extras.rank_extras([PICK], variations + others, cap=6, shares=(2, 2, 2))
    assert [_kind(r) for r in ranked].count("variation") == 5
    assert [_kind(r) for r in ranked].count("other algorithm") == 1
    only_others = [_item(algo=6, tile=t) for t in range(10)]
    assert len(extras.rank_extras([PICK], only_others, cap=6, shares=(4, 1, 1))) == 6


def test_variations_go_round_robin_over_the_picks_best_fill_first() -> None:
    second = {**PICK, "tile": 23}
    pool = [
        _item(custom=1, waves=1.2),  # pick 0, poor last wave
        _item(custom=2, waves=2.0),  # pick 0, full
        _item(custom=3, waves=1.9),  # pick 0
        _item(tile=23, custom=1, waves=1.5),  # pick 1
    ]
    ranked = extras.rank_extras([PICK, second], pool, cap=4, shares=(4, 0, 0))
    assert [(r["tile"], r["custom"]) for r in ranked] == [(24, 2), (23, 1), (24, 3), (24, 1)]


def test_closer_kin_first_and_other_algorithms_round_robin() -> None:
    same_algo = [
        _item(tile=209, waves=2.0),  # the picks' algorithm, another tile, perfect fill
        _item(cluster_shape=0, waves=1.1),  # the pick's algorithm and tile
    ]
    ranked = extras.rank_extras([PICK], same_algo, cap=2, shares=(0, 2, 0))
    assert [(r["tile"], r["cluster_shape"]) for r in ranked] == [(24, 0), (209, 5)]
    others = [
        _item(algo=6, tile=18, waves=0.9),
        _item(algo=6, tile=20, waves=1.0),
        _item(algo=21, tile=18, waves=0.5),
    ]
    ranked = extras.rank_extras([PICK], others, cap=3, shares=(0, 0, 3))
    assert [(r["algo"], r["tile"]) for r in ranked] == [(6, 20), (21, 18), (6, 18)]


def test_discovery_keeps_the_heuristic_first_and_caps_the_enumerated() -> None:
    second = {**PICK, "tile": 23, "source": "heuristic"}
    legacy = {k: v for k, v in PICK.items() if k != "source"} | {"tile": 209}
    found = [
        PICK,
        second,
        _item(tile=23),  # the same kernel as the second pick: not an extra
        *(_item(custom=c, waves=1.0 + c / 100) for c in range(6)),
        *(_item(algo=a, tile=t, cluster_shape=0) for a in (6, 21) for t in range(1, 30)),
        _item(custom=-1),  # malformed: dropped
        legacy,  # no source: the heuristic's (an answer from before enumeration)
    ]
    params = CudaGemmSpace().from_discovery(found)
    keys = [tuple(p[k] for k in lt.ATTRIBUTES) for p in params]
    assert len(keys) == len(set(keys))
    heuristic = [tuple(item[k] for k in lt.ATTRIBUTES) for item in (PICK, second, legacy)]
    assert keys[:3] == heuristic
    assert len(params) == 3 + lt.EXTRA_ALGOS
    assert all(p["library"] == "cublaslt" and "source" not in p for p in params)
    assert {p["custom"] for p in params[3:] if p["tile"] == 24 and p["algo"] == 66} == set(
        range(6)
    ) - {PICK["custom"]}
    assert all(lt.invalid_reason({k: v for k, v in p.items() if k != "library"}) is None
               for p in params)  # fmt: skip


def test_an_answer_without_enumerated_items_is_the_heuristic_list() -> None:
    found = [PICK, {**PICK, "tile": 23}]
    assert [p["tile"] for p in CudaGemmSpace().from_discovery(found)] == [24, 23]


def test_the_gemm_order_puts_the_extras_after_the_heuristic_rest() -> None:
    found = [
        PICK,
        {**PICK, "tile": 23},
        *(_item(custom=c) for c in range(3)),
        _item(algo=21, tile=4, cluster_shape=0),
    ]
    discovered = CudaGemmSpace().from_discovery(found)
    request = TuneRequest(
        op="gemm", dtype="f16", layout="rcr", problem=GemmProblem(2048, 4096, 4096), backend="cuda"
    )
    kept, _ = candidate_params(request, "sm_90", "cuda", discovered)
    vendor = [i for i, p in enumerate(kept) if p["library"] == "cublaslt"]
    assert [kept[i] for i in vendor] == discovered  # the heuristic's order, then the extras' rank
    assert vendor[0] == 0 and [p["library"] for p in kept[1:4]] == ["cutlass"] * 3
    assert vendor[1:] == list(range(4, 4 + len(discovered) - 1))
