"""Compile-check one CUTLASS 3.x sm90 conv2d variant with the local nvcc (no GPU), through the
CUDA backend's own build (about 75 s on two cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend
from tuner.cutlass_paths import cutlass_include_dirs
from tuner.spaces.cuda_conv2d import CudaConv2dSpace
from tuner.types import EngineConfig

pytestmark = pytest.mark.nvcc


def test_an_sm90_conv_variant_compiles(tmp_path: Path) -> None:
    require_toolchain(cutlass_include_dirs)
    space = CudaConv2dSpace()
    params = next(
        p
        for p in space.enumerate("f16", "nhwc", "sm_90")
        if p["family"] == "sm90" and (p["tile_m"], p["tile_n"], p["cluster_m"]) == (128, 64, 2)
    )
    backend = CudaBackend(
        EngineConfig(cache_dir=str(tmp_path), compile_workers=1, compile_timeout_s=900)
    )
    variant = backend.render(space, params, "f16", "nhwc", "sm_90")  # fmt: skip
    result = backend.build([variant])[variant.id]
    assert result.ok and result.artifact, f"{variant.name}:\n{result.log[-4000:]}"
