"""scaled_gemm (FP8) in the engine: the problem's keys and validation, the e4m3 codec and the
f32 reference from dequantized inputs (and that the tolerance catches a wrong block scale), the
ABI dims, and the CUDA space: families, pruning, order, stable ids; the other ops' spaces keep
their ids."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.abi import abi_dims
from tuner.errors import InvalidRequestError
from tuner.fp8 import (
    dequantize,
    e4m3_to_float,
    e4m3_values,
    float_to_e4m3,
    make_scaled_gemm_inputs,
    scale_counts,
    scaled_gemm_reference,
    scaled_gemm_term_norms,
)
from tuner.problems import ScaledGemmProblem, check_op_dtype, problem_from_dict
from tuner.reference import make_inputs, reference, to_storage, verify
from tuner.registry import SPACES, load_space
from tuner.render import render_variant
from tuner.spaces.cuda_scaled_gemm import CudaScaledGemmSpace

SPACE = CudaScaledGemmSpace()


def test_key_names_every_field_in_order() -> None:
    problem = problem_from_dict("scaled_gemm", {"m": 8, "n": 4096, "k": 4096})
    assert problem.key() == "m=8,n=4096,k=4096,out_dtype=bf16,scaling=per_tensor"
    block = ScaledGemmProblem(1, 256, 512, "f16", "block")
    assert block.key() == "m=1,n=256,k=512,out_dtype=f16,scaling=block"
    assert abi_dims(block) == [1, 256, 512, 1, 1]
    assert abi_dims(problem) == [8, 4096, 4096, 0, 0]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"m": 8, "n": 256, "k": 200, "scaling": "block"}, "k"),  # k % 128
        ({"m": 8, "n": 200, "k": 256, "scaling": "block"}, "n"),  # n % 128
        ({"m": 8, "n": 200, "k": 24}, "k"),  # k % 16
        ({"m": 8, "n": 256, "k": 256, "out_dtype": "f32"}, "out_dtype"),
        ({"m": 8, "n": 256, "k": 256, "scaling": "per_row"}, "scaling"),
        ({"m": 0, "n": 256, "k": 256}, "m"),
        ({"n": 256, "k": 256}, "m"),
        ({"m": 8, "n": 256, "k": 256, "layout": "rcr"}, "layout"),
    ],
)
def test_bad_problems_name_the_field(fields: dict, field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        problem_from_dict("scaled_gemm", fields)
    assert caught.value.field == field


def test_per_tensor_takes_any_k_of_16_and_any_n() -> None:
    assert ScaledGemmProblem(3, 200, 48).scaling == "per_tensor"


def test_e4m3_is_taken_by_the_fp8_ops_alone() -> None:
    assert check_op_dtype("scaled_gemm", "e4m3") == "e4m3"
    assert check_op_dtype("gemm", "bf16") == "bf16"
    for op, dtype in (("scaled_gemm", "bf16"), ("gemm", "e4m3"), ("softmax", "e4m3")):
        with pytest.raises(InvalidRequestError) as caught:
            check_op_dtype(op, dtype)
        assert caught.value.field == "dtype"


def test_e4m3_codec_round_trips_every_finite_code() -> None:
    values = e4m3_values()
    finite = np.isfinite(values)
    codes = np.arange(256, dtype=np.uint8)[finite]
    back = float_to_e4m3(values[finite])
    # +0 and -0 decode alike; every other code comes back as itself
    assert np.array_equal(e4m3_to_float(back), values[finite])
    assert np.array_equal(back[codes != 0x80], codes[codes != 0x80])
    assert values[0x7E] == 448.0 and values[0x01] == 2.0**-9
    assert e4m3_to_float(float_to_e4m3(np.array([1000.0, -1000.0, 0.3]))).tolist() == [
        448.0,
        -448.0,
        0.3125,
    ]


@pytest.mark.parametrize("scaling", ["per_tensor", "block"])
def test_reference_is_the_dequantized_product(scaling: str) -> None:
    problem = ScaledGemmProblem(5, 256, 384, "bf16", scaling)
    inputs = make_inputs(problem, "e4m3", "rcr", np.random.default_rng(1))
    counts = scale_counts(problem)
    assert inputs["a"].dtype == np.uint8 and inputs["b"].shape == (256, 384)
    assert (inputs["a_scale"].size, inputs["b_scale"].size) == counts
    expected = reference(problem, "e4m3", "rcr", inputs)
    a, b = dequantize(problem, inputs)
    # by hand: row 2, column 130 (block scaling: the second 128-row block of B)
    by_hand = sum(float(a[2, j]) * float(b[130, j]) for j in range(384))
    assert expected[2, 130] == pytest.approx(by_hand, rel=1e-5, abs=1e-5)
    # the quantized values land near the originals' range: amax of a group maps to 448
    assert np.abs(e4m3_to_float(inputs["a"])).max() == 448.0


def _verdict(
    problem: ScaledGemmProblem, inputs: dict, got: np.ndarray, expected: np.ndarray
) -> bool:
    norms = scaled_gemm_term_norms(problem, inputs)
    return verify(to_storage(got, "bf16"), expected, "bf16", problem.k, norms).ok


def test_tolerance_catches_a_wrong_block_scale() -> None:
    problem = ScaledGemmProblem(4, 256, 1024, "bf16", "block")
    inputs = make_scaled_gemm_inputs(problem, np.random.default_rng(2))
    expected = scaled_gemm_reference(problem, inputs)
    assert _verdict(problem, inputs, expected, expected)  # bf16 rounding alone passes
    wrong = {**inputs, "b_scale": inputs["b_scale"].copy()}
    wrong["b_scale"][0, 3] *= 2.0  # one 128x128 block of B scaled twice
    assert not _verdict(problem, inputs, scaled_gemm_reference(problem, wrong), expected)
    transposed = {**inputs, "a_scale": np.ascontiguousarray(inputs["a_scale"].T).reshape(-1)}
    # A's scales K-major
    assert not _verdict(problem, inputs, scaled_gemm_reference(problem, transposed), expected)


def test_fp8_tolerance_is_relative_to_the_terms_not_to_the_output() -> None:
    problem = ScaledGemmProblem(8, 128, 2048, "bf16", "per_tensor")
    inputs = make_scaled_gemm_inputs(problem, np.random.default_rng(5))
    expected = scaled_gemm_reference(problem, inputs)
    norms = scaled_gemm_term_norms(problem, inputs)
    # an error of 1/256 of an output's terms' norm passes, even where the output is near zero
    # by cancellation (the old elementwise atol failed FP8 kernels there)...
    small = expected + norms / 256.0
    assert _verdict(problem, inputs, small, expected)
    # ...the same at 16x the inputs' scale (the scales span 16x)...
    big = {**inputs, "a_scale": inputs["a_scale"] * 16.0}
    assert _verdict(problem, big, 16.0 * small, 16.0 * expected)
    # ...while 1/32 of it (the size of fast accumulation's error at k = 18944) fails
    assert not _verdict(problem, inputs, expected + norms / 32.0, expected)
    # and a dropped 128-wide K block fails
    dropped = {**inputs, "a": inputs["a"].copy()}
    dropped["a"].reshape(8, 2048)[:, 256:384] = 0
    assert not _verdict(problem, inputs, scaled_gemm_reference(problem, dropped), expected)


def test_the_space_is_registered_for_cuda_alone() -> None:
    assert ("scaled_gemm", "cuda") in SPACES and ("scaled_gemm", "cpu") not in SPACES
    assert isinstance(load_space("scaled_gemm", "cuda"), CudaScaledGemmSpace)


def test_enumerate_refuses_other_dtypes_layouts_and_archs() -> None:
    for dtype, layout, arch, field in (
        ("bf16", "rcr", "sm_90", "dtype"),
        ("e4m3", "rrr", "sm_90", "layout"),
        ("e4m3", "rcr", "sm_80", "device.arch"),
    ):
        with pytest.raises(InvalidRequestError) as caught:
            list(SPACE.enumerate(dtype, layout, arch))
        assert caught.value.field == field


def _pruned(problem: ScaledGemmProblem) -> list[dict]:
    return [
        p
        for p in SPACE.enumerate("e4m3", "rcr", "sm_90")
        if SPACE.prune(p, problem, "e4m3", "rcr") is None
    ]


def test_prune_keeps_the_problems_out_dtype_and_scaling() -> None:
    problem = ScaledGemmProblem(8, 4096, 4096, "f16", "block")
    kept = _pruned(problem)
    assert kept and all(p["out_dtype"] == "f16" and p["scaling"] == "block" for p in kept)
    assert {p["family"] for p in kept} == {"sm90_fp8", "decode_fp8", "swapab_fp8"}
    assert {p["m_tiles"] for p in kept if p["family"] == "swapab_fp8"} == {1}  # m = 8: one n8
    decode = [p for p in kept if p["family"] == "decode_fp8"]
    assert {p["m_tile"] for p in decode} == {8}  # 16 would waste half its rows; 4 is too few
    assert all(p["tile_n"] == 128 and p["accum"] == "promoted" for p in kept if "tile_n" in p)
    big = _pruned(ScaledGemmProblem(2048, 4096, 4096))
    assert not [p for p in big if "decode" in p["family"] or "swapab" in p["family"]]
    mid = _pruned(ScaledGemmProblem(32, 4096, 4096))  # swap-AB's four n8 tiles, no decode
    assert {p["m_tiles"] for p in mid if p["family"] == "swapab_fp8"} == {4}
    assert not [p for p in mid if p["family"] == "decode_fp8"]
    assert SPACE.order(mid, ScaledGemmProblem(32, 4096, 4096), "e4m3", "rcr")[0]["m_tiles"] == 4
    odd_k = _pruned(ScaledGemmProblem(12, 4096, 4096 + 16))  # k not a multiple of 64
    assert {p["m_tiles"] for p in odd_k if p["family"] == "swapab_fp8"} == set()
    assert {
        p["m_tiles"]
        for p in _pruned(ScaledGemmProblem(12, 4096, 4096))
        if p["family"] == "swapab_fp8"
    } == {2}  # noqa: E501


def test_order_puts_the_vendor_default_then_the_decode_kernels_first_for_small_m() -> None:
    problem = ScaledGemmProblem(1, 4096, 4096)
    vendor = {
        "library": "cublaslt",
        "family": "cublaslt_fp8",
        "out_dtype": "bf16",
        "scaling": "per_tensor",
        **{k: 1 if k == "splitk" else 0 for k in ("algo", "tile", "stages", "splitk")},
        **{k: 0 for k in ("reduction", "swizzle", "custom", "inner_shape", "cluster_shape")},
        "fast_accum": 0,
    }
    assert SPACE.prune(vendor, problem, "e4m3", "rcr") is None
    ordered = SPACE.order([*_pruned(problem), vendor], problem, "e4m3", "rcr")
    assert ordered[0] == vendor
    families = [p["family"] for p in ordered[1:8]]
    assert families == ["swapab_fp8"] * 4 + ["decode_fp8"] * 3
    prefill = ScaledGemmProblem(2048, 4096, 4096)
    first = SPACE.order(_pruned(prefill), prefill, "e4m3", "rcr")[0]
    assert (
        SPACE.name(first, "e4m3", "rcr")
        == "scaled_gemm_e4m3_bf16_per_tensor_128x256x128_c2x1_coop_fast"
    )  # noqa: E501
    narrow = ScaledGemmProblem(64, 4096, 4096, "bf16", "block")  # a seed of tile M 64 first
    first = SPACE.order(_pruned(narrow), narrow, "e4m3", "rcr")[0]
    assert (first["tile_m"], first["schedule"], first["scaling"]) == (64, "pingpong", "block")
    streamk = [p for p in _pruned(prefill) if p["scheduler"] == "streamk"]
    assert streamk and all(p["schedule"] == "coop" for p in streamk)
    assert not [p for p in _pruned(narrow) if p["scheduler"] == "streamk"]  # per-tensor only


def test_discovery_is_built_for_the_problems_types_and_labels_its_answer() -> None:
    problem = ScaledGemmProblem(8, 4096, 4096, "f16", "block")
    (discovery,) = SPACE.discoveries(problem)
    assert discovery.params == {
        "family": "cublaslt_fp8_discover",
        "out_dtype": "f16",
        "scaling": "block",
    }
    found = [
        {
            "algo": 66,
            "tile": 18,
            "stages": 35,
            "splitk": 1,
            "reduction": 0,
            "swizzle": 0,
            "custom": 0,
            "inner_shape": 0,
            "cluster_shape": 2,
            "source": "heuristic",
        }
    ]
    params, fast = SPACE.from_discovery(found, discovery)  # the default, then fast accumulation
    assert params["family"] == "cublaslt_fp8" and params["out_dtype"] == "f16"
    assert (params["fast_accum"], fast["fast_accum"]) == (0, 1)
    assert {k: v for k, v in fast.items() if k != "fast_accum"} == {
        k: v for k, v in params.items() if k != "fast_accum"
    }
    for p in (params, fast):
        assert SPACE.discovered_reason(p, "e4m3", "rcr", "sm_90") is None
        assert SPACE.prune(p, problem, "e4m3", "rcr") is None
    assert SPACE.name(params, "e4m3", "rcr").startswith("scaled_gemm_e4m3_f16_block_lt_a66_")
    assert SPACE.name(fast, "e4m3", "rcr").endswith("_fast")
    assert SPACE.discovered_reason({**fast, "fast_accum": 2}, "e4m3", "rcr", "sm_90")


def test_names_are_unique_and_ids_stable() -> None:
    params = list(SPACE.enumerate("e4m3", "rcr", "sm_90"))
    names = [SPACE.name(p, "e4m3", "rcr") for p in params]
    assert len(set(names)) == len(names)
    # the same params render the same source (and so the same id) every time
    for p in (params[0], params[-1]):
        one = render_variant(SPACE, p, "e4m3", "rcr", "sm_90", ("-O3",), "nvcc 13.0")
        two = render_variant(SPACE, dict(p), "e4m3", "rcr", "sm_90", ("-O3",), "nvcc 13.0")
        assert one.id == two.id and one.source.startswith("// tunehub")
        assert one.name == SPACE.name(p, "e4m3", "rcr")


def test_other_ops_spaces_are_untouched() -> None:
    gemm = load_space("gemm", "cuda")
    names = [gemm.name(p, "f16", "rcr") for p in gemm.enumerate("f16", "rcr", "sm_90")]
    assert names[0] == "gemm_f16_rcr_128x256x64_c2x1_coop"
    assert not any("e4m3" in n for n in names)
