"""CUDA row reduction (sum, max, mean over the last dim): pack x row mapping x block size."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tuner.problems import Problem
from tuner.spaces.base import Params, VariantSpace
from tuner.spaces.cuda_rows import (
    CTYPES,
    mapping_label,
    prune_row_mapping,
    row_mappings,
    row_packs,
    split_rank,
    widest_first,
)

__all__ = ["CudaReduceSpace"]


class CudaReduceSpace(VariantSpace):
    """``reduce_f16_p8_g4_t256``: 8-element loads, 4 lanes per row, 256 threads per block;
    ``reduce_f16_p8_c4_t256``: a row split over a cluster of 4 CTAs of 256 threads."""

    op = "reduce"
    backend = "cuda"
    template = "cuda/reduce.cu.j2"

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        for pack in row_packs(dtype, layout):
            for strategy, group, threads in row_mappings(arch):
                yield {"pack": pack, "strategy": strategy, "group": group, "threads": threads}

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        return prune_row_mapping(params, problem, layout)

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """Widest pack first; the split rows first with few rows, last otherwise."""
        m = int(getattr(problem, "m"))  # noqa: B009
        return widest_first(candidates, lambda p: split_rank(p, m))

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return f"reduce_{dtype}_p{params['pack']}_{mapping_label(params)}_t{params['threads']}"

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        return {**super().render_context(params, dtype, layout), "ctype": CTYPES[dtype]}
