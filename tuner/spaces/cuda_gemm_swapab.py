"""The hand-written swap-AB tensor-core GEMM (``family: "swapab"``, m <= 64) of
:class:`CudaGemmSpace`.

Decode GEMMs are bound by streaming the weights W [n,k]: the limit is bytes(W) over the copy
rate. The skinny kernel does m scalar FMAs per weight and re-reads A, so it falls behind from
m = 4 on. ``gemm_swapab.cu.j2`` puts the weights on the M side of ``mma.sync.m16n8k16`` (16
rows of W per tile, ``w_tiles`` tiles per warp) and the ``m_tile`` rows of A on its N side
(n8 tiles), loading both straight from global memory in 16-byte vectors (k permuted the same
way in both operands), ``unroll`` 32-wide k chunks in flight; ``warps`` per CTA may cut K into
``slices`` (summed in shared memory) and ``splits`` cuts K across CTAs (a second kernel sums
them), so the grid fills the SMs when n / 16 is small. Runs on sm_80 and later.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from tuner.problems import GemmProblem
from tuner.spaces.base import Params

__all__ = [
    "FAMILY",
    "TEMPLATE",
    "MAX_M",
    "HEAD_MIN_M",
    "swapab_params",
    "prune",
    "order",
    "name",
]

FAMILY = "swapab"
TEMPLATE = "cuda/gemm_swapab.cu.j2"
#: the family runs only where m is at most this (the largest m tile)
MAX_M = 64
#: the order tries the family right after the vendor default from this m on (m = 1: skinny)
HEAD_MIN_M = 2
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
#: per-SM CTA count over its mean above which the grid counts as unbalanced
_BALANCE = 1.08
#: bytes of W per SM in flight below which the loads cannot stream at the copy rate (HBM3e:
#: ~4.8 TB/s x ~1 us latency over 132 SMs is ~36 KB; the order wants at least this)
_MIN_BYTES_IN_FLIGHT_PER_SM = 24 * 1024
#: bytes of W one warp loads per 32-wide k chunk and W tile (16 rows x 64 bytes)
_CHUNK_BYTES = 16 * _CHUNK * 2
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
    return [
        {
            "family": FAMILY,
            "m_tile": m_tile,
            "w_tiles": w_tiles,
            "warps": warps,
            "slices": slices,
            "splits": splits,
            "unroll": unroll,
        }
        for m_tile, w_tiles, warps, slices, splits, unroll in itertools.product(
            _M_TILES, _W_TILES, _WARPS, _SLICES, _SPLITS, _UNROLLS
        )
        if _data_registers(m_tile, w_tiles, unroll) <= _MAX_DATA_REGISTERS
        and warps % slices == 0
        and _smem_bytes(m_tile, w_tiles, warps, slices) <= _MAX_SMEM
    ]


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


def _ctas(params: Params, problem: GemmProblem) -> int:
    rows_per_cta = params["warps"] // params["slices"] * 16 * params["w_tiles"]
    return math.ceil(problem.n / rows_per_cta) * params["splits"]


def _bytes_in_flight_per_sm(params: Params, problem: GemmProblem) -> float:
    per_warp = params["unroll"] * params["w_tiles"] * _CHUNK_BYTES
    return _ctas(params, problem) * params["warps"] * per_warp / _SM_COUNT


def _balance(params: Params, problem: GemmProblem) -> float:
    """The busiest SM's CTAs over the mean (1.0: every SM streams as long)."""
    per_sm = _ctas(params, problem) / _SM_COUNT
    return math.ceil(per_sm) / per_sm


def order(candidates: list[Params], problem: GemmProblem) -> list[Params]:
    """Grids with enough bytes in flight and a balanced last wave first, then no split-K (a
    second launch), 4 chunks in flight, one W tile per warp, more K slices (measured on the
    H200: 4 slices of 4 warps won most decode shapes), 4 warps."""

    def key(p: Params) -> tuple[Any, ...]:
        return (
            _bytes_in_flight_per_sm(p, problem) < _MIN_BYTES_IN_FLIGHT_PER_SM,
            _balance(p, problem) > _BALANCE,
            p["splits"],
            _UNROLLS.index(p["unroll"]),
            p["w_tiles"],
            -p["slices"],
            _WARPS.index(p["warps"]),
        )

    return sorted(candidates, key=key)


def name(params: Params, dtype: str, layout: str) -> str:
    parts = [
        f"gemm_{dtype}_{layout}_swapab_m{params['m_tile']}",
        f"t{params['w_tiles']}",
        f"w{params['warps']}",
        f"u{params['unroll']}",
    ]
    if params["slices"] > 1:
        parts.append(f"s{params['slices']}")
    if params["splits"] > 1:
        parts.append(f"sk{params['splits']}")
    return "_".join(parts)
