"""Compile-check the cuBLASLt and skinny GEMM templates with the local nvcc (no GPU), through
the CUDA backend's own build (which adds cuBLASLt's headers and links it for that family)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend
from tuner.spaces.cuda_gemm import CudaGemmSpace
from tuner.types import EngineConfig
from tuner.vendor_paths import cublas_paths

pytestmark = pytest.mark.nvcc

LT_ALGO = {"algo": 66, "tile": 18, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 0,
           "custom": 0, "inner_shape": 0, "cluster_shape": 2}  # fmt: skip


def test_cublaslt_discovery_variant_and_skinny_compile(tmp_path: Path) -> None:
    require_toolchain(cublas_paths)
    space = CudaGemmSpace()
    skinny = next(
        p
        for p in space.enumerate("bf16", "rcr", "sm_90")
        if p["family"] == "skinny" and p["splits"] == 2 and p["m_tile"] == 4
    )
    backend = CudaBackend(
        EngineConfig(cache_dir=str(tmp_path), compile_workers=2, compile_timeout_s=600)
    )
    wanted = [
        (space.discovery_params, "f16", "rcr"),
        (space.from_discovery([LT_ALGO])[0], "bf16", "rrr"),
        (skinny, "bf16", "rcr"),
    ]
    variants = [backend.render(space, p, dtype, layout, "sm_90") for p, dtype, layout in wanted]
    results = backend.build(variants)
    for variant in variants:
        result = results[variant.id]
        assert result.ok and result.artifact, f"{variant.name}:\n{result.log[-4000:]}"
    discovery = results[variants[0].id].artifact
    assert "-l:libcublasLt.so" in results[variants[1].id].log  # linked, not left to chance
    assert "cublasLt" not in results[variants[2].id].log  # the skinny kernel needs no vendor lib
    try:
        lib = ctypes.CDLL(str(discovery))
    except OSError as exc:  # e.g. no CUDA driver library on this machine
        pytest.skip(f"cannot load the build here: {exc}")
    assert hasattr(lib, "tunehub_discover") and hasattr(lib, "tunehub_run")
