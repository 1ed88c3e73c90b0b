"""Grouped GEMM (issue 26 item 2): token buckets, the bucket's benchmark distribution, the
problem's validation, its ABI dims, inputs and reference."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.abi import abi_dims
from tuner.errors import InvalidRequestError
from tuner.moe import SKEWS, bucket_of, skew_bucket, token_counts, tokens_bucket
from tuner.problems import GroupedGemmProblem, problem_from_dict
from tuner.reference import from_storage, make_inputs, reference
from tuner.stats import throughput


@pytest.mark.parametrize(("total", "bucket"), [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 16)])
def test_tokens_round_up_to_a_power_of_two(total: int, bucket: int) -> None:
    assert tokens_bucket(total) == bucket


@pytest.mark.parametrize(
    ("skew", "bucket"), [(1.0, 1), (1.01, 2), (2.0, 2), (3.9, 4), (4.0, 4), (5, 8), (64, 8)]
)
def test_skew_rounds_up_to_a_bucket_and_stops_at_eight(skew: float, bucket: int) -> None:
    assert skew_bucket(skew) == bucket


def test_a_batch_maps_to_its_bucket() -> None:
    assert bucket_of([4, 4, 4, 4]) == (16, 1)
    assert bucket_of([10, 2, 2, 2]) == (16, 4)  # max 10 / mean 4 = 2.5
    assert bucket_of([1, 0, 0, 0, 0, 0, 0, 0]) == (1, 8)  # decode: one token, eight experts
    assert bucket_of([300, 100, 100, 100]) == (1024, 2)  # total 600 -> 1024, skew 2


@pytest.mark.parametrize("counts", [[], [0, 0], [1, -1], [1.5, 2]])
def test_a_batch_without_tokens_or_with_bad_counts_is_refused(counts: list) -> None:
    with pytest.raises(InvalidRequestError):
        bucket_of(counts)


@pytest.mark.parametrize("experts", [1, 2, 8, 60, 64, 128, 256])
@pytest.mark.parametrize("tokens", [1, 8, 64, 512, 8192])
def test_the_benchmark_distribution_sums_to_the_bucket(experts: int, tokens: int) -> None:
    for skew in (s for s in SKEWS if s <= experts):
        counts = token_counts(experts, tokens, skew)
        assert len(counts) == experts and min(counts) >= 0 and sum(counts) == tokens
        assert counts == token_counts(experts, tokens, skew)  # deterministic
        total, measured = bucket_of(counts)
        assert total == tokens and measured >= skew
        if tokens >= experts * skew and experts & (experts - 1) == 0:
            assert measured == skew  # the bucket's own skew whenever integers allow


def test_skew_shapes_the_distribution() -> None:
    assert token_counts(8, 64, 1) == [8] * 8
    assert token_counts(8, 64, 4) == [32, 5, 5, 5, 5, 4, 4, 4]
    assert token_counts(4, 2, 1) == [1, 1, 0, 0]


def test_the_problem_key_is_the_bucket() -> None:
    problem = GroupedGemmProblem(experts=64, n=1024, k=2048, tokens=100, skew=2)
    assert problem.tokens == 128  # rounded up: the bucket
    assert problem.key() == "experts=64,n=1024,k=2048,tokens=128,skew=2"
    assert problem == problem_from_dict("grouped_gemm", {**problem.dims(), "tokens": 128})
    assert problem.flops() == 2.0 * 128 * 1024 * 2048
    assert throughput(problem, 2, 1.0) == (problem.flops() / 1e6, "TFLOP/s")
    assert GroupedGemmProblem(8, 16, 16, 4).skew == 1  # skew defaults to 1
    # the weights of experts without tokens are not read: 8 of 64 experts in this decode bucket
    assert GroupedGemmProblem(64, 1024, 2048, 8, 8).operand_sizes()["w"] == 8 * 1024 * 2048


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"experts": 0}, "experts"),
        ({"experts": 257}, "experts"),
        ({"n": 12}, "n"),
        ({"k": 4100}, "k"),
        ({"tokens": 0}, "tokens"),
        ({"skew": 3}, "skew"),
        ({"skew": 16}, "skew"),
        ({"experts": 2, "skew": 4}, "skew"),  # max/mean cannot exceed the expert count
        ({"skew": "2"}, "skew"),
        ({"tokens": 2.5}, "tokens"),
    ],
)
def test_bad_dims_are_refused_naming_the_field(fields: dict, field: str) -> None:
    dims = {"experts": 8, "n": 4096, "k": 1024, "tokens": 64, "skew": 2, **fields}
    with pytest.raises(InvalidRequestError) as caught:
        problem_from_dict("grouped_gemm", dims)
    assert caught.value.field == field


def test_abi_dims_carry_the_tokens_per_expert() -> None:
    problem = GroupedGemmProblem(experts=4, n=16, k=8, tokens=16, skew=2)
    assert abi_dims(problem) == [4, 16, 8, 16, 2, 8, 3, 3, 2]


def test_reference_is_a_per_expert_matmul() -> None:
    problem = GroupedGemmProblem(experts=4, n=16, k=24, tokens=16, skew=2)
    inputs = make_inputs(problem, "bf16", "rcr", np.random.default_rng(0))
    assert inputs["a"].shape == (16, 24) and inputs["w"].shape == (4, 16, 24)
    expected = reference(problem, "bf16", "rcr", inputs)
    a, w = from_storage(inputs["a"], "bf16"), from_storage(inputs["w"], "bf16")
    rows = np.repeat(np.arange(4), token_counts(4, 16, 2))  # the expert of each token
    for t in range(16):
        assert np.allclose(expected[t], w[rows[t]] @ a[t], atol=1e-5)
