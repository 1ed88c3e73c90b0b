"""Compile-check swap-AB GEMM variants (f16 and bf16 MMAs, sm_90a and sm_80) with the local
nvcc (no GPU needed) and call the host-side ABI functions of the built shared objects."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from tuner.backends.cuda import CudaBackend
from tuner.render import render_variant
from tuner.spaces.cuda_gemm import CudaGemmSpace
from tuner.types import EngineConfig

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH"),
]

#: (dtype, arch, params that pick one variant): the largest register footprints of the space,
#: shared-memory slices and split-K
CASES = [
    ("f16", "sm_90", {"m_tile": 64, "w_tiles": 2, "unroll": 2, "slices": 2, "splits": 2}),
    ("bf16", "sm_90", {"m_tile": 16, "w_tiles": 1, "unroll": 8, "slices": 4, "splits": 1}),
    ("bf16", "sm_80", {"m_tile": 8, "w_tiles": 2, "unroll": 4, "slices": 1, "splits": 4}),
]


def _dims(*values: int) -> tuple[ctypes.Array, int]:
    return (ctypes.c_int64 * len(values))(*values), len(values)


def _params(dtype: str, arch: str, overrides: dict) -> dict:
    return next(
        p
        for p in CudaGemmSpace().enumerate(dtype, "rcr", arch)
        if p["family"] == "swapab" and all(p[k] == v for k, v in overrides.items())
    )


def test_swapab_variants_compile_and_export_the_abi(tmp_path: Path) -> None:
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path), compile_workers=2))
    variants = [
        render_variant(
            CudaGemmSpace(),
            _params(dtype, arch, overrides),
            dtype,
            "rcr",
            arch,
            backend.base_flags(arch),
            backend.compiler_identity(),
        )
        for dtype, arch, overrides in CASES
    ]
    builds = backend.build(variants)
    for variant in variants:
        built = builds[variant.id]
        assert built.ok, built.log
        lib = ctypes.CDLL(str(built.artifact))
        lib.tunehub_describe.restype = ctypes.c_char_p
        assert lib.tunehub_describe().decode().startswith(variant.name + " swapab ")
        lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
        assert lib.tunehub_can_run(*_dims(16, 4099, 3592)) == 0  # odd n, k a multiple of 8
        assert lib.tunehub_can_run(*_dims(16, 4096, 4100)) == 2  # TUNEHUB_MISALIGNED
        assert lib.tunehub_can_run(*_dims(16, 4096)) == 1  # TUNEHUB_BAD_DIMS
        splits = variant.params["splits"]
        expected = 4 * splits * 16 * 4099 if splits > 1 else 0
        assert lib.tunehub_workspace_bytes(*_dims(16, 4099, 3592)) == expected
