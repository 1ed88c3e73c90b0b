"""Compile every rms_norm variant class (group, warp and block per row in registers; warp and
block per row in two passes) with the local nvcc for f16, bf16 and f32 on sm_90a and sm_80, and
call the host side of the ABI: dims and eps checks, capacity refusals, pointer checks (no GPU)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.abi import MAX_EPS_BITS, eps_bits
from tuner.backends.cuda import CudaBackend
from tuner.spaces.cuda_rms_norm import CudaRmsNormSpace, col_options
from tuner.spaces.cuda_rows import lanes_per_row
from tuner.types import EngineConfig, Variant

pytestmark = [pytest.mark.nvcc]

SPACE = CudaRmsNormSpace()
EPS = eps_bits(1e-6)
#: one variant per class; packs vary so that every width is built somewhere (the widest pack of
#: a dtype is 16 bytes: 8 halves, 4 floats)
CLASSES = [
    {"pack": 16, "strategy": "block", "group": 256, "threads": 256, "mode": "reg"},
    {"pack": 16, "strategy": "warp", "group": 32, "threads": 128, "mode": "reg"},
    {"pack": 2, "strategy": "group", "group": 4, "threads": 256, "mode": "reg"},
    {"pack": 16, "strategy": "block", "group": 1024, "threads": 1024, "mode": "2pass"},
    {"pack": 1, "strategy": "warp", "group": 32, "threads": 512, "mode": "2pass"},
]
ELEMENT = {"f16": 2, "bf16": 2, "f32": 4}


def _params(template: dict, dtype: str) -> dict:
    pack = template["pack"] // ELEMENT[dtype] if template["pack"] == 16 else template["pack"]
    return {**template, "pack": pack}


def _dims(*values: int) -> tuple[ctypes.Array, int]:
    return (ctypes.c_int64 * len(values))(*values), len(values)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_every_class_compiles_and_checks_its_dims(tmp_path: Path, arch: str) -> None:
    require_toolchain(lambda: None)
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path), compile_workers=2))
    variants: list[tuple[Variant, str]] = []
    for dtype in ("f16", "bf16", "f32"):
        for template in CLASSES:
            params = _params(template, dtype)
            variants.append((backend.render(SPACE, params, dtype, "row", arch), dtype))
    builds = backend.build([v for v, _ in variants])
    for variant, dtype in variants:
        built = builds[variant.id]
        assert built.ok, built.log
        _check_library(ctypes.CDLL(str(built.artifact)), variant, dtype)


def _check_library(lib: ctypes.CDLL, variant: Variant, dtype: str) -> None:
    params = variant.params
    lib.tunehub_describe.restype = ctypes.c_char_p
    assert lib.tunehub_describe().decode().startswith(variant.name + " ")
    lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
    pack, lanes = int(params["pack"]), lanes_per_row(params)
    k = lanes * pack
    assert lib.tunehub_can_run(*_dims(64, k, EPS)) == 0
    assert lib.tunehub_can_run(*_dims(64, k + 1, EPS)) == 0  # odd k: scalar head and tail
    assert lib.tunehub_can_run(*_dims(3, 1, 0)) == 0  # eps 0 and a one-element row
    assert lib.tunehub_workspace_bytes(*_dims(64, k, EPS)) == 0
    assert lib.tunehub_can_run(*_dims(64, k)) == 1  # eps bits missing
    assert lib.tunehub_can_run(*_dims(0, k, EPS)) == 1
    for bits in (-1, MAX_EPS_BITS, 0x7FC00000, 0x80000000 | EPS):  # < 0, inf, NaN, -eps
        assert lib.tunehub_can_run(*_dims(64, k, bits)) == 1, hex(bits)
    if params["mode"] == "reg":
        most = lanes * pack * col_options(params, dtype)[-1]
        assert lib.tunehub_can_run(*_dims(2, most, EPS)) == 0
        assert lib.tunehub_can_run(*_dims(2, most + pack, EPS)) == 3  # TUNEHUB_UNSUPPORTED
    else:
        assert lib.tunehub_can_run(*_dims(2, 1 << 24, EPS)) == 0
    # tunehub_run refuses before it launches: bad dims, then pointers off the element size
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
    inputs = (ctypes.c_void_p * 2)(0x10000, 0x20000)
    dims, n = _dims(64, k, EPS)
    assert run(inputs, 0x30000, *_dims(64, k, -1), None, 0, None) == 1
    odd = (ctypes.c_void_p * 2)(0x10001, 0x20000)
    assert run(odd, 0x30000, dims, n, None, 0, None) == 2  # TUNEHUB_MISALIGNED
    assert run(inputs, 0x30001, dims, n, None, 0, None) == 2
