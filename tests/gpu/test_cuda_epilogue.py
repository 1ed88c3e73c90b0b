"""Fused epilogues on a real GPU (issue 26): one variant of each family, built and run through
the harness, which verifies it against torch (``tuner.backends.cuda_workload``: the product or
convolution in f32, then + bias and torch's relu, gelu or silu; gated_silu as
silu(gate half) * up half) before any timing counts. Run on the H200 host:

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_epilogue.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.backends.cuda import CudaBackend
from tuner.engine import tune
from tuner.problems import Conv2dProblem, GemmProblem, Problem
from tuner.registry import load_space
from tuner.types import Budget, EngineConfig, Outcome, TuneRequest

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    yield from module_cuda_backend(str(tmp_path_factory.mktemp("cache")))


def _request(problem: Problem, dtype: str, layout: str = "rcr") -> TuneRequest:
    op = "gemm" if isinstance(problem, GemmProblem) else "conv2d"
    return TuneRequest(op=op, dtype=dtype, layout=layout, problem=problem, backend="cuda")


def _verified(backend: CudaBackend, request: TuneRequest, params: dict[str, Any]) -> None:
    space = load_space(request.op, "cuda")
    assert space.prune(params, request.problem, request.dtype, request.layout) is None
    variant = backend.render(space, params, request.dtype, request.layout, backend.device().arch)
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact, built.log[-3000:]
    result = backend.run(variant, built.artifact, request)
    assert result.outcome is Outcome.OK, (variant.name, result.log[-2000:])
    assert result.timing is not None and result.timing.median_us > 0


def _pick(request: TuneRequest, family: str, **match: Any) -> dict[str, Any]:
    space = load_space("gemm", "cuda")
    epilogue = request.problem.dims().get("epilogue", "none")
    return next(
        p
        for p in space.enumerate(request.dtype, request.layout, "sm_90")
        if p["family"] == family
        and p.get("epilogue", "none") == epilogue
        and all(p.get(k) == v for k, v in match.items())
        and space.prune(p, request.problem, request.dtype, request.layout) is None
    )


@pytest.mark.parametrize("epilogue", ["bias", "bias_relu", "bias_gelu"])
def test_cublaslt_fused_algorithm_verifies(backend: CudaBackend, epilogue: str) -> None:
    request = _request(GemmProblem(128, 4096, 4096, epilogue=epilogue), "f16")
    found = backend.discover(request, backend.device().arch)
    assert found and all(p["epilogue"] == epilogue for p in found)
    _verified(backend, request, found[0])


def test_cutlass_sm90_evt_verifies(backend: CudaBackend) -> None:
    request = _request(GemmProblem(512, 4096, 4096, epilogue="bias_silu"), "bf16")
    params = _pick(request, "sm90", tile_m=128, tile_n=256, schedule="coop", scheduler="persistent")
    _verified(backend, request, params)


@pytest.mark.parametrize(
    ("family", "m", "epilogue", "match"),
    [
        ("skinny", 1, "bias_gelu", {"splits": 2}),
        ("skinny", 2, "gated_silu", {}),
        ("swapab", 8, "bias_relu", {"slices": 2}),
        ("swapab", 16, "gated_silu", {}),
    ],
)
def test_decode_kernels_fuse_in_registers(
    backend: CudaBackend, family: str, m: int, epilogue: str, match: dict[str, Any]
) -> None:
    n = 2 * 14336 if epilogue == "gated_silu" else 4096  # Mistral-7B's gate_up_proj
    request = _request(GemmProblem(m, n, 4096, epilogue=epilogue), "bf16")
    _verified(backend, request, _pick(request, family, **match))


def test_cudnn_fused_graph_verifies(backend: CudaBackend) -> None:
    problem = Conv2dProblem(32, 56, 56, 64, 64, 3, 3, 1, 1, 1, epilogue="bias_relu")
    request = _request(problem, "f16", "nhwc")
    found = backend.discover(request, backend.device().arch)
    assert found, "cuDNN found no engine config for conv + bias + relu"
    assert all(p["epilogue"] == "bias_relu" for p in found if p["library"] == "cudnn")
    _verified(backend, request, found[0])


def test_a_fused_gemm_tunes_and_its_winner_says_what_it_fused(
    backend: CudaBackend, tmp_path_factory: pytest.TempPathFactory
) -> None:
    request = TuneRequest(
        op="gemm",
        dtype="f16",
        layout="rcr",
        problem=GemmProblem(8, 4096, 4096, epilogue="bias_silu"),
        backend="cuda",
        budget=Budget(max_variants=6),
    )
    config = EngineConfig(cache_dir=str(tmp_path_factory.mktemp("tune")), compile_workers=4)
    result = tune(request, backend, config)
    assert result.winner is not None
    assert result.winner.params["epilogue"] == "bias_silu"
    assert result.winner.params["library"] in ("cutlass", "tunehub")  # cuBLASLt has no SiLU
