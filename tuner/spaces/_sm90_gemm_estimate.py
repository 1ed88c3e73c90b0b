"""A rough time estimate of one sm_90 CUTLASS GEMM variant on one shape, to order a search.

    seconds = estimate_sm90_seconds(params, GemmProblem(16, 4096, 4096), sm_count=132)

It is not a performance model to trust for numbers, only for order: how many SMs the tile
grid (times the K splits) keeps busy, how many waves it takes and how full the last one is,
and whether a CTA is bound by its tensor cores or by the bytes it must load. The constants are
an H200 (132 SMs, about 989 TFLOP/s dense f16), set so that two measured points come out
near: 64x64 tiles at 16x4096x4096 (64 CTAs, 30 TFLOP/s) and 128x256 tiles at 8192^3 (660-780).
"""

from __future__ import annotations

import math

from tuner.problems import GemmProblem
from tuner.spaces.base import Params

__all__ = ["DEFAULT_SM_COUNT", "estimate_sm90_seconds"]

#: SMs of an H100 SXM / H200; the space takes another count where the device is known
DEFAULT_SM_COUNT = 132
#: dense f16/bf16 tensor-core rate of one SM that a good kernel sustains (80% of 989 / 132)
_SM_FLOPS = 0.8 * 989e12 / 132
#: bytes per second one SM loads into shared memory when they hit in L2
_SM_LOAD_BYTES_PER_S = 100e9
#: device memory bandwidth a whole-GPU stream reaches, and what one SM alone pulls from it
_DRAM_BYTES_PER_S = 4.0e12
_SM_DRAM_BYTES_PER_S = 40e9
#: rate of the f32 partial-tile traffic of split-K and stream-K (part L2, part DRAM)
_PARTIAL_BYTES_PER_S = 6e12
#: launch, prologue and epilogue drain that no tiling avoids
_FIXED_SECONDS = 3e-6
#: bytes of one f32 partial accumulator (split-K and stream-K reduce through the workspace)
_PARTIAL_BYTES = 4
_ELEMENT_BYTES = 2
#: a CTA reaches its full MMA rate only with enough reuse: tile M*N/(M+N) of 128x256
_FULL_RATE_INTENSITY = 128 * 256 / (128 + 256)


def _tile_rate(tile_m: int, tile_n: int, tile_k: int, schedule: str) -> float:
    """Share of the SM's tensor-core rate a CTA of this tile reaches when nothing waits."""
    intensity = tile_m * tile_n / (tile_m + tile_n)
    rate = min(1.0, intensity / _FULL_RATE_INTENSITY) ** 0.5
    if tile_k == 128:
        rate *= 0.98  # fewer pipeline stages fit
    if schedule == "auto":
        rate *= 0.98  # no TMA epilogue
    return rate


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def estimate_sm90_seconds(params: Params, problem: GemmProblem, sm_count: int) -> float:
    """Estimated run time of ``params`` on ``problem`` (seconds; for ranking only)."""
    tm, tn, tk = params["tile_m"], params["tile_n"], params["tile_k"]
    cm, cn = params["cluster_m"], params["cluster_n"]
    m, n, k = problem.m, problem.n, problem.k
    splits = params.get("splits", 1)
    tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
    # a cluster launches whole: a partial cluster at the edge still holds its SMs
    tiles = _round_up(tiles_m, cm) * _round_up(tiles_n, cn)
    k_tiles = math.ceil(k / tk)
    rate = _SM_FLOPS * _tile_rate(tm, tn, tk, params["schedule"])
    # TMA skips rows past the matrix edge; multicast in a cluster spares part of the loads.
    row_bytes = (min(tm, m) * (1 + 1 / cn) / 2 + min(tn, n) * (1 + 1 / cm) / 2) * tk
    row_bytes *= _ELEMENT_BYTES
    k_step = max(2.0 * tm * tn * tk / rate, row_bytes / _SM_LOAD_BYTES_PER_S)
    # a partial tile is written by one CTA and read by another
    tile_partial = 2 * tm * tn * _PARTIAL_BYTES
    partial = tile_partial / 2 / _SM_LOAD_BYTES_PER_S

    if params["scheduler"] == "streamk" and splits == 1:
        # stream-K spreads every K step of every tile over the SMs, at some fix-up cost
        workers = min(sm_count, tiles * max(1, k_tiles // 4))
        busy = tiles * k_tiles / workers * k_step * 1.08
        active = workers * tiles_m * tiles_n / tiles
        if workers > tiles:
            busy += partial + (workers - tiles) * tile_partial / _PARTIAL_BYTES_PER_S
    else:
        units = tiles * splits
        active = min(sm_count, tiles_m * tiles_n * splits)
        waves = math.ceil(units / sm_count)
        busy = waves * math.ceil(k_tiles / splits) * k_step
        if splits > 1:
            busy = busy * 1.05 + waves * partial
            busy += tiles * (splits - 1) * tile_partial / _PARTIAL_BYTES_PER_S
    # few busy SMs cannot draw the whole device-memory bandwidth
    dram_rate = min(_DRAM_BYTES_PER_S, active * _SM_DRAM_BYTES_PER_S)
    dram = (m * k + n * k + m * n) * _ELEMENT_BYTES / dram_rate
    # the slower of SM time and device-memory time, softened so both still count
    return (busy**4 + dram**4) ** 0.25 + _FIXED_SECONDS
