"""The hand-written swap-AB tensor-core GEMM (``family: "swapab"``, m <= 64) of
:class:`CudaGemmSpace`.

Decode GEMMs are bound by streaming the weights W [n,k]: the limit is bytes(W) over the copy
rate. The skinny kernel does m scalar FMAs per weight and re-reads A, so it falls behind from
m = 4 on. ``gemm_swapab.cu.j2`` puts the weights on the M side of ``mma.sync.m16n8k16`` (16
rows of W per tile, ``w_tiles`` tiles per warp) and the ``m_tile`` rows of A on its N side
(n8 tiles), loading both straight from global memory in 16-byte vectors (k permuted the same
way in both operands) in groups of ``unroll`` 32-wide k chunks, the next group's W loads
issued before this group's MMAs; ``warps`` per CTA may cut K into ``slices`` (summed in shared
memory) and ``splits`` cuts K across CTAs (a second kernel sums them), so the grid fills the
SMs when n / 16 is small. Runs on sm_80 and later.

Measured on the H200 (bench/results/swapab-sweep): 0.68-0.96 of the limit at m = 4, 0.62-0.91
at m = 16 (0.90-1.22x cuBLAS); at m = 64 0.46-0.65x cuBLAS, so the order tries the family first
only up to ``HEAD_MAX_M``.
"""

from __future__ import annotations

import math
from typing import Any

from tuner.problems import GemmProblem
from tuner.spaces.base import Params, params_product
from tuner.spaces.cuda_gemm_skinny import k_cut_name

__all__ = [
    "FAMILY",
    "TEMPLATE",
    "MAX_M",
    "HEAD_MIN_M",
    "HEAD_MAX_M",
    "swapab_params",
    "prune",
    "order",
    "name",
]

FAMILY = "swapab"
TEMPLATE = "cuda/gemm_swapab.cu.j2"
#: the family runs only where m is at most this (the largest m tile)
MAX_M = 64
#: the order tries the family right after the vendor default for these m (m = 1: skinny; at
#: m = 64 it ran at 0.46-0.65x cuBLAS on the H200: A's loads, not W, bound it there)
HEAD_MIN_M = 2
HEAD_MAX_M = 16
_M_TILES = (8, 16, 32, 64)
_W_TILES = (1, 2)
_WARPS = (4, 8)
_SLICES = (1, 2, 4)
_SPLITS = (1, 2, 4)
_UNROLLS = (4, 8, 2)
#: k elements per chunk (4 lanes of 8 elements per row of W)
_CHUNK = 32
#: the k of one lane's vector load: rows must hold whole 16-byte vectors
_K_ALIGN = 8
_SM_COUNT = 132
#: ``order``: grids of fewer warps per SM than this come last (too few loads in flight)
_MIN_WARPS_PER_SM = 4
#: ``order``: at most this n, too few rows of W per SM keep 4 chunks per warp busy enough:
#: 8 chunks in flight (and 8 warps) go first where they waste little of a K part
_FEW_ROWS_N = 8192
#: the share of a K part's chunks that 8-chunk groups may pad with zeros and still go first
_MAX_PAD = 0.05
_LAYOUTS = ("rcr",)
#: registers per thread the loads in flight (two groups of W: the pipeline), A's fragments of
#: one group and the accumulators may take (255 max; the rest is addresses and indices)
_MAX_DATA_REGISTERS = 200
#: static shared memory the slices' partial sums may take (bytes)
_MAX_SMEM = 32 * 1024


def _data_registers(m_tile: int, w_tiles: int, unroll: int) -> int:
    w_loads = 2 * unroll * w_tiles * 2 * 4  # 16-byte W vectors: this group and the next
    a_loads = unroll * (m_tile // 8) * 4  # 16-byte A vectors of this group
    return w_loads + a_loads + w_tiles * m_tile // 2  # f32 accumulators


def _smem_bytes(m_tile: int, w_tiles: int, warps: int, slices: int) -> int:
    return (slices - 1) * (warps // slices) * w_tiles * (m_tile // 8) * 4 * 32 * 4


def swapab_params() -> list[Params]:
    axes = {
        "m_tile": _M_TILES,
        "w_tiles": _W_TILES,
        "warps": _WARPS,
        "slices": _SLICES,
        "splits": _SPLITS,
        "unroll": _UNROLLS,
    }

    def keep(p: Params) -> bool:
        m_tile, w_tiles, warps, slices = p["m_tile"], p["w_tiles"], p["warps"], p["slices"]
        return (
            _data_registers(m_tile, w_tiles, p["unroll"]) <= _MAX_DATA_REGISTERS
            and warps % slices == 0
            and _smem_bytes(m_tile, w_tiles, warps, slices) <= _MAX_SMEM
        )

    return list(params_product({"family": FAMILY}, axes, keep))


def m_tile_for(m: int) -> int:
    """The smallest m tile that holds all of A's rows (so W is streamed once)."""
    return max(_M_TILES[0], 1 << max(0, math.ceil(math.log2(m))))


def prune(params: Params, problem: GemmProblem, layout: str) -> str | None:
    if layout not in _LAYOUTS:
        return f"the swapab kernel reads B stored [n,k] (layout rcr), not {layout}"
    if problem.m > MAX_M:
        return f"m={problem.m} > {MAX_M}: a tiled tensor-core kernel wins there"
    if problem.k % _K_ALIGN:
        return f"k={problem.k} is not a multiple of {_K_ALIGN} (16-byte rows)"
    best = m_tile_for(problem.m)
    if params["m_tile"] != best:
        return f"m_tile {params['m_tile']} does not suit m={problem.m} (tile {best})"
    ways = params["splits"] * params["slices"]
    if ways > 1 and math.ceil(problem.k / _CHUNK) // ways < params["unroll"]:
        return f"k={problem.k} is too short to cut {ways} ways"
    return None


def _warps_per_sm(params: Params, problem: GemmProblem) -> float:
    rows_per_cta = params["warps"] // params["slices"] * 16 * params["w_tiles"]
    ctas = math.ceil(problem.n / rows_per_cta) * params["splits"]
    return ctas * params["warps"] / _SM_COUNT


def _pad(params: Params, problem: GemmProblem, unroll: int) -> float:
    """The share of a K part's chunks that groups of ``unroll`` chunks pad with zeros."""
    per_part = math.ceil(math.ceil(problem.k / _CHUNK) / (params["splits"] * params["slices"]))
    return (math.ceil(per_part / unroll) * unroll - per_part) / per_part


def order(candidates: list[Params], problem: GemmProblem) -> list[Params]:
    """Fitted to the H200 sweep (bench/results/swapab-sweep): grids with at least
    ``_MIN_WARPS_PER_SM`` first; one W tile per warp up to m_tile 16, two above (A's loads
    shared by more rows of W); no split-K (a second launch); 8 chunks in flight and 8 warps
    where n is small and K parts are deep (``_FEW_ROWS_N``, ``_MAX_PAD``), else 4 chunks and 4
    warps; then 4, 2, 1 K slices."""

    def key(p: Params) -> tuple[Any, ...]:
        deep = problem.n <= _FEW_ROWS_N and _pad(p, problem, 8) <= _MAX_PAD
        return (
            _warps_per_sm(p, problem) < _MIN_WARPS_PER_SM,
            p["w_tiles"] != (1 if p["m_tile"] <= 16 else 2),
            p["splits"],
            p["unroll"] != (8 if deep else 4),
            p["warps"] != (8 if deep else 4),
            -p["slices"],
            _UNROLLS.index(p["unroll"]),
            _WARPS.index(p["warps"]),
        )

    return sorted(candidates, key=key)


def name(params: Params, dtype: str, layout: str) -> str:
    head = f"gemm_{dtype}_{layout}_swapab_m{params['m_tile']}"
    return k_cut_name([head, f"t{params['w_tiles']}"], params)
