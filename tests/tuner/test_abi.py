"""tuner.abi: the run-time dims every backend and caller passes to a variant."""

from __future__ import annotations

import math
import struct

import pytest

from tuner.abi import (
    MAX_EPS_BITS,
    RMS_NORM_EPS,
    abi_dims,
    eps_bits,
    eps_from_bits,
)
from tuner.backends.cpu import harness_dims
from tuner.problems import GemmProblem, ReduceProblem, RmsNormProblem, SoftmaxProblem


def test_eps_bits_is_the_float32_bit_pattern() -> None:
    assert eps_bits(1e-6) == 0x358637BD
    assert eps_bits(1e-5) == struct.unpack("<I", struct.pack("<f", 1e-5))[0]
    assert eps_bits(0.0) == 0
    assert eps_from_bits(eps_bits(1e-6)) == pytest.approx(1e-6, rel=1e-7)
    assert eps_from_bits(eps_bits(1.0)) == 1.0
    # the largest finite float32 is the last accepted pattern
    assert eps_bits(3.4028234663852886e38) == MAX_EPS_BITS - 1


@pytest.mark.parametrize("eps", [-1e-6, math.inf, math.nan, 1e39, "1e-6", True])
def test_eps_bits_refuses_what_no_kernel_serves(eps: object) -> None:
    with pytest.raises(ValueError):
        eps_bits(eps)  # type: ignore[arg-type]


@pytest.mark.parametrize("bits", [-1, MAX_EPS_BITS, 0x7FC00000, 0x80000000, 1 << 40])
def test_eps_from_bits_refuses_patterns_outside_the_range(bits: int) -> None:
    with pytest.raises(ValueError):
        eps_from_bits(bits)


def test_abi_dims_per_op() -> None:
    assert abi_dims(GemmProblem(m=2, n=3, k=4)) == [2, 3, 4]
    assert abi_dims(SoftmaxProblem(m=3, k=5)) == [3, 5]
    assert abi_dims(ReduceProblem(m=3, k=5, kind="mean")) == [3, 5, 2]
    assert abi_dims(RmsNormProblem(m=7, k=4096)) == [7, 4096, eps_bits(RMS_NORM_EPS)]
    assert abi_dims(RmsNormProblem(m=7, k=4096), eps=1e-5) == [7, 4096, eps_bits(1e-5)]
    # the CPU harness passes exactly these
    assert harness_dims(RmsNormProblem(m=7, k=4096)) == [7, 4096, 0x358637BD]


def test_rms_norm_problem_key_and_bytes() -> None:
    problem = RmsNormProblem(m=8, k=4096)
    assert problem.key() == "m=8,k=4096"  # eps is not part of the key
    assert problem.operand_sizes() == {"x": 8 * 4096, "w": 4096, "y": 8 * 4096}
    assert problem.bytes_moved(2) == 2.0 * (2 * 8 * 4096 + 4096)
    assert problem.reduction_length() == 1
