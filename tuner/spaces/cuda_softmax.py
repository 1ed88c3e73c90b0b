"""CUDA softmax over the last dim: pack x row mapping x block size x (registers | shared
memory | two passes).

"reg" keeps the whole row in registers (one read, one write of global memory) and runs only
while the row fits: each thread holds at most ``max_values(threads)`` floats. "smem" (a block
per row) keeps the row in dynamic shared memory, opted in past 48 KB, and runs while the row
fits in ``SMEM_OPTIN_BYTES``: one read, one write for rows too long for registers (a 50k-entry
f16 vocabulary row is 100 KB). "2pass" reads the row twice (an online max/sum pass, then the
normalising pass) and runs for any k; it is offered for the warp and block mappings only, since
long rows are where it matters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tuner.problems import Problem
from tuner.reference import ELEMENT_SIZE
from tuner.spaces.base import Params, VariantSpace
from tuner.spaces.cuda_rows import (
    CTYPES,
    lanes_per_row,
    mapping_label,
    packs_for,
    prune_row_mapping,
    row_mappings,
    widest_first,
)

__all__ = [
    "CudaSoftmaxSpace",
    "MODES",
    "SMEM_OPTIN_BYTES",
    "max_values",
    "col_options",
    "smem_bytes",
]

MODES = ("reg", "smem", "2pass")
#: dynamic shared memory one block may opt in to on sm_90 (227 KB; sm_80 parts refuse larger
#: rows at run time through ``tunehub_can_run``'s twin check in the launch)
SMEM_OPTIN_BYTES = 227 * 1024


def max_values(threads: int) -> int:
    """Floats one thread may keep in registers: 64K registers per SM bound big blocks."""
    return min(128, 32768 // threads)


def smem_bytes(k: int, pack: int, dtype: str) -> int:
    """Dynamic shared memory the "smem" kernel asks for (mirrors ``smem_bytes`` in the template)."""
    return -(-k // pack) * pack * ELEMENT_SIZE[dtype]


def col_options(params: Params) -> list[int]:
    """Packs per thread the "reg" kernel is instantiated for (powers of two)."""
    most = max(1, max_values(int(params["threads"])) // int(params["pack"]))
    options, cols = [], 1
    while cols <= most:
        options.append(cols)
        cols *= 2
    return options


class CudaSoftmaxSpace(VariantSpace):
    """``softmax_f16_p8_warp_t128_reg``: 8-element accesses, a warp per row, row in registers."""

    op = "softmax"
    backend = "cuda"
    template = "cuda/softmax.cu.j2"

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        if layout != "row" or dtype not in CTYPES:
            return
        for pack in packs_for(dtype):
            for mode in MODES:
                for strategy, group, threads in row_mappings():
                    if mode == "2pass" and strategy == "group":
                        continue
                    if mode == "smem" and strategy != "block":
                        continue
                    yield {
                        "pack": pack,
                        "strategy": strategy,
                        "group": group,
                        "threads": threads,
                        "mode": mode,
                    }

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        reason = prune_row_mapping(params, problem, layout)
        if reason is not None or params["mode"] == "2pass":
            return reason
        k = int(getattr(problem, "k"))  # noqa: B009
        if params["mode"] == "smem":
            need = smem_bytes(k, int(params["pack"]), dtype)
            if need > SMEM_OPTIN_BYTES:
                return f"k={k} needs {need} bytes of shared memory (at most {SMEM_OPTIN_BYTES})"
            return None
        capacity = lanes_per_row(params) * int(params["pack"]) * col_options(params)[-1]
        if k > capacity:
            return f"k={k} does not fit in registers (at most {capacity} per row)"
        return None

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """Widest pack first; within a pack the one-read modes (registers, then shared memory)
        before two passes."""
        ranked = [{**p, "_mode_rank": MODES.index(p["mode"])} for p in candidates]
        ordered = widest_first(ranked, "_mode_rank")
        return [{k: v for k, v in p.items() if k != "_mode_rank"} for p in ordered]

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return (
            f"softmax_{dtype}_p{params['pack']}_{mapping_label(params)}"
            f"_t{params['threads']}_{params['mode']}"
        )

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        reg = params["mode"] == "reg"
        return {
            **super().render_context(params, dtype, layout),
            "ctype": CTYPES[dtype],
            "col_options": col_options(params) if reg else [],
            "max_cols": col_options(params)[-1] if reg else 0,
            "smem_limit": SMEM_OPTIN_BYTES,
        }
