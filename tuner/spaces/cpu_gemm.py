"""CPU gemm variants: register tile MR x NR, cache blocks MC/KC/NC, packing on or off.

One compiled variant serves every (m, n, k): the dims are runtime arguments and every
variant handles ragged edges, so ``prune`` only removes variants that would behave exactly
like a smaller sibling on the problem (a block larger than the dim it blocks), which saves
tuning time without losing a distinct candidate.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from tuner.epilogues import GEMM_EPILOGUES, NONE, name_suffix, params_epilogue
from tuner.problems import GemmProblem, Problem
from tuner.spaces._gemm_epilogues import epilogue_context
from tuner.spaces.base import Params
from tuner.spaces.cpu_common import (
    STORAGE_TYPES,
    CpuFusedSpace,
    check_dtype_layout,
    smallest_covering,
)

__all__ = ["CpuGemmSpace", "GEMM_LAYOUTS", "REGISTER_TILES"]

GEMM_LAYOUTS = ("rcr", "rrr", "crr", "ccr")
#: (MR, NR): MR rows of NR float lanes each; NR is the vector width of the micro-kernel
REGISTER_TILES: tuple[tuple[int, int], ...] = (
    (4, 8),
    (8, 8),
    (6, 16),
    (8, 16),
    (12, 16),
    (4, 32),
    (8, 32),
)
#: accumulator floats a tile may hold without AVX-512 (16 ymm registers of 8 floats)
MAX_TILE_FLOATS_AVX2 = 128
MC_BLOCKS = (64, 96, 192)
KC_BLOCKS = (128, 256)
NC_BLOCK = 2048
#: unpacked variants skip the copies; they are only worth trying with a moderate tile
UNPACKED_TILES: tuple[tuple[int, int], ...] = ((4, 8), (6, 16), (8, 16))
UNPACKED_MC, UNPACKED_KC = 96, 256


def _tile_fits(mr: int, nr: int, arch: str) -> bool:
    return "avx512" in arch or mr * nr <= MAX_TILE_FLOATS_AVX2


class CpuGemmSpace(CpuFusedSpace):
    op = "gemm"
    template = "cpu/gemm.cpp.j2"
    fused_template = "cpu/gemm_fused.cpp.j2"
    epilogues = GEMM_EPILOGUES

    def _plain(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        check_dtype_layout(self.op, dtype, layout, GEMM_LAYOUTS)
        for (mr, nr), kc, mc in itertools.product(REGISTER_TILES, KC_BLOCKS, MC_BLOCKS):
            if mc % mr or NC_BLOCK % nr or not _tile_fits(mr, nr, arch):
                continue  # a block must hold whole register tiles
            yield {"mr": mr, "nr": nr, "mc": mc, "kc": kc, "nc": NC_BLOCK, "packed": True}
        for mr, nr in UNPACKED_TILES:
            if _tile_fits(mr, nr, arch):
                yield {
                    "mr": mr,
                    "nr": nr,
                    "mc": UNPACKED_MC,
                    "kc": UNPACKED_KC,
                    "nc": NC_BLOCK,
                    "packed": False,
                }

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, GemmProblem):
            return f"not a gemm problem: {type(problem).__name__}"
        if not params["packed"]:
            return None
        mr, mc, kc = params["mr"], params["mc"], params["kc"]
        legal_mc = tuple(b for b in MC_BLOCKS if b % mr == 0)
        cover_mc = smallest_covering(legal_mc, problem.m)
        if cover_mc is not None and mc > cover_mc:
            return f"mc={mc} acts like mc={cover_mc} when m={problem.m}"
        cover_kc = smallest_covering(KC_BLOCKS, problem.k)
        if cover_kc is not None and kc > cover_kc:
            return f"kc={kc} acts like kc={cover_kc} when k={problem.k}"
        return None

    def name(self, params: Params, dtype: str, layout: str) -> str:
        base = f"gemm_{dtype}_{layout}_mr{params['mr']}_nr{params['nr']}"
        if params["packed"]:
            return f"{base}_mc{params['mc']}_kc{params['kc']}_packed{name_suffix(params)}"
        return f"{base}_kc{params['kc']}_inplace{name_suffix(params)}"

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        check_dtype_layout(self.op, dtype, layout, GEMM_LAYOUTS)
        context = {
            "mr": int(params["mr"]),
            "nr": int(params["nr"]),
            "mc": int(params["mc"]),
            "kc": int(params["kc"]),
            "nc": int(params["nc"]),
            "packed": bool(params["packed"]),
            "dtype": dtype,
            "layout": layout,
            "a_row_major": layout[0] == "r",
            "b_row_major": layout[1] == "r",
            "storage_type": STORAGE_TYPES[dtype],
            "name": self.name(params, dtype, layout),
        }
        if params_epilogue(params) == NONE:  # a plain variant's context (and source) stays
            return context
        return {**context, **epilogue_context(params)}
