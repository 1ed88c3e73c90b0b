"""The weight-streaming FP8 decode families of ``scaled_gemm`` (m <= 16), both ours (library
``tunehub``): ``decode_fp8`` (CUDA-core FMAs, ``scaled_gemm_decode.cu.j2``) and ``swapab_fp8``
(FP8 tensor cores, ``scaled_gemm_swapab.cu.j2``): their params, pruning, ranking and names, used
by :class:`tuner.spaces.cuda_scaled_gemm.CudaScaledGemmSpace`."""

from __future__ import annotations

import itertools
from typing import Any

from tuner.problems import SCALED_GEMM_OUT_DTYPES, SCALINGS, ScaledGemmProblem
from tuner.spaces.base import Params

__all__ = [
    "DECODE_FAMILY",
    "SWAPAB_FAMILY",
    "DECODE_MAX_M",
    "SWAPAB_MAX_M",
    "decode_params",
    "swapab_params",
    "prune",
    "decode_rank",
    "swapab_rank",
    "name",
]

DECODE_FAMILY = "decode_fp8"
SWAPAB_FAMILY = "swapab_fp8"
#: the CUDA-core decode family runs where m is at most this (its largest m tile)
DECODE_MAX_M = 16
#: the swap-AB family runs where m is at most this (4 n8 tiles: skinny prefill chunks and
#: speculative decoding batches, where CUTLASS's 64-row tiles leave most SMs idle)
SWAPAB_MAX_M = 32
_DECODE_M_TILES = (1, 2, 4, 8, 16)
_DECODE_ROWS = (1, 2, 4)
_DECODE_WARPS = (4, 8)
_DECODE_UNROLLS = (2, 4)
_DECODE_SPLITS = (1, 2, 4, 8)
#: registers the decode kernel's accumulators (rows x m_tile) and loads in flight may take
_DECODE_MAX_DATA_REGISTERS = 160
_SM_COUNT = 132
_SWAPAB_M_TILES = (1, 2, 4)
_SWAPAB_W_TILES = (1, 2)
_SWAPAB_WARPS = (4, 8)
_SWAPAB_UNROLLS = (2, 4)
#: the swap-AB kernel's K chunk (4 lanes x 16 bytes)
_SWAPAB_K_ALIGN = 64


def _decode_registers(p: Params) -> int:
    return p["rows"] * p["m_tile"] + p["unroll"] * p["rows"] * 4 + p["rows"] * 16 + 16


def decode_params() -> list[Params]:
    out: list[Params] = []
    for scaling, out_dtype, m_tile, rows, warps, unroll, splits in itertools.product(
        SCALINGS,
        SCALED_GEMM_OUT_DTYPES,
        _DECODE_M_TILES,
        _DECODE_ROWS,
        _DECODE_WARPS,
        _DECODE_UNROLLS,
        _DECODE_SPLITS,
    ):
        params: Params = {
            "library": "tunehub",
            "family": DECODE_FAMILY,
            "out_dtype": out_dtype,
            "scaling": scaling,
            "m_tile": m_tile,
            "rows": rows,
            "warps": warps,
            "unroll": unroll,
            "splits": splits,
        }
        if _decode_registers(params) <= _DECODE_MAX_DATA_REGISTERS:
            out.append(params)
    return out


def swapab_params() -> list[Params]:
    out: list[Params] = []
    for scaling, out_dtype, m_tiles, w_tiles, warps, unroll in itertools.product(
        SCALINGS,
        SCALED_GEMM_OUT_DTYPES,
        _SWAPAB_M_TILES,
        _SWAPAB_W_TILES,
        _SWAPAB_WARPS,
        _SWAPAB_UNROLLS,
    ):
        if m_tiles * w_tiles * unroll > 16:  # over ~200 registers of loads and sums: spills
            continue
        out.append(
            {
                "library": "tunehub",
                "family": SWAPAB_FAMILY,
                "out_dtype": out_dtype,
                "scaling": scaling,
                "m_tiles": m_tiles,
                "w_tiles": w_tiles,
                "warps": warps,
                "unroll": unroll,
            }
        )
    return out


def prune(params: Params, problem: ScaledGemmProblem) -> str | None:
    """Why a decode or swap-AB variant cannot run ``problem`` (None when it can)."""
    if params["family"] == DECODE_FAMILY:
        if problem.m > params["m_tile"]:
            return f"m={problem.m} is over the decode tile's {params['m_tile']} rows"
        if params["m_tile"] >= 2 * problem.m and params["m_tile"] > 1:
            return f"m={problem.m} fills under half of the {params['m_tile']}-row tile"
        vectors = problem.k // 16
        if params["splits"] > 1 and vectors < params["splits"] * 32 * params["unroll"]:
            return f"k={problem.k} is too short to split {params['splits']} ways"
        return None
    if params["family"] == SWAPAB_FAMILY:
        rows = 8 * params["m_tiles"]
        if problem.m > rows:
            return f"m={problem.m} is over the swap-AB kernel's {rows} columns"
        if problem.m <= 4 * params["m_tiles"] and params["m_tiles"] > 1:
            return f"m={problem.m} fits {params['m_tiles'] // 2} n8 tile(s)"
        if problem.k % _SWAPAB_K_ALIGN:
            return f"k={problem.k} is not a multiple of {_SWAPAB_K_ALIGN} (the K chunk)"
        return None
    return None


def swapab_rank(p: Params, problem: ScaledGemmProblem) -> tuple[Any, ...]:
    """CTAs that fill the SMs twice first, then more warps and loads in flight per CTA."""
    ctas = -(-problem.n // (16 * p["w_tiles"]))
    return (ctas < 2 * _SM_COUNT, -p["warps"] * p["unroll"], p["w_tiles"], p["m_tiles"])


def decode_rank(p: Params, problem: ScaledGemmProblem) -> tuple[Any, ...]:
    """Grids that put >= 8 warps on every SM first, then fewer splits, more loads in flight."""
    ctas = -(-problem.n // (p["warps"] * p["rows"])) * p["splits"]
    warps_per_sm = ctas * p["warps"] / _SM_COUNT
    return (warps_per_sm < 8, p["m_tile"], p["splits"], -p["unroll"], p["rows"], p["warps"])


def name(params: Params, tail: str) -> str:
    """The variant's name (``tail``: ``<out_dtype>_<scaling>``)."""
    if params["family"] == DECODE_FAMILY:
        return (
            f"scaled_gemm_e4m3_{tail}_decode_m{params['m_tile']}_r{params['rows']}"
            f"_w{params['warps']}_u{params['unroll']}_s{params['splits']}"
        )
    if params["family"] == SWAPAB_FAMILY:
        return (
            f"scaled_gemm_e4m3_{tail}_swapab_m{8 * params['m_tiles']}_w{params['w_tiles']}"
            f"_wp{params['warps']}_u{params['unroll']}"
        )
    raise ValueError(f"not a decode family: {params['family']}")
