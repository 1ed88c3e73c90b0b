"""Softmax variants for long rows (no GPU): the split row in shared memory ("smem" mode with the
cluster strategy) and the grid split for few rows ("grid": a cooperative launch over every SM):
which variants exist, what they hold, where the order puts them, and that they build."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend
from tuner.problems import SoftmaxProblem
from tuner.spaces.cuda_rows import FEW_ROWS
from tuner.spaces.cuda_softmax import (
    GRID_THREADS,
    SPLIT_SMEM_THREADS,
    CudaSoftmaxSpace,
    smem_bytes,
)
from tuner.types import EngineConfig

SPACE = CudaSoftmaxSpace()


def _split_smem(dtype: str, arch: str = "sm_90") -> list[dict]:
    return [
        p
        for p in SPACE.enumerate(dtype, "row", arch)
        if p["strategy"] == "cluster" and p["mode"] == "smem"
    ]


def test_split_rows_in_shared_memory_take_16_byte_packs_and_small_ctas() -> None:
    for dtype, pack in (("f16", 8), ("bf16", 8), ("f32", 4)):
        variants = _split_smem(dtype)
        assert {p["pack"] for p in variants} == {pack}
        assert {p["threads"] for p in variants} == set(SPLIT_SMEM_THREADS)
        assert {p["group"] for p in variants} == {2, 4, 8}
    assert not _split_smem("f16", "sm_80")  # clusters need sm_90
    names = {SPACE.name(p, "f16", "row") for p in _split_smem("f16")}
    assert "softmax_f16_p8_c4_t256_smem" in names


def test_each_cta_holds_its_share_of_the_row() -> None:
    c4 = {"pack": 8, "strategy": "cluster", "group": 4, "threads": 256, "mode": "smem"}
    # a quarter of a 151,936-element f16 row: 4,748 packs of 16 bytes
    assert smem_bytes(151936, 8, "f16", 4) == 4748 * 16
    assert SPACE.prune(c4, SoftmaxProblem(m=1766, k=151936), "f16", "row") is None
    # a block per row cannot hold that row; 4 CTAs hold up to ~465k f16 elements
    block = {"pack": 8, "strategy": "block", "group": 256, "threads": 256, "mode": "smem"}
    assert "shared memory" in (
        SPACE.prune(block, SoftmaxProblem(m=4, k=151936), "f16", "row") or ""
    )
    assert "shared memory" in (SPACE.prune(c4, SoftmaxProblem(m=4, k=480000), "f16", "row") or "")


def _order(m: int, k: int) -> list[str]:
    problem = SoftmaxProblem(m=m, k=k)
    kept = [
        p
        for p in SPACE.enumerate("f16", "row", "sm_90")
        if SPACE.prune(p, problem, "f16", "row") is None
    ]
    return [SPACE.name(p, "f16", "row") for p in SPACE.order(kept, problem, "f16", "row")]


def test_order_puts_them_beside_the_one_cta_shared_memory_rows_for_long_rows() -> None:
    order = [n for n in _order(5341, 50257) if not n.endswith(("_bulk", "_bulkp"))]
    head = order[:16]  # (the bulk-copy family: tests/tuner/test_cuda_softmax_bulk.py)
    # the one-CTA shared-memory rows (the recorded winners) stay first, the split ones follow
    assert head[:8] == [
        f"softmax_f16_p8_block_t{t}_{mode}"
        for mode in ("pipe", "smem")
        for t in (128, 256, 512, 1024)
    ]
    assert {n for n in head[8:14]} == {
        f"softmax_f16_p8_c{c}_t{t}_smem" for c in (2, 4, 8) for t in (256, 512)
    }
    # rows past one CTA's shared memory: before the two-pass kernels
    order = _order(1766, 151936)
    assert order.index("softmax_f16_p8_c4_t256_smem") < order.index(
        "softmax_f16_p8_block_t1024_2pass"
    )
    # within reach of a small budget (the bulk-copy family's persistent kernel, one read of the
    # row, goes first: test_cuda_softmax_bulk.py)
    assert order.index("softmax_f16_p8_block_t1024_2pass") < 20


@pytest.mark.parametrize(("m", "k"), [(65536, 4096), (4, 256000), (8, 128256)])
def test_order_puts_them_last_for_short_rows_and_few_rows(m: int, k: int) -> None:
    order = _order(m, k)
    split = [i for i, n in enumerate(order) if "_c" in n and n.endswith("_smem") and "_p8_" in n]
    bulk = ("_bulk", "_bulkp")  # the bulk-copy family has its own place (test_cuda_softmax_bulk)
    others = [
        i for i, n in enumerate(order) if "_p8_" in n and i not in split and not n.endswith(bulk)
    ]
    assert split and min(split) > max(others)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_split_rows_in_shared_memory_build(tmp_path: Path, dtype: str) -> None:
    require_toolchain(lambda: None)
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path), compile_workers=2))
    params = _split_smem(dtype)[0]
    variant = backend.render(SPACE, params, dtype, "row", "sm_90")
    assert "softmax_split_shared<EDGES><<<" in variant.source
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log[-2000:]


def _grid(dtype: str, arch: str = "sm_90") -> list[dict]:
    return [p for p in SPACE.enumerate(dtype, "row", arch) if p["strategy"] == "grid"]


def test_grid_split_is_for_few_rows_on_every_arch() -> None:
    for arch in ("sm_80", "sm_90"):
        variants = _grid("f16", arch)
        assert {p["threads"] for p in variants if p["pack"] == 8} == set(GRID_THREADS)
        assert {p["mode"] for p in variants} == {"reg"}
    grid = {"pack": 8, "strategy": "grid", "group": 256, "threads": 256, "mode": "reg"}
    assert SPACE.name(grid, "f16", "row") == "softmax_f16_p8_grid_t256_reg"
    assert SPACE.prune(grid, SoftmaxProblem(m=4, k=256000), "f16", "row") is None
    # any length: the row spreads over as many CTAs as it needs
    assert SPACE.prune(grid, SoftmaxProblem(m=1, k=2_000_000), "f16", "row") is None
    reason = SPACE.prune(grid, SoftmaxProblem(m=FEW_ROWS + 1, k=256000), "f16", "row") or ""
    assert "few" in reason or "at most" in reason
    assert "idle" in (SPACE.prune(grid, SoftmaxProblem(m=4, k=1000), "f16", "row") or "")


@pytest.mark.parametrize(("m", "k"), [(1, 128256), (4, 256000), (8, 151936)])
def test_order_tries_the_grid_split_first_for_few_rows(m: int, k: int) -> None:
    order = _order(m, k)
    assert order[:2] == ["softmax_f16_p8_grid_t256_reg", "softmax_f16_p8_grid_t512_reg"]
    # then the bulk-copy clusters (test_cuda_softmax_bulk.py), then the other split rows
    rest = [n for n in order[2:] if not n.endswith(("_bulk", "_bulkp"))]
    assert rest[0].startswith("softmax_f16_p8_c8_")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_grid_split_builds_and_asks_for_its_workspace(tmp_path: Path, arch: str) -> None:
    require_toolchain(lambda: None)
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path), compile_workers=2))
    variants = [
        backend.render(SPACE, p, dtype, "row", arch)
        for dtype in ("f16", "bf16", "f32")
        for p in _grid(dtype, arch)[-1:]
    ]
    builds = backend.build(variants)
    for variant in variants:
        built = builds[variant.id]
        assert built.ok, (variant.name, built.log[-2000:])
        assert "cudaLaunchAttributeCooperative" in variant.source
        lib = ctypes.CDLL(str(built.artifact))
        lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
        dims = (ctypes.c_int64 * 2)(4, 256000)
        # one (max, sum) pair per CTA: at most 1024 CTAs a row
        assert lib.tunehub_workspace_bytes(dims, 2) == 4 * 1024 * 8
        # no GPU here: no CTA can be resident, so the variant refuses (TUNEHUB_UNSUPPORTED)
        assert lib.tunehub_can_run(dims, 2) == 3
