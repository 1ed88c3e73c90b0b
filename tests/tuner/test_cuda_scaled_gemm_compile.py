"""nvcc builds of one instance of every scaled_gemm template for sm_90a (CUTLASS per-tensor and
block-scaled FP8, the cuBLASLt FP8 run and discovery builds, the FP8 decode kernel), and the host
side of their ABI: the 5 dims (m, n, k, out code, scaling code), refusals without a GPU."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend
from tuner.spaces.cuda_scaled_gemm import CudaScaledGemmSpace
from tuner.types import EngineConfig

pytestmark = [pytest.mark.nvcc]

SPACE = CudaScaledGemmSpace()
SM90 = {
    "library": "cutlass",
    "family": "sm90_fp8",
    "tile_m": 128,
    "tile_n": 128,
    "tile_k": 128,
    "cluster_m": 1,
    "cluster_n": 1,
    "schedule": "coop",
    "raster": "auto",
    "swizzle": 1,
    "scheduler": "persistent",
}
#: the CUTLASS builds take 40-120 s each on a 2-core CI machine: two cover both scalings, both
#: accumulation modes and both tile schedulers
CASES = [
    {**SM90, "out_dtype": "f16", "scaling": "block", "accum": "promoted"},
    {
        **SM90,
        "out_dtype": "bf16",
        "scaling": "per_tensor",
        "accum": "fast",
        "tile_n": 256,
        "scheduler": "streamk",
    },  # fmt: skip
    {
        "library": "tunehub",
        "family": "decode_fp8",
        "out_dtype": "bf16",
        "scaling": "block",
        "m_tile": 8,
        "rows": 2,
        "warps": 4,
        "unroll": 4,
        "splits": 2,
    },
    {
        "library": "cublaslt",
        "family": "cublaslt_fp8",
        "out_dtype": "bf16",
        "scaling": "per_tensor",
        "algo": 66,
        "tile": 18,
        "stages": 35,
        "splitk": 1,
        "reduction": 0,
        "swizzle": 0,
        "custom": 0,
        "inner_shape": 0,
        "cluster_shape": 2,
        "fast_accum": 1,
    },
    {"family": "cublaslt_fp8_discover", "out_dtype": "f16", "scaling": "block"},
    {
        "library": "tunehub",
        "family": "swapab_fp8",
        "out_dtype": "bf16",
        "scaling": "block",
        "m_tiles": 2,
        "w_tiles": 2,
        "warps": 8,
        "unroll": 4,
    },
    {
        "library": "tunehub",
        "family": "swapab_fp8",
        "out_dtype": "f16",
        "scaling": "per_tensor",
        "m_tiles": 4,
        "w_tiles": 1,
        "warps": 4,
        "unroll": 2,
    },
]
CODES = {"bf16": 0, "f16": 1, "per_tensor": 0, "block": 1}


def _dims(*values: int) -> tuple[ctypes.Array, int]:
    return (ctypes.c_int64 * len(values))(*values), len(values)


@pytest.mark.parametrize(
    "params", CASES, ids=lambda p: f"{p['family']}-{p['scaling']}-{p.get('scheduler', '')}"
)
def test_each_template_compiles_for_sm90a(tmp_path: Path, params: dict) -> None:
    require_toolchain(lambda: None)
    config = EngineConfig(cache_dir=str(tmp_path), compile_workers=1, compile_timeout_s=900)
    backend = CudaBackend(config)
    variants = [backend.render(SPACE, params, "e4m3", "rcr", "sm_90")]
    builds = backend.build(variants)
    for variant in variants:
        built = builds[variant.id]
        assert built.ok, f"{variant.name}: {built.log[-4000:]}"
        lib = ctypes.CDLL(str(built.artifact))
        lib.tunehub_describe.restype = ctypes.c_char_p
        assert lib.tunehub_describe().decode().startswith(variant.name + " ")
        params = variant.params
        out, scaling = CODES[params["out_dtype"]], CODES[params["scaling"]]
        if params["family"] == "swapab_fp8":
            rows = 8 * params["m_tiles"]
            assert lib.tunehub_can_run(*_dims(rows, 4096, 4096, out, scaling)) == 0
            assert lib.tunehub_can_run(*_dims(rows + 1, 4096, 4096, out, scaling)) == 3
            assert lib.tunehub_can_run(*_dims(rows, 4096, 4096 + 16, out, scaling)) == 2
        if params["family"] == "decode_fp8":
            assert lib.tunehub_can_run(*_dims(8, 4096, 4096, out, scaling)) == 0
            assert lib.tunehub_can_run(*_dims(9, 4096, 4096, out, scaling)) == 3  # m > m tile
            assert lib.tunehub_can_run(*_dims(8, 4096, 4096 + 16, out, scaling)) == 2
            lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
            assert (
                lib.tunehub_workspace_bytes(*_dims(8, 4096, 4096, out, scaling)) == 2 * 8 * 4096 * 4
            )
        if params["family"] != "cublaslt_fp8_discover":  # CUTLASS and cuBLASLt need the device
            assert lib.tunehub_can_run(*_dims(8, 4096, 4096)) == 1  # the two codes missing
            assert lib.tunehub_can_run(*_dims(8, 4096, 4096, 1 - out, scaling)) == 1
            assert lib.tunehub_can_run(*_dims(8, 4096, 4096, out, 1 - scaling)) == 1
        else:
            assert hasattr(lib, "tunehub_discover")
