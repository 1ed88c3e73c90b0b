"""CUDA RMSNorm over the last dim: pack x row mapping x block size x (registers | two passes).

The row machinery of reduce and softmax (``tuner.spaces.cuda_rows``): ``pack`` elements per
vector access (16 bytes at most), a group of 2-16 lanes per row (several rows per warp), a warp
per row or a block per row, and the threads of a block (so rows per CTA = threads / lanes). The
split-row (cluster) mapping is left out: norm rows are hidden sizes (2-16k elements), which one
CTA holds in registers, and few rows gain nothing from a cluster barrier.

"reg" keeps the row's x packs in registers (as stored, so f16 and bf16 take half the registers
of floats) between the sum of squares and the scaled write: x read once, w read once, y
written once. A lane holding at most 64 bytes of x loads its w packs with them, before the
reduction (decode: w's latency hides behind x's), a lane holding more loads w after it (from
L1/L2). It runs while a lane's share fits ``reg_bytes(threads)`` bytes. "2pass" sums the
squares, then reads x again (from L2) with w for the write; any k.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tuner.problems import Problem
from tuner.reference import ELEMENT_SIZE
from tuner.spaces.base import Params, VariantSpace
from tuner.spaces.cuda_rows import (
    CTYPES,
    FEW_ROWS,
    lanes_per_row,
    mapping_label,
    mode_mappings,
    packs_per_lane,
    powers_of_two_up_to,
    prune_row_mapping,
    row_packs,
    widest_first,
)

__all__ = ["CudaRmsNormSpace", "MODES", "reg_bytes", "col_options", "cols_needed"]

MODES = ("reg", "2pass")
#: the order of the row mappings: a block per row first (few rows: each row on its own SM;
#: many rows: the H200's softmax and reduce winners at hidden sizes), then a warp, then groups
_STRATEGIES = ("block", "warp", "group")
#: packs per lane the order aims at for many rows (softmax won at K = 5120-8191 on the H200
#: with 4-8 packs of 16 bytes per thread, a block of 128-256 threads per row)
_PREFILL_PACKS_PER_LANE = 4


def reg_bytes(threads: int) -> int:
    """Bytes of x one thread may hold in "reg" mode: 256 (16 packs of 16 bytes) at 128
    threads a block, halved with every doubling of the block, so that no instantiation spills
    (ptxas 13.0 for sm_90a, every "reg" variant: at most 189 registers at 128 threads, 122 at
    256, 119 at 512, 64 at 1024, the cap of such a block)."""
    return min(256, 32768 // threads)


def col_options(params: Params, dtype: str) -> list[int]:
    """Packs per lane the "reg" kernel is instantiated for (powers of two up to the budget;
    mirrors ``kMaxCols`` in the template)."""
    pack_bytes = int(params["pack"]) * ELEMENT_SIZE[dtype]
    return powers_of_two_up_to(reg_bytes(int(params["threads"])) // pack_bytes)


def cols_needed(params: Params, k: int) -> int:
    """Packs per lane (a power of two) the "reg" kernel needs for rows of length ``k``
    (mirrors ``cols_needed`` in the template)."""
    return 1 << (packs_per_lane(params, k) - 1).bit_length()


class CudaRmsNormSpace(VariantSpace):
    """``rms_norm_f16_p8_block_t256_reg``: 8-element accesses, a block of 256 threads per row,
    the row's x and w in registers."""

    op = "rms_norm"
    backend = "cuda"
    template = "cuda/rms_norm.cu.j2"

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        for pack in row_packs(dtype, layout):
            for params in mode_mappings(pack, MODES, arch):
                if params["strategy"] != "cluster":
                    yield params

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        reason = prune_row_mapping(params, problem, layout)
        if reason is not None or params["mode"] == "2pass":
            return reason
        k = int(getattr(problem, "k"))  # noqa: B009
        most = col_options(params, dtype)[-1]
        if cols_needed(params, k) > most:
            capacity = lanes_per_row(params) * int(params["pack"]) * most
            return f"k={k} does not fit in registers (at most {capacity} per row)"
        return None

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """Widest pack first; rows in registers before two passes; a block per row, then a
        warp, then groups. Few rows (decode, m <= FEW_ROWS) are latency-bound: the fewest packs
        per lane (the most lanes per row) first. Many rows (prefill) are bandwidth-bound: about
        four 16-byte packs per lane first (loads in flight without heavy registers), then
        fewer threads."""
        m, k = int(getattr(problem, "m")), int(getattr(problem, "k"))  # noqa: B009

        def rank(p: Params) -> tuple[int, int, int, int]:
            per_lane = packs_per_lane(p, k)
            if m <= FEW_ROWS:
                fill = per_lane
            else:
                # distance in powers of two: 2 and 8 packs rank alike, behind 4
                fill = abs(per_lane.bit_length() - _PREFILL_PACKS_PER_LANE.bit_length())
            return (
                MODES.index(p["mode"]),
                _STRATEGIES.index(p["strategy"]),
                fill,
                int(p["threads"]),
            )

        return widest_first(candidates, rank)

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return (
            f"rms_norm_{dtype}_p{params['pack']}_{mapping_label(params)}"
            f"_t{params['threads']}_{params['mode']}"
        )

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        reg = params["mode"] == "reg"
        options = col_options(params, dtype) if reg else []
        return {
            **super().render_context(params, dtype, layout),
            "ctype": CTYPES[dtype],
            "col_options": options,
            "max_cols": options[-1] if reg else 0,
        }
