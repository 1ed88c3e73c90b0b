"""Compile-check the conv2d cuBLASLt wrapper (1x1 conv2d as the GEMM it is) with the local nvcc
(no GPU), through the CUDA backend's own build (cuBLAS's headers, linked to cuBLASLt)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend
from tuner.problems import Conv2dProblem
from tuner.spaces import cuda_conv2d_cublaslt as convlt
from tuner.spaces.cuda_conv2d import CudaConv2dSpace
from tuner.types import EngineConfig
from tuner.vendor_paths import cublas_paths

pytestmark = pytest.mark.nvcc

#: a cuBLASLt discovery answer's item (attributes of one algorithm)
ALGO = {"algo": 66, "tile": 18, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 0,
        "custom": 0, "inner_shape": 0, "cluster_shape": 2}  # fmt: skip
POINTWISE = Conv2dProblem(8, 56, 56, 96, 384, 1, 1)


def test_conv2d_cublaslt_discovery_and_algorithm_variants_compile(tmp_path: Path) -> None:
    require_toolchain(cublas_paths)
    space = CudaConv2dSpace()
    backend = CudaBackend(
        EngineConfig(cache_dir=str(tmp_path), compile_workers=2, compile_timeout_s=600)
    )
    discovery = space.discoveries(POINTWISE)[1]
    algo = space.from_discovery([ALGO], discovery)[0]
    wanted = [(discovery.params, "f16"), (algo, "f16"), (algo, "bf16")]
    variants = [backend.render(space, p, dtype, "nhwc", "sm_90") for p, dtype in wanted]
    assert [v.name for v in variants] == [
        "conv2d_f16_nhwc_lt_discover",
        "conv2d_f16_nhwc_lt_a66_t18_s35_k1_r0_w0_c0_i0_cl2",
        "conv2d_bf16_nhwc_lt_a66_t18_s35_k1_r0_w0_c0_i0_cl2",
    ]
    assert "CUBLAS_OP_T" in variants[1].source  # B (the KRSC filter) stored [n, k]: rcr
    assert "CUDA_R_16BF" in variants[2].source
    results = backend.build(variants)
    for variant in variants:
        result = results[variant.id]
        assert result.ok and result.artifact, f"{variant.name}:\n{result.log[-4000:]}"
        assert "-l:libcublasLt" in result.log  # linked, not left to chance
    try:
        discover = ctypes.CDLL(str(results[variants[0].id].artifact))
        run = ctypes.CDLL(str(results[variants[1].id].artifact))
    except OSError as exc:  # e.g. no CUDA driver library on this machine
        pytest.skip(f"cannot load the build here: {exc}")
    assert hasattr(discover, "tunehub_discover") and not hasattr(run, "tunehub_discover")
    run.tunehub_can_run.restype = ctypes.c_int
    # the conv2d ABI refuses every conv2d that is not a GEMM as stored, before cuBLASLt
    for dims in ([8, 56, 56, 96, 384, 3, 3, 1, 1, 1], [8, 56, 56, 96, 384, 1, 1, 2, 0, 1], [1, 2]):
        array = (ctypes.c_int64 * len(dims))(*dims)
        assert run.tunehub_can_run(array, len(dims)) == 1  # TUNEHUB_BAD_DIMS
    assert convlt.gemm_problem(POINTWISE).key() == "m=25088,n=384,k=96"
