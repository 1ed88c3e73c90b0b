"""nvcc builds of the grouped_gemm templates on sm_90a (one instance per template: the CUTLASS
pointer-array grouped kernel and our decode kernel, each for bf16/f16 and for e4m3), and the
host side of their ABI: the dims with the tokens per expert, the checks and refusals, the
workspace (no GPU)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.abi import abi_dims
from tuner.backends.cuda import CudaBackend
from tuner.cutlass_paths import cutlass_include_dirs
from tuner.problems import GroupedGemmProblem
from tuner.spaces.cuda_grouped_gemm import CudaGroupedGemmSpace
from tuner.types import EngineConfig

pytestmark = [pytest.mark.nvcc]

SPACE = CudaGroupedGemmSpace()
PROBLEM = GroupedGemmProblem(experts=4, n=64, k=64, tokens=16, skew=2)


def _dims(*values: int) -> tuple[ctypes.Array, int]:
    return (ctypes.c_int64 * len(values))(*values), len(values)


def _first(family: str, dtype: str) -> dict:
    return next(p for p in SPACE.enumerate(dtype, "rcr", "sm_90") if p["family"] == family)


@pytest.mark.parametrize(
    ("family", "dtype"), [("decode", "f16"), ("sm90", "bf16"), ("decode", "e4m3"), ("sm90", "e4m3")]
)
def test_each_grouped_template_compiles_and_checks_its_dims(
    tmp_path: Path, family: str, dtype: str
) -> None:
    require_toolchain(cutlass_include_dirs)
    config = EngineConfig(cache_dir=str(tmp_path), compile_workers=1, compile_timeout_s=900)
    backend = CudaBackend(config)
    variant = backend.render(SPACE, _first(family, dtype), dtype, "rcr", "sm_90")
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log
    lib = ctypes.CDLL(str(built.artifact))
    lib.tunehub_describe.restype = ctypes.c_char_p
    assert lib.tunehub_describe().decode().startswith(variant.name + " ")
    lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
    dims = abi_dims(PROBLEM)
    assert dims == [4, 64, 64, 16, 2, 8, 3, 3, 2]
    assert lib.tunehub_can_run(*_dims(*dims)) == 0
    assert lib.tunehub_can_run(*_dims(4, 64, 64, 16, 2, 0, 0, 9, 0)) == 0  # empty experts
    assert lib.tunehub_can_run(*_dims(*dims[:-1])) == 1  # one count missing
    assert lib.tunehub_can_run(*_dims(4, 64, 64, 16, 2, 8, 3, 3, 3)) == 1  # 17 rows > tokens
    assert lib.tunehub_can_run(*_dims(4, 64, 64, 16, 2, 8, -1, 3, 2)) == 1
    assert lib.tunehub_can_run(*_dims(0, 64, 64, 16, 1)) == 1
    assert lib.tunehub_can_run(*_dims(257, 64, 64, 16, 1, *[0] * 257)) == 1
    assert lib.tunehub_can_run(*_dims(4, 60, 64, 16, 2, 8, 3, 3, 2)) == 2  # TUNEHUB_MISALIGNED
    assert lib.tunehub_can_run(*_dims(4, 64, 68, 16, 2, 8, 3, 3, 2)) == 2
    # FP8 rows are whole 16-byte vectors: n = 72 is a multiple of 8, not of 16
    assert lib.tunehub_can_run(*_dims(4, 72, 64, 16, 2, 8, 3, 3, 2)) == (
        2 if dtype == "e4m3" else 0
    )
    workspace = lib.tunehub_workspace_bytes(*_dims(*dims))
    assert workspace == 0 if family == "decode" else workspace > 0
    run = lib.tunehub_run
    run.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_void_p,
    ]
    # e4m3 also takes the two scale arrays (tuner.abi)
    pointers = (0x10000, 0x20000, 0x40000, 0x50000) if dtype == "e4m3" else (0x10000, 0x20000)
    inputs = (ctypes.c_void_p * len(pointers))(*pointers)
    bad, n_bad = _dims(*dims[:-1])
    assert run(inputs, 0x30000, bad, n_bad, None, 0, None) == 1  # refused before any launch
    good, n_good = _dims(*dims)
    if family == "decode":
        odd = (ctypes.c_void_p * len(pointers))(0x10002, *pointers[1:])
        assert run(odd, 0x30000, good, n_good, None, 0, None) == 2  # A off 16 bytes
    else:
        assert run(inputs, 0x30000, good, n_good, None, 0, None) == 6  # TUNEHUB_WORKSPACE
