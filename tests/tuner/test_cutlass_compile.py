"""Compile-check CUTLASS variants with the local nvcc (no GPU): three gemm (one split-K), one
conv2d.

Each build takes 25-70 s on two cores, so this file keeps to four, compiled two at a time.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.compile import CompileCache, build_variants
from tuner.cutlass_paths import cutlass_include_dirs
from tuner.render import render_variant
from tuner.spaces.cuda_conv2d import CudaConv2dSpace
from tuner.spaces.cuda_gemm import CudaGemmSpace

pytestmark = pytest.mark.nvcc

_COMMON = ("-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr")
_ARCH_FLAGS = {
    "sm_90": ("-gencode=arch=compute_90a,code=sm_90a",),
    "sm_80": ("-gencode=arch=compute_80,code=sm_80",),
}


def _include_dirs() -> tuple[str, ...]:
    return require_toolchain(cutlass_include_dirs)


def _first(space, dtype: str, layout: str, arch: str, name: str):
    for params in space.enumerate(dtype, layout, arch):
        if space.name(params, dtype, layout) == name:
            return render_variant(
                space, params, dtype, layout, arch, _COMMON + _ARCH_FLAGS[arch], "nvcc (test)"
            )
    raise AssertionError(f"{name} is not in the space")


def test_three_gemm_and_one_conv_variant_compile(tmp_path: Path) -> None:
    includes = _include_dirs()
    variants = [
        _first(CudaGemmSpace(), "f16", "rcr", "sm_90", "gemm_f16_rcr_128x256x64_c2x1_coop"),
        _first(CudaGemmSpace(), "f16", "rcr", "sm_90", "gemm_f16_rcr_128x128x64_c1x1_coop_splitk4"),
        _first(CudaGemmSpace(), "bf16", "rrr", "sm_80", "gemm_bf16_rrr_128x128x32_w64x64_s4"),
        _first(
            CudaConv2dSpace(), "f16", "nhwc", "sm_90", "conv2d_f16_nhwc_128x128x64_w64x64_s3_opt_a8"
        ),
    ]

    def argv(src: Path, out: Path, flags) -> list[str]:
        return [
            "nvcc",
            *flags,
            *(f"-I{d}" for d in includes),
            "-shared",
            "-Xcompiler",
            "-fPIC",
            str(src),
            "-o",
            str(out),
        ]

    cache = CompileCache(tmp_path / "cache", artifact_name="kernel.so")
    results = build_variants(
        cache, variants, argv, source_name="kernel.cu", workers=2, timeout_s=600
    )
    for variant in variants:
        result = results[variant.id]
        assert result.ok, f"{variant.name} failed to compile:\n{result.log[-4000:]}"
        assert result.artifact is not None
        library = ctypes.CDLL(result.artifact)  # loads without a GPU: nothing runs at load
        for symbol in (
            "tunehub_can_run",
            "tunehub_workspace_bytes",
            "tunehub_run",
            "tunehub_describe",
        ):
            assert hasattr(library, symbol), (variant.name, symbol)
        library.tunehub_describe.restype = ctypes.c_char_p
        description = library.tunehub_describe().decode()
        assert variant.name in description
        assert ("splits=4" in description) == variant.name.endswith("_splitk4")
