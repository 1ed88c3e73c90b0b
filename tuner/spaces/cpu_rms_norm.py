"""CPU RMSNorm variants: pack width x independent accumulators of the row's sum of squares.

One compiled variant serves every (m, k) and every eps (a run-time dim, ``tuner.abi``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from tuner.problems import Problem, RmsNormProblem
from tuner.spaces.base import Params, VariantSpace
from tuner.spaces.cpu_common import STORAGE_TYPES, check_dtype_layout

__all__ = ["CpuRmsNormSpace"]

PACKS = (1, 2, 4, 8)
ACCUMULATORS = (1, 2, 4, 8)
#: most elements one main-loop step may cover: more only spills registers
MAX_STEP = 32


class CpuRmsNormSpace(VariantSpace):
    op = "rms_norm"
    backend = "cpu"
    template = "cpu/rms_norm.cpp.j2"

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        check_dtype_layout(self.op, dtype, layout, ("row",))
        for pack, acc in itertools.product(PACKS, ACCUMULATORS):
            if pack * acc > MAX_STEP:
                continue
            yield {"pack": pack, "acc": acc}

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, RmsNormProblem):
            return f"not an rms_norm problem: {type(problem).__name__}"
        step = params["pack"] * params["acc"]
        if step > problem.k:
            return f"main-loop step of {step} elements exceeds the row length k={problem.k}"
        return None

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """Widest pack first (the likely winner on any SIMD host), then more accumulators."""
        return sorted(candidates, key=lambda p: (-int(p["pack"]), -int(p["acc"])))

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return f"rms_norm_{dtype}_p{params['pack']}_a{params['acc']}"

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        check_dtype_layout(self.op, dtype, layout, ("row",))
        return {
            "pack": int(params["pack"]),
            "acc": int(params["acc"]),
            "dtype": dtype,
            "layout": layout,
            "storage_type": STORAGE_TYPES[dtype],
            "name": self.name(params, dtype, layout),
        }
