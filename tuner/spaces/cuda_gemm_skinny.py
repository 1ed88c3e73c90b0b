"""The hand-written skinny GEMM (``family: "skinny"``, m <= 64) of :class:`CudaGemmSpace`.

Decode GEMMs (a few tokens times a weight matrix) are bound by streaming the weights: the
limit is bytes(B) over the copy rate. ``gemm_skinny.cu.j2`` applies the reduce kernels'
packSize x group choice to W.x: a group of ``lanes`` threads owns a row of B (one column of D)
for ``m_tile`` rows of A, loads ``pack`` elements per access with ``unroll`` loads in flight,
and reduces with shuffles; ``warps`` per CTA, whose groups may cut each row's K into ``slices``
(summed in shared memory: fewer rows per CTA, more CTAs, a balanced last wave); ``splits`` cuts
K across CTAs (a second kernel sums them) for shapes with too few rows of B to fill the GPU.

Measured on the H200 (docs/benchmarks/h200-gemm-vendor.md): m_tile 16 re-reads A from L1 for
every pack of B and runs 4-6x slower than cuBLASLt, so the order tries skinny first only for
m <= ``HEAD_MAX_M``; at m = 1 a full warp per row (lanes 32) won.
"""

from __future__ import annotations

import math
from typing import Any

from tuner.problems import GemmProblem
from tuner.spaces.base import Params, params_product

__all__ = ["FAMILY", "TEMPLATE", "MAX_M", "HEAD_MAX_M", "skinny_params", "prune", "order", "name"]

FAMILY = "skinny"
TEMPLATE = "cuda/gemm_skinny.cu.j2"
#: the family runs only where m is at most this
MAX_M = 64
#: the order tries the family before cuBLASLt's alternatives only up to this m
HEAD_MAX_M = 4
_M_TILES = (1, 2, 4, 8, 16)
_PACKS = (8, 4)
_LANES = (32, 16)
_WARPS = (8, 4)
_SLICES = (1, 2, 4, 8)
_SPLITS = (1, 2)
_UNROLLS = (8, 4, 2)
_SM_COUNT = 132
#: per-SM CTA count over its mean above which the last wave counts as unbalanced
_BALANCE = 1.08
_LAYOUTS = ("rcr",)
#: m_tile 16 with 4 packs in flight took all 255 registers and spilled (ptxas, sm_90a)
_MAX_TILE_X_UNROLL = 32


def skinny_params() -> list[Params]:
    axes = {
        "m_tile": _M_TILES,
        "pack": _PACKS,
        "lanes": _LANES,
        "warps": _WARPS,
        "slices": _SLICES,
        "splits": _SPLITS,
        "unroll": _UNROLLS,
    }

    def keep(p: Params) -> bool:
        return p["m_tile"] * p["unroll"] <= _MAX_TILE_X_UNROLL and (
            p["slices"] <= p["warps"] * 32 // p["lanes"]
        )

    return list(params_product({"family": FAMILY}, axes, keep))


def _m_tile_for(m: int) -> int:
    """The m tile that reads B once (up to 16 rows; more would spill the sums)."""
    return min(_M_TILES[-1], 1 << max(0, math.ceil(math.log2(m))))


def prune(params: Params, problem: GemmProblem, layout: str) -> str | None:
    if layout not in _LAYOUTS:
        return f"the skinny kernel reads B stored [n,k] (layout rcr), not {layout}"
    if problem.m > MAX_M:
        return f"m={problem.m} > {MAX_M}: a tensor-core kernel wins there"
    if problem.k % params["pack"]:
        return f"k={problem.k} is not a multiple of the pack {params['pack']}"
    best = _m_tile_for(problem.m)
    if params["m_tile"] not in (best, best // 2):
        return f"m_tile {params['m_tile']} does not suit m={problem.m} (tiles {best}, {best // 2})"
    ways = params["splits"] * params["slices"]
    if ways > 1 and problem.k // ways < params["lanes"] * params["pack"] * params["unroll"]:
        return f"k={problem.k} is too short to cut {ways} ways"
    return None


def _balance(params: Params, problem: GemmProblem) -> float:
    """The busiest SM's CTAs over the mean (1.0: the last wave ends together)."""
    rows_per_cta = params["warps"] * 32 // params["lanes"] // params["slices"]
    ctas = (
        math.ceil(problem.n / rows_per_cta)
        * math.ceil(problem.m / params["m_tile"])
        * params["splits"]
    )
    per_sm = ctas / _SM_COUNT
    return math.ceil(per_sm) / per_sm


def order(candidates: list[Params], problem: GemmProblem) -> list[Params]:
    """Full-width loads and a warp per row first, then balanced grids, deep unrolls, no split-K
    (a second launch), fewer K slices."""
    best = _m_tile_for(problem.m)

    def key(p: Params) -> tuple[Any, ...]:
        return (
            p["pack"] != 8,
            p["m_tile"] != best,
            _LANES.index(p["lanes"]),
            _balance(p, problem) > _BALANCE,
            p["splits"],
            _UNROLLS.index(p["unroll"]),
            _WARPS.index(p["warps"]),
            p["slices"],
        )

    return sorted(candidates, key=key)


def name(params: Params, dtype: str, layout: str) -> str:
    head = f"gemm_{dtype}_{layout}_skinny_m{params['m_tile']}"
    return k_cut_name([head, f"p{params['pack']}", f"l{params['lanes']}"], params)


def k_cut_name(parts: list[str], params: Params) -> str:
    """A decode variant's name (skinny, swapab): ``parts``, its warps and unroll, then its K
    slices (``s``) and split-K parts (``sk``) where it has more than one, joined by ``_``."""
    parts = [*parts, f"w{params['warps']}", f"u{params['unroll']}"]
    if params["slices"] > 1:
        parts.append(f"s{params['slices']}")
    if params["splits"] > 1:
        parts.append(f"sk{params['splits']}")
    return "_".join(parts)
