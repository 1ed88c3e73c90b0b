"""Fused epilogues (issue 26, item 3): problem keys, validation, the reference, the CPU space
per epilogue, and real CPU builds verified against the reference."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import numpy as np
import pytest

from tests.tuner.cpu_helpers import module_backend
from tuner.acceptance import variant_rejection
from tuner.backends.cpu import CpuBackend
from tuner.engine import candidate_params, tune
from tuner.epilogues import CONV2D_EPILOGUES, EPILOGUES, GEMM_EPILOGUES
from tuner.errors import InvalidRequestError
from tuner.problems import Conv2dProblem, GemmProblem, problem_from_dict
from tuner.reference import apply_epilogue, from_storage, make_inputs, reference
from tuner.spaces.cpu_conv2d import CpuConv2dSpace
from tuner.spaces.cpu_gemm import CpuGemmSpace
from tuner.types import Budget, Outcome, TuneRequest

ARCH = "x86_64-avx2"


# ---- keys ----------------------------------------------------------------------------------
def test_none_keeps_every_existing_key_and_dims() -> None:
    assert GemmProblem(16, 4096, 4096).key() == "m=16,n=4096,k=4096"
    assert GemmProblem(16, 4096, 4096, epilogue="none").key() == "m=16,n=4096,k=4096"
    assert GemmProblem(16, 4096, 4096).dims() == {"m": 16, "n": 4096, "k": 4096}
    conv = Conv2dProblem(32, 56, 56, 64, 64, 3, 3, 1, 1, 1)
    assert conv.key() == "n=32,h=56,w=56,c=64,k=64,r=3,s=3,stride=1,pad=1,dilation=1"
    assert "epilogue" not in conv.dims()
    assert problem_from_dict("gemm", {"m": 1, "n": 2, "k": 3, "epilogue": "none"}).key() == (
        "m=1,n=2,k=3"
    )


def test_epilogue_is_part_of_the_key() -> None:
    fused = GemmProblem(16, 4096, 4096, epilogue="bias_gelu")
    assert fused.key() == "m=16,n=4096,k=4096,epilogue=bias_gelu"
    assert fused.dims()["epilogue"] == "bias_gelu"
    keys = {GemmProblem(16, 4096, 4096, epilogue=e).key() for e in GEMM_EPILOGUES}
    assert len(keys) == len(GEMM_EPILOGUES)
    conv = Conv2dProblem(1, 8, 8, 16, 16, 3, 3, 1, 1, 1, epilogue="bias_relu")
    assert conv.key().endswith(",dilation=1,epilogue=bias_relu")
    # a stored problem's dims rebuild the same problem
    again = problem_from_dict("conv2d", conv.dims())
    assert again == conv and again.key() == conv.key()


@pytest.mark.parametrize(
    ("op", "fields", "field"),
    [
        ("gemm", {"m": 1, "n": 8, "k": 8, "epilogue": "tanh"}, "epilogue"),
        ("gemm", {"m": 1, "n": 8, "k": 8, "epilogue": 3}, "epilogue"),
        ("gemm", {"m": 1, "n": 7, "k": 8, "epilogue": "gated_silu"}, "n"),
        (
            "conv2d",
            {"n": 1, "h": 8, "w": 8, "c": 8, "k": 8, "r": 3, "s": 3, "epilogue": "gated_silu"},
            "epilogue",
        ),
        ("reduce", {"m": 1, "k": 8, "epilogue": "bias"}, "epilogue"),
    ],
)
def test_bad_epilogue_names_the_field(op: str, fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequestError) as err:
        problem_from_dict(op, fields)
    assert err.value.field == field


def test_gated_silu_halves_the_output() -> None:
    p = GemmProblem(4, 64, 32, epilogue="gated_silu")
    assert p.operand_sizes() == {"a": 128, "b": 2048, "c": 128, "bias": 64}


# ---- reference -----------------------------------------------------------------------------
def test_reference_applies_each_epilogue() -> None:
    rng = np.random.default_rng(1)
    problem = GemmProblem(5, 6, 7)
    inputs = make_inputs(problem, "f32", "rcr", rng)
    plain = reference(problem, "f32", "rcr", inputs)
    bias = rng.random(6, dtype=np.float32) - 0.5
    x = plain + bias
    assert np.allclose(apply_epilogue(plain, bias, "bias"), x, atol=1e-6)
    assert np.allclose(apply_epilogue(plain, bias, "bias_relu"), np.maximum(x, 0), atol=1e-6)
    silu = x / (1 + np.exp(-x))
    assert np.allclose(apply_epilogue(plain, bias, "bias_silu"), silu, atol=1e-6)
    gelu = apply_epilogue(plain, bias, "bias_gelu")
    assert np.all(gelu[x > 3] > 0.99 * x[x > 3]) and np.allclose(
        gelu[np.abs(x) < 1e-3], 0, atol=1e-3
    )
    gated = apply_epilogue(plain, bias, "gated_silu")
    assert gated.shape == (5, 3)
    assert np.allclose(gated, silu[:, :3] * x[:, 3:], atol=1e-6)


@pytest.mark.parametrize("epilogue", ["bias_relu", "gated_silu"])
def test_fused_problem_inputs_carry_a_bias(epilogue: str) -> None:
    problem = GemmProblem(3, 8, 5, epilogue=epilogue)
    inputs = make_inputs(problem, "bf16", "rcr", np.random.default_rng(0))
    assert list(inputs) == ["a", "b", "bias"] and inputs["bias"].shape == (8,)
    expected = reference(problem, "bf16", "rcr", inputs)
    a, b = (from_storage(inputs[n], "bf16") for n in ("a", "b"))
    bias = from_storage(inputs["bias"], "bf16")
    assert np.allclose(expected, apply_epilogue(a @ b.T, bias, epilogue), atol=1e-5)


# ---- the CPU space per epilogue ------------------------------------------------------------
GEMM_SPACE = CpuGemmSpace()
CONV_SPACE = CpuConv2dSpace()


def test_plain_variants_are_unchanged_and_each_epilogue_has_its_own() -> None:
    params = list(GEMM_SPACE.enumerate("f16", "rcr", ARCH))
    plain = [p for p in params if "epilogue" not in p]
    assert len(params) == len(plain) * len(GEMM_EPILOGUES)
    names = [GEMM_SPACE.name(p, "f16", "rcr") for p in params]
    assert len(set(names)) == len(names)
    assert all(not n.endswith(tuple(EPILOGUES[1:])) for n in names[: len(plain)])
    fused = next(p for p in params if p.get("epilogue") == "bias_silu")
    assert GEMM_SPACE.name(fused, "f16", "rcr").endswith("_bias_silu")
    assert GEMM_SPACE.template_for(fused) == "cpu/gemm_fused.cpp.j2"
    assert GEMM_SPACE.template_for(plain[0]) == "cpu/gemm.cpp.j2"
    conv = list(CONV_SPACE.enumerate("f32", "nhwc", ARCH))
    assert {p.get("epilogue", "none") for p in conv} == set(CONV2D_EPILOGUES)


@pytest.mark.parametrize("epilogue", GEMM_EPILOGUES)
def test_candidates_are_the_problems_epilogue_only(epilogue: str) -> None:
    request = TuneRequest(
        op="gemm", dtype="f32", layout="rcr", problem=GemmProblem(64, 64, 64, epilogue=epilogue)
    )
    kept, pruned = candidate_params(request, ARCH, "cpu")
    assert kept and all(p.get("epilogue", "none") == epilogue for p in kept)
    assert all(p.get("epilogue", "none") == epilogue for p, _ in pruned)


def test_an_upload_of_another_epilogues_variant_is_refused() -> None:
    fused = next(p for p in GEMM_SPACE.enumerate("f32", "rcr", ARCH) if p.get("epilogue") == "bias")
    name = GEMM_SPACE.name(fused, "f32", "rcr")
    for problem, ok in ((GemmProblem(8, 8, 8, "bias"), True), (GemmProblem(8, 8, 8), False)):
        reason = variant_rejection("gemm", "cpu", "f32", "rcr", ARCH, problem, fused, name)
        assert (reason is None) is ok, reason


# ---- real CPU builds -----------------------------------------------------------------------
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuBackend]:
    yield from module_backend(
        tmp_path_factory, "epilogue-cache", bench_seconds=0.005, warmup_seconds=0.0, max_reps=5
    )


@needs_gxx
@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue"),
    [
        ("f32", "rcr", "bias"),
        ("f16", "rrr", "bias_relu"),
        ("bf16", "rcr", "bias_gelu"),
        ("f32", "crr", "bias_silu"),
        ("f16", "rcr", "gated_silu"),
        ("bf16", "rrr", "gated_silu"),
    ],
)
def test_fused_gemm_verifies(backend: CpuBackend, dtype: str, layout: str, epilogue: str) -> None:
    arch = backend.device().arch
    params = next(
        p
        for p in GEMM_SPACE.enumerate(dtype, layout, arch)
        if p.get("epilogue") == epilogue and p["mr"] == 4 and p["nr"] == 8
    )
    variant = backend.render(GEMM_SPACE, params, dtype, layout, arch)
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact is not None, built.log
    for m, n, k in ((37, 30, 61), (1, 2, 1), (9, 66, 150)):
        problem = GemmProblem(m=m, n=n, k=k, epilogue=epilogue)
        request = TuneRequest(op="gemm", dtype=dtype, layout=layout, problem=problem)
        result = backend.run(variant, built.artifact, request)
        assert result.outcome is Outcome.OK, (m, n, k, result.log)


@needs_gxx
def test_an_unfused_variant_fails_a_fused_problem(backend: CpuBackend) -> None:
    """The verification is real: the plain product is not accepted for a bias_relu problem."""
    arch = backend.device().arch
    plain = next(iter(GEMM_SPACE.enumerate("f32", "rcr", arch)))
    variant = backend.render(GEMM_SPACE, plain, "f32", "rcr", arch)
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact is not None
    problem = GemmProblem(16, 16, 16, epilogue="bias_relu")
    result = backend.run(
        variant, built.artifact, TuneRequest(op="gemm", dtype="f32", layout="rcr", problem=problem)
    )
    assert result.outcome is not Outcome.OK


@needs_gxx
@pytest.mark.parametrize("epilogue", ["bias_relu", "bias_gelu"])
def test_fused_conv2d_tunes_and_verifies(backend: CpuBackend, epilogue: str) -> None:
    problem = Conv2dProblem(2, 9, 9, 5, 12, 3, 3, 2, 1, 1, epilogue=epilogue)
    request = TuneRequest(
        op="conv2d",
        dtype="f16",
        layout="nhwc",
        problem=problem,
        budget=Budget(max_variants=3),
    )
    from tests.tuner.cpu_helpers import quick_config

    result = tune(request, backend, quick_config(backend.config.cache_dir))
    assert result.winner is not None
    assert result.winner.params["epilogue"] == epilogue
    assert result.winner.variant_name.endswith(epilogue)
    outcomes = {r.outcome for r in result.results}
    assert Outcome.WRONG_RESULT not in outcomes and Outcome.RUNTIME_ERROR not in outcomes, [
        (r.outcome, r.log) for r in result.results
    ]
