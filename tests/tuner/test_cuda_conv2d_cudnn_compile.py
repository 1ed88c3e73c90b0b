"""Compile-check the cuDNN conv2d template with the local nvcc (no GPU), through the CUDA
backend's own build (which adds cuDNN's headers and links it for that family)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend
from tuner.spaces.cuda_conv2d import CudaConv2dSpace
from tuner.types import EngineConfig
from tuner.vendor_paths import cudnn_paths

pytestmark = pytest.mark.nvcc

#: a discovery answer's item: engine global index and knob choices (type -> value)
ENGINE_CONFIG = {"engine": 41, "knobs": {"2": 7, "14": 4, "27": 1}, "source": "heur_a"}


def test_cudnn_discovery_and_engine_variants_compile(tmp_path: Path) -> None:
    require_toolchain(cudnn_paths)
    space = CudaConv2dSpace()
    backend = CudaBackend(
        EngineConfig(cache_dir=str(tmp_path), compile_workers=2, compile_timeout_s=600)
    )
    no_knobs = {"engine": 0, "knobs": {}}
    wanted = [
        (space.discovery_params, "f16"),
        (space.from_discovery([ENGINE_CONFIG])[0], "f16"),
        (space.from_discovery([no_knobs])[0], "bf16"),
    ]
    variants = [backend.render(space, p, dtype, "nhwc", "sm_90") for p, dtype in wanted]
    assert "{ 2, 7 }, { 14, 4 }, { 27, 1 }" in variants[1].source
    results = backend.build(variants)
    for variant in variants:
        result = results[variant.id]
        assert result.ok and result.artifact, f"{variant.name}:\n{result.log[-4000:]}"
        assert "-l:libcudnn.so" in result.log  # linked, not left to chance
    try:
        lib = ctypes.CDLL(str(results[variants[0].id].artifact))
    except OSError as exc:  # e.g. no CUDA driver library on this machine
        pytest.skip(f"cannot load the build here: {exc}")
    assert hasattr(lib, "tunehub_discover") and hasattr(lib, "tunehub_run")
