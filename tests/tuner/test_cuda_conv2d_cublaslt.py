"""The conv2d space's cuBLASLt family: 1x1, stride-1, unpadded layers run as the GEMM they are
(m = n*h*w, n = k, k = c, layout rcr); discovery, params, pruning, order, names, rendering and
the service's check of an uploaded variant (no nvcc, no GPU)."""

from __future__ import annotations

from typing import Any

import pytest

from tuner.acceptance import variant_rejection
from tuner.backends.cuda import CudaBackend
from tuner.engine import candidate_params
from tuner.problems import Conv2dProblem
from tuner.render import render_variant
from tuner.spaces import cuda_conv2d_cublaslt as convlt
from tuner.spaces import cuda_conv2d_cudnn as dnn
from tuner.spaces.cuda_conv2d import CudaConv2dSpace
from tuner.types import CompileResult, EngineConfig, TuneRequest

FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
POINTWISE = Conv2dProblem(1, 56, 56, 64, 256, 1, 1)
#: cuDNN's discovery answer (two engine configs) and cuBLASLt's (three algorithms)
FOUND_DNN: list[dict[str, Any]] = [
    {"engine": 58, "source": "heur_a", "rank": 0, "knobs": {"25": 2}},
    {"engine": 45, "source": "heur_a", "rank": 1, "knobs": {"2": 5}},
]
FOUND_LT: list[dict[str, Any]] = [
    {"algo": 66, "tile": 18, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 0,
     "custom": 0, "inner_shape": 0, "cluster_shape": 2},
    {"algo": 66, "tile": 15, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 1,
     "custom": 0, "inner_shape": 0, "cluster_shape": 2},
    {"algo": 21, "tile": 20, "stages": 8, "splitk": 2, "reduction": 1, "swizzle": 0,
     "custom": 0, "inner_shape": 0, "cluster_shape": 0},
]  # fmt: skip


def _discovered(problem: Conv2dProblem) -> list[dict[str, Any]]:
    space = CudaConv2dSpace()
    answers: dict[str, list[dict[str, Any]]] = {
        dnn.DISCOVERY_FAMILY: FOUND_DNN,
        convlt.DISCOVERY_FAMILY: FOUND_LT,
    }
    out: list[dict[str, Any]] = []
    for discovery in space.discoveries(problem):
        out += space.from_discovery(answers[discovery.params["family"]], discovery)
    return out


@pytest.mark.parametrize(
    ("problem", "lt"),
    [
        (POINTWISE, True),
        (Conv2dProblem(8, 14, 14, 1536, 384, 1, 1), True),
        (Conv2dProblem(1, 56, 56, 256, 512, 1, 1, stride=2), False),  # strided: not a GEMM
        (Conv2dProblem(1, 56, 56, 64, 64, 1, 1, pad=1), False),
        (Conv2dProblem(1, 56, 56, 64, 64, 3, 3, pad=1), False),
        (Conv2dProblem(1, 56, 56, 96, 192, 2, 2, stride=2), False),
    ],
)
def test_only_plain_gemm_layers_ask_cublaslt_after_cudnn(problem: Conv2dProblem, lt: bool) -> None:
    discoveries = CudaConv2dSpace().discoveries(problem)
    assert discoveries[0].params == dnn.DISCOVERY_PARAMS and discoveries[0].library == "cudnn"
    assert [d.params for d in discoveries[1:]] == ([convlt.DISCOVERY_PARAMS] if lt else [])
    if lt:
        assert discoveries[1].library == "cublas"


def test_cublaslt_answer_becomes_gemm_attribute_params_with_conv_names() -> None:
    space = CudaConv2dSpace()
    params = space.from_discovery([*FOUND_LT, FOUND_LT[0]], convlt.discovery())
    assert len(params) == 3  # the duplicate is dropped
    assert params[0] == {"library": "cublaslt", "family": "cublaslt", **FOUND_LT[0]}
    assert (
        space.name(params[0], "f16", "nhwc") == "conv2d_f16_nhwc_lt_a66_t18_s35_k1_r0_w0_c0_i0_cl2"
    )
    assert space.name(convlt.DISCOVERY_PARAMS, "bf16", "nhwc") == "conv2d_bf16_nhwc_lt_discover"
    # without a discovery named, an answer is cuDNN's (the first build)
    assert space.from_discovery(FOUND_DNN)[0]["library"] == "cudnn"


def test_gemm_problem_of_a_pointwise_layer() -> None:
    gemm = convlt.gemm_problem(Conv2dProblem(8, 14, 14, 1536, 384, 1, 1))
    assert (gemm.m, gemm.n, gemm.k) == (8 * 14 * 14, 384, 1536)
    with pytest.raises(ValueError, match="1x1, stride-1"):
        convlt.gemm_problem(Conv2dProblem(1, 56, 56, 256, 512, 1, 1, stride=2))


def test_cublaslt_params_are_pruned_off_other_layers_and_when_malformed() -> None:
    space = CudaConv2dSpace()
    params = space.from_discovery(FOUND_LT, convlt.discovery())[0]
    assert space.prune(params, POINTWISE, "f16", "nhwc") is None
    strided = Conv2dProblem(1, 56, 56, 256, 512, 1, 1, stride=2)
    assert "1x1, stride-1" in (space.prune(params, strided, "f16", "nhwc") or "")
    bad = {**params, "splitk": 0}
    assert "splitk" in (space.prune(bad, POINTWISE, "f16", "nhwc") or "")
    assert "unknown" in (space.prune({**params, "engine": 1}, POINTWISE, "f16", "nhwc") or "")


def test_order_keeps_the_cudnn_default_first_and_cublaslt_after_the_cudnn_head() -> None:
    request = TuneRequest(
        op="conv2d", dtype="f16", layout="nhwc", problem=POINTWISE, backend="cuda"
    )
    discovered = _discovered(POINTWISE)
    kept, pruned = candidate_params(request, "sm_90", "cuda", discovered)
    assert kept[0] == discovered[0] and kept[0]["library"] == "cudnn"  # the vendor default
    libraries = [p["library"] for p in kept]
    assert libraries[:8] == ["cudnn"] * 2 + ["cublaslt"] * 3 + ["cutlass"] * 3
    assert [p["algo"] for p in kept[2:5]] == [66, 66, 21]  # cuBLASLt's heuristic order
    assert not any(p["library"] == "cublaslt" for p, _ in pruned)


def test_a_3x3_layer_gets_no_cublaslt_candidates_even_if_given_some() -> None:
    problem = Conv2dProblem(1, 56, 56, 64, 64, 3, 3, pad=1)
    request = TuneRequest(op="conv2d", dtype="f16", layout="nhwc", problem=problem, backend="cuda")
    lt_params = CudaConv2dSpace().from_discovery(FOUND_LT, convlt.discovery())
    kept, pruned = candidate_params(request, "sm_90", "cuda", lt_params)
    assert not any(p["library"] == "cublaslt" for p in kept)
    assert sum(1 for p, _ in pruned if p["library"] == "cublaslt") == 3


def test_cublaslt_variant_renders_the_gemm_template_for_rcr_behind_the_conv_abi() -> None:
    space = CudaConv2dSpace()
    params = space.from_discovery(FOUND_LT, convlt.discovery())[2]
    variant = render_variant(space, params, "bf16", "nhwc", "sm_90", FLAGS, "nvcc test")
    source = variant.source
    assert space.template_for(params) == convlt.TEMPLATE
    assert "CUBLAS_OP_T" in source and "CUDA_R_16BF" in source  # B stored [n, k]
    assert "#define tunehub_run tunehub_gemm_run" in source
    assert "return tunehub_gemm_run(inputs, output, gemm, 3," in source
    assert "cublasLtMatmulAlgoInit" in source and "21, &p.algo" in source.replace("\n", " ")
    assert "tunehub_discover" not in source.split("#undef tunehub_discover")[1]
    discovery = render_variant(space, convlt.DISCOVERY_PARAMS, "f16", "nhwc", "sm_90", FLAGS,
                               "nvcc test")  # fmt: skip
    assert "return tunehub_gemm_discover(gemm, 3, requested, buf, buf_bytes);" in discovery.source
    assert variant.id != discovery.id


def test_uploaded_cublaslt_conv_variants_are_checked_by_form_and_shape() -> None:
    space = CudaConv2dSpace()
    params = space.from_discovery(FOUND_LT, convlt.discovery())[0]
    assert space.discovered_reason(params, "f16", "nhwc", "sm_90") is None
    assert "splitk" in (
        space.discovered_reason({**params, "splitk": 0}, "f16", "nhwc", "sm_90") or ""
    )
    name = space.name(params, "f16", "nhwc")
    args = ("conv2d", "cuda", "f16", "nhwc", "sm_90")
    assert variant_rejection(*args, POINTWISE, params, name) is None
    assert variant_rejection(*args, POINTWISE, params, name.replace("_lt_", "_")) is not None
    strided = Conv2dProblem(1, 56, 56, 256, 512, 1, 1, stride=2)
    assert "pruned" in (variant_rejection(*args, strided, params, name) or "")


def test_backend_runs_both_discovery_builds_of_a_pointwise_layer(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tuner.backends.cuda.cudnn_paths", lambda: None)
    monkeypatch.setattr("tuner.backends.cuda.cublas_paths", lambda: None)
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path)), nvcc="nvcc")
    backend._identity = "nvcc test"
    built: list[str] = []
    answers = {"conv2d_f16_nhwc_cudnn_discover": FOUND_DNN, "conv2d_f16_nhwc_lt_discover": FOUND_LT}
    artifacts: dict[str, str] = {}

    def build(variants):
        built.extend(v.params["family"] for v in variants)
        artifacts.update({f"/x/{v.name}.so": v.name for v in variants})
        return {v.id: CompileResult(v.id, True, f"/x/{v.name}.so", 0.0, True) for v in variants}

    def request(payload, timeout_s):
        return {"algos": answers[artifacts[payload["artifact"]]]}

    backend.build = build  # type: ignore[method-assign]
    backend.request = request  # type: ignore[method-assign]
    tune_request = TuneRequest(
        op="conv2d", dtype="f16", layout="nhwc", problem=POINTWISE, backend="cuda"
    )
    found = backend.discover(tune_request, "sm_90")
    assert built == [dnn.DISCOVERY_FAMILY, convlt.DISCOVERY_FAMILY]
    assert found == _discovered(POINTWISE)
    assert [p["library"] for p in found] == ["cudnn"] * 2 + ["cublaslt"] * 3
    assert backend.last_discovery == [*FOUND_DNN, *FOUND_LT]


def test_a_failed_cublaslt_discovery_keeps_the_cudnn_configs(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tuner.backends.cuda.cudnn_paths", lambda: None)
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path)), nvcc="nvcc")
    backend._identity = "nvcc test"

    def build(variants):
        ok = all(v.params["family"] == dnn.DISCOVERY_FAMILY for v in variants)
        return {v.id: CompileResult(v.id, ok, "/x/k.so" if ok else None, 0.0, ok) for v in variants}

    backend.build = build  # type: ignore[method-assign]
    backend.request = lambda payload, timeout_s: {"algos": FOUND_DNN}  # type: ignore[method-assign]
    monkeypatch.setattr("tuner.backends.cuda.cublas_paths", lambda: None)
    tune_request = TuneRequest(
        op="conv2d", dtype="f16", layout="nhwc", problem=POINTWISE, backend="cuda"
    )
    found = backend.discover(tune_request, "sm_90")
    assert [p["library"] for p in found] == ["cudnn", "cudnn"]
    assert backend.last_discovery == FOUND_DNN


def test_the_conv2d_toolchain_names_cublas_beside_cudnn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A conv2d answer may name a cuBLASLt algorithm, so cuBLAS's version keys conv2d results
    too (a GEMM's toolchain names only cuBLAS)."""
    import tuner.backends.cuda as cuda_backend
    from tuner.spaces.cuda_gemm import CudaGemmSpace

    monkeypatch.setattr(cuda_backend, "cublas_version", lambda: "13.1.0.3")
    monkeypatch.setattr(cuda_backend, "cudnn_version", lambda: "9.19.0.56")
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path)))
    monkeypatch.setattr(backend, "compiler_identity", lambda: "Cuda compilation tools, V13.0.88")
    conv = backend.toolchain(CudaConv2dSpace()).libraries
    gemm = backend.toolchain(CudaGemmSpace()).libraries
    assert conv["cudnn"] == "9.19.0.56" and conv["cublas"] == "13.1.0.3"
    assert gemm["cublas"] == "13.1.0.3" and "cudnn" not in gemm
