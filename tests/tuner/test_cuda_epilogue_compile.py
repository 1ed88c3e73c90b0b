"""Compile-check every gemm template instance with a fused epilogue (issue 26) with the local
nvcc for sm_90a (no GPU), through the CUDA backend's own build; and check that the plain
variants render the very source they rendered before epilogues existed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend
from tuner.cutlass_paths import cutlass_include_dirs
from tuner.problems import Conv2dProblem, GemmProblem
from tuner.render import template_environment
from tuner.spaces.cuda_conv2d import CudaConv2dSpace
from tuner.spaces.cuda_gemm import CudaGemmSpace
from tuner.types import EngineConfig
from tuner.vendor_paths import cublas_paths, cudnn_paths

LT_ALGO = {"algo": 66, "tile": 18, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 0,
           "custom": 0, "inner_shape": 0, "cluster_shape": 2}  # fmt: skip
SPACE = CudaGemmSpace()


def _source(params: dict, dtype: str) -> str:
    template = template_environment().get_template(SPACE.template_for(params))
    return template.render(**SPACE.render_context(params, dtype, "rcr"))


def _pick(family: str, epilogue: str, **match: object) -> dict:
    return next(
        p
        for p in SPACE.enumerate("f16", "rcr", "sm_90")
        if p["family"] == family
        and p.get("epilogue", "none") == epilogue
        and all(p.get(k) == v for k, v in match.items())
    )


#: sha256[:16] of plain sources, rendered before any template learned an epilogue (the
#: templates of the hand-written and cuBLASLt families now hold fused code behind Jinja ifs)
PLAIN_SOURCES = [
    ("skinny", "f16", {"m_tile": 1, "pack": 8, "lanes": 32, "warps": 8, "slices": 1, "splits": 1,
                       "unroll": 8}, "277c2dc96aef82e8"),
    ("skinny", "bf16", {"m_tile": 4, "pack": 8, "lanes": 16, "warps": 4, "slices": 2,
                        "splits": 2, "unroll": 4}, "78190d65e1d7d24f"),
    ("swapab", "f16", {"m_tile": 8, "w_tiles": 1, "warps": 4, "slices": 1, "splits": 2,
                       "unroll": 4}, "65d63a9546d2f529"),
    ("swapab", "bf16", {"m_tile": 8, "w_tiles": 1, "warps": 4, "slices": 2, "splits": 1,
                        "unroll": 4}, "c8bf22148292f41a"),
]  # fmt: skip
#: the cuBLASLt algorithm LT_ALGO (bf16) and the discovery build (f16), likewise (the discovery
#: build's digest is of 2026-12-07: its enumeration moved into cublaslt_discovery.cuh, shared
#: with FP8, and its answer items gained workspace_limit)
LT_SOURCE, DISCOVERY_SOURCE = "6cb23b73b0fc996d", "1d9da53fdfbb64dc"


def test_plain_variants_render_what_they_rendered_before() -> None:
    """The fused code sits behind ``{% if %}``s: a plain variant's source (hence its id) and the
    toolchain's template version (gemm_sm90.cu.j2 and the _* helpers, none edited) stay."""
    lt = {"library": "cublaslt", **SPACE.from_discovery([LT_ALGO])[0]}
    cases = [
        *(
            (_pick(family, "none", **match), dtype, digest)
            for family, dtype, match, digest in PLAIN_SOURCES
        ),
        (lt, "bf16", LT_SOURCE),
        (SPACE.discovery_params, "f16", DISCOVERY_SOURCE),
    ]
    for params, dtype, digest in cases:
        source = _source(params, dtype)
        assert "epilogue" not in source
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, params


def test_fused_sources_carry_their_epilogue() -> None:
    lt = {"library": "cublaslt", **SPACE.from_discovery([LT_ALGO])[0], "epilogue": "bias_gelu"}
    assert "CUBLASLT_EPILOGUE_GELU_BIAS" in _source(lt, "f16")
    assert "CUBLASLT_MATMUL_DESC_BIAS_POINTER" in _source(lt, "f16")
    sm90 = _pick("sm90", "bias_silu", schedule="coop")
    assert SPACE.template_for(sm90) == "cuda/gemm_sm90_fused.cu.j2"
    assert "LinCombPerColBiasEltAct" in _source(sm90, "bf16")
    assert "thread::SiLu" in _source(sm90, "bf16")
    assert "kGated = true" in _source(_pick("swapab", "gated_silu"), "f16")
    assert SPACE.name(sm90, "f16", "rcr").endswith("_coop_bias_silu")


def test_fused_discovery_follows_the_problem() -> None:
    (fused,) = SPACE.discoveries(GemmProblem(16, 4096, 4096, epilogue="bias_relu"))
    assert fused.params["epilogue"] == "bias_relu"
    found = SPACE.from_discovery([LT_ALGO], fused)
    assert found[0]["epilogue"] == "bias_relu" and found[0]["library"] == "cublaslt"
    name = SPACE.name(found[0], "f16", "rcr")
    assert SPACE.discovered_reason(found[0], "f16", "rcr", "sm_90") is None, name
    silu = {**found[0], "epilogue": "bias_silu"}
    assert "cuBLASLt fuses" in (SPACE.discovered_reason(silu, "f16", "rcr", "sm_90") or "")
    assert SPACE.discoveries(GemmProblem(16, 4096, 4096, epilogue="bias_silu")) == []
    (plain,) = SPACE.discoveries(GemmProblem(16, 4096, 4096))
    assert plain.params == SPACE.discovery_params


@pytest.mark.nvcc
def test_fused_hand_written_and_cublaslt_variants_compile(tmp_path: Path) -> None:
    require_toolchain(cublas_paths)
    backend = CudaBackend(
        EngineConfig(cache_dir=str(tmp_path), compile_workers=2, compile_timeout_s=600)
    )
    lt = {"library": "cublaslt", **SPACE.from_discovery([LT_ALGO])[0]}
    wanted = [
        ({**SPACE.discovery_params, "epilogue": "bias_relu"}, "f16"),
        ({**lt, "epilogue": "bias_gelu"}, "bf16"),
        (_pick("skinny", "bias_gelu", splits=2, slices=2, m_tile=4), "f16"),
        (_pick("skinny", "gated_silu", m_tile=2), "bf16"),
        (_pick("swapab", "bias_silu", splits=2), "bf16"),
        (_pick("swapab", "gated_silu", slices=2), "f16"),
    ]
    variants = [backend.render(SPACE, p, dtype, "rcr", "sm_90") for p, dtype in wanted]
    results = backend.build(variants)
    for variant in variants:
        result = results[variant.id]
        assert result.ok and result.artifact, f"{variant.name}:\n{result.log[-4000:]}"


@pytest.mark.nvcc
# one CUTLASS build (40-120 s on a 2-core CI machine); the schedule is not what the epilogue changes
@pytest.mark.parametrize(("epilogue", "schedule"), [("bias_silu", "coop")])
def test_fused_cutlass_sm90_variant_compiles(tmp_path: Path, epilogue: str, schedule: str) -> None:
    require_toolchain(cutlass_include_dirs)
    backend = CudaBackend(
        EngineConfig(cache_dir=str(tmp_path), compile_workers=1, compile_timeout_s=900)
    )
    params = _pick("sm90", epilogue, schedule=schedule, scheduler="persistent")
    variant = backend.render(SPACE, params, "f16", "rcr", "sm_90")
    result = backend.build([variant])[variant.id]
    assert result.ok and result.artifact, f"{variant.name}:\n{result.log[-4000:]}"


# ---- conv2d through cuDNN's fused graph ----------------------------------------------------
DNN_CONFIG = {"engine": 41, "knobs": {"2": 7, "14": 4, "27": 1}, "source": "heur_a"}
#: sha256[:16] of the plain cuDNN discovery build and engine config (f16), as before epilogues
DNN_PLAIN_SOURCES = ("a358510b8ce20d14", "365466dfbbeb2943")


def _conv_source(space: CudaConv2dSpace, params: dict, dtype: str) -> str:
    template = template_environment().get_template(space.template_for(params))
    return template.render(**space.render_context(params, dtype, "nhwc"))


def test_conv2d_plain_cudnn_sources_stay_and_fused_discovery_follows_the_problem() -> None:
    space = CudaConv2dSpace()
    engine = space.from_discovery([DNN_CONFIG])[0]
    for params, digest in zip((space.discovery_params, engine), DNN_PLAIN_SOURCES, strict=True):
        source = _conv_source(space, params, "f16")
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest
    problem = Conv2dProblem(32, 56, 56, 64, 64, 3, 3, 1, 1, 1, epilogue="bias_relu")
    (fused,) = space.discoveries(problem)  # cuDNN's fused graph only
    found = space.from_discovery([DNN_CONFIG], fused)[0]
    assert found["epilogue"] == "bias_relu" and found["library"] == "cudnn"
    assert space.discovered_reason(found, "f16", "nhwc", "sm_90") is None
    assert space.prune(found, problem, "f16", "nhwc") is None
    assert space.name(found, "f16", "nhwc").endswith("_bias_relu")
    source = _conv_source(space, found, "f16")
    assert "CUDNN_POINTWISE_RELU_FWD" in source and "kUidBias" in source


@pytest.mark.nvcc
def test_fused_cudnn_conv2d_variants_compile(tmp_path: Path) -> None:
    require_toolchain(cudnn_paths)
    space = CudaConv2dSpace()
    backend = CudaBackend(
        EngineConfig(cache_dir=str(tmp_path), compile_workers=2, compile_timeout_s=600)
    )
    engine = space.from_discovery([DNN_CONFIG])[0]
    wanted = [
        ({**space.discovery_params, "epilogue": "bias_relu"}, "f16"),
        ({**engine, "epilogue": "bias_gelu"}, "bf16"),
        ({**engine, "epilogue": "bias"}, "f16"),
        ({**engine, "epilogue": "bias_silu"}, "f16"),
    ]
    variants = [backend.render(space, p, dtype, "nhwc", "sm_90") for p, dtype in wanted]
    results = backend.build(variants)
    for variant in variants:
        result = results[variant.id]
        assert result.ok and result.artifact, f"{variant.name}:\n{result.log[-4000:]}"
