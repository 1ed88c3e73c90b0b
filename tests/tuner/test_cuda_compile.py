"""Compile-check a few CUDA variants with the local nvcc (no GPU needed) and call the host-side
ABI functions of the built shared objects."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from tuner.backends.cuda import CudaBackend
from tuner.spaces.cuda_reduce import CudaReduceSpace
from tuner.spaces.cuda_softmax import CudaSoftmaxSpace
from tuner.types import EngineConfig

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH"),
]

CASES = [
    (CudaReduceSpace(), "f16", {"pack": 8, "strategy": "group", "group": 4, "threads": 256}),
    (CudaReduceSpace(), "f32", {"pack": 4, "strategy": "block", "group": 1024, "threads": 1024}),
    (
        CudaSoftmaxSpace(),
        "bf16",
        {"pack": 8, "strategy": "warp", "group": 32, "threads": 128, "mode": "reg"},
    ),
    (
        CudaSoftmaxSpace(),
        "f16",
        {"pack": 2, "strategy": "block", "group": 256, "threads": 256, "mode": "2pass"},
    ),
    (
        CudaSoftmaxSpace(),
        "f16",
        {"pack": 8, "strategy": "block", "group": 1024, "threads": 1024, "mode": "smem"},
    ),
    # split rows: a cluster of CTAs per row, combined through distributed shared memory
    (CudaReduceSpace(), "bf16", {"pack": 8, "strategy": "cluster", "group": 8, "threads": 256}),
    (
        CudaSoftmaxSpace(),
        "f16",
        {"pack": 8, "strategy": "cluster", "group": 4, "threads": 512, "mode": "reg"},
    ),
    # short rows streamed on a persistent grid; rows in two pipelined shared-memory buffers
    (
        CudaSoftmaxSpace(),
        "bf16",
        {"pack": 8, "strategy": "warp", "group": 32, "threads": 128, "mode": "stream"},
    ),
    (
        CudaSoftmaxSpace(),
        "f32",
        {"pack": 4, "strategy": "block", "group": 512, "threads": 512, "mode": "pipe"},
    ),
]


def _dims(*values: int) -> tuple[ctypes.Array, int]:
    return (ctypes.c_int64 * len(values))(*values), len(values)


def test_variants_compile_and_export_the_abi(tmp_path: Path) -> None:
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path), compile_workers=2))
    variants = [
        backend.render(space, params, dtype, "row", "sm_90") for space, dtype, params in CASES
    ]
    builds = backend.build(variants)
    for variant in variants:
        built = builds[variant.id]
        assert built.ok, built.log
        lib = ctypes.CDLL(str(built.artifact))
        lib.tunehub_describe.restype = ctypes.c_char_p
        assert lib.tunehub_describe().decode().startswith(variant.name + " ")
        lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
        pack = variant.params["pack"]
        if variant.op == "reduce":
            assert lib.tunehub_can_run(*_dims(64, 8 * pack, 0)) == 0
            assert lib.tunehub_can_run(*_dims(64, 8 * pack, 7)) == 1  # unknown kind
            assert lib.tunehub_workspace_bytes(*_dims(64, 8 * pack, 0)) == 0
        else:
            assert lib.tunehub_can_run(*_dims(64, 8 * pack)) == 0
            assert lib.tunehub_can_run(*_dims(64, 8 * pack, 1)) == 1  # wrong dim count
        # any row length runs: odd k (misaligned row starts) takes the scalar head and tail
        odd = (64, 8 * pack + 1, 0) if variant.op == "reduce" else (64, 8 * pack + 1)
        assert lib.tunehub_can_run(*_dims(*odd)) == 0
        if variant.params.get("mode") == "smem":
            assert lib.tunehub_can_run(*_dims(64, 50257)) == 0
            assert lib.tunehub_can_run(*_dims(64, 151936)) == 3  # TUNEHUB_UNSUPPORTED
        if variant.params.get("mode") == "pipe":
            # two f32 rows of 28,000 fit in 227 KB of shared memory, two of 30,000 do not
            assert lib.tunehub_can_run(*_dims(64, 28000)) == 0
            assert lib.tunehub_can_run(*_dims(64, 30000)) == 3
        if variant.params["strategy"] == "cluster" and variant.op == "softmax":
            # 4 CTAs x 512 threads x 8 packs of 8 in registers: 131072 elements at most
            assert lib.tunehub_can_run(*_dims(2, 131071)) == 0
            assert lib.tunehub_can_run(*_dims(2, 131072 + 8 * 4 * 512)) == 3
    again = backend.build(variants)
    assert all(r.cached for r in again.values())


def test_register_softmax_refuses_rows_it_cannot_hold(tmp_path: Path) -> None:
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path)))
    space, dtype, params = CASES[2]
    variant = backend.render(space, params, dtype, "row", "sm_90")
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log
    lib = ctypes.CDLL(str(built.artifact))
    assert lib.tunehub_can_run(*_dims(4, 4096)) == 0
    assert lib.tunehub_can_run(*_dims(4, 8192)) == 3  # TUNEHUB_UNSUPPORTED
