"""The hand-written skinny GEMM (``family: "skinny"``, m <= 64) of :class:`CudaGemmSpace`.

Decode GEMMs (a few tokens times a weight matrix) are bound by streaming the weights: the
limit is bytes(B) over the copy rate. ``gemm_skinny.cu.j2`` applies the reduce kernels'
packSize x group choice to W.x: a group of ``lanes`` threads owns a row of B (one column of D)
for ``m_tile`` rows of A, loads ``pack`` elements per access with ``unroll`` loads in flight,
and reduces with shuffles; ``warps`` per CTA; ``splits`` cuts K for shapes with too few rows
of B to fill the GPU.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from tuner.problems import GemmProblem
from tuner.spaces.base import Params

__all__ = ["FAMILY", "TEMPLATE", "MAX_M", "skinny_params", "prune", "order", "name"]

FAMILY = "skinny"
TEMPLATE = "cuda/gemm_skinny.cu.j2"
#: the family runs only where m is at most this
MAX_M = 64
_M_TILES = (1, 2, 4, 8, 16)
_PACKS = (8, 4)
_LANES = (32, 16, 8)
_WARPS = (4, 8)
_SPLITS = (1, 2, 4)
_UNROLLS = (4, 2)
#: CTAs the order aims for: a few per SM of a 132-SM GPU, enough loads in flight
_TARGET_CTAS = 4 * 132
_LAYOUTS = ("rcr",)
#: m_tile 16 with 4 packs in flight took all 255 registers and spilled (ptxas, sm_90a)
_MAX_TILE_X_UNROLL = 32


def skinny_params() -> list[Params]:
    return [
        {
            "family": FAMILY,
            "m_tile": m_tile,
            "pack": pack,
            "lanes": lanes,
            "warps": warps,
            "splits": splits,
            "unroll": unroll,
        }
        for m_tile, pack, lanes, warps, splits, unroll in itertools.product(
            _M_TILES, _PACKS, _LANES, _WARPS, _SPLITS, _UNROLLS
        )
    ]


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
    if params["m_tile"] * params["unroll"] > _MAX_TILE_X_UNROLL:
        return "m_tile x unroll loads in flight exceed the registers (spills)"
    if params["splits"] > 1 and problem.k // params["splits"] < params["lanes"] * params["pack"]:
        return f"k={problem.k} is too short to split {params['splits']} ways"
    return None


def _ctas(params: Params, problem: GemmProblem) -> int:
    rows_per_cta = params["warps"] * 32 // params["lanes"]
    return (
        math.ceil(problem.n / rows_per_cta)
        * math.ceil(problem.m / params["m_tile"])
        * params["splits"]
    )


def order(candidates: list[Params], problem: GemmProblem) -> list[Params]:
    """Full-width loads first, then grids near a few CTAs per SM, then fewer passes over B."""
    best = _m_tile_for(problem.m)

    def key(p: Params) -> tuple[Any, ...]:
        fill = abs(math.log(max(1, _ctas(p, problem)) / _TARGET_CTAS))
        return (
            p["pack"] != 8,
            p["m_tile"] != best,
            round(fill, 1),
            p["splits"],
            _LANES.index(p["lanes"]),
            _UNROLLS.index(p["unroll"]),
            p["warps"],
        )

    return sorted(candidates, key=key)


def name(params: Params, dtype: str, layout: str) -> str:
    parts = [
        f"gemm_{dtype}_{layout}_skinny_m{params['m_tile']}",
        f"p{params['pack']}",
        f"l{params['lanes']}",
        f"w{params['warps']}",
        f"u{params['unroll']}",
    ]
    if params["splits"] > 1:
        parts.append(f"sk{params['splits']}")
    return "_".join(parts)
