"""CPU row-reduce variants: pack width, independent accumulators, unroll, per storage dtype.

One compiled variant serves every (m, k) and every kind (sum, max, mean are a runtime code).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from tuner.abi import REDUCE_KIND_CODES
from tuner.problems import Problem, ReduceProblem
from tuner.spaces.base import Params, VariantSpace
from tuner.spaces.cpu_common import STORAGE_TYPES, check_dtype_layout

__all__ = ["CpuReduceSpace", "REDUCE_KIND_CODES"]


PACKS = (1, 2, 4, 8)
ACCUMULATORS = (1, 2, 4, 8)
UNROLLS = (1, 2, 4)
#: most elements one main-loop step may cover: more only bloats code and spills registers
MAX_STEP = 128


class CpuReduceSpace(VariantSpace):
    op = "reduce"
    backend = "cpu"
    template = "cpu/reduce.cpp.j2"

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        check_dtype_layout(self.op, dtype, layout, ("row",))
        for pack, acc, unroll in itertools.product(PACKS, ACCUMULATORS, UNROLLS):
            if pack * acc * unroll > MAX_STEP:
                continue
            yield {"pack": pack, "acc": acc, "unroll": unroll}

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, ReduceProblem):
            return f"not a reduce problem: {type(problem).__name__}"
        step = params["pack"] * params["acc"] * params["unroll"]
        if step > problem.k:
            return f"main-loop step of {step} elements exceeds the row length k={problem.k}"
        return None

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return f"reduce_{dtype}_p{params['pack']}_a{params['acc']}_u{params['unroll']}"

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        check_dtype_layout(self.op, dtype, layout, ("row",))
        return {
            "pack": int(params["pack"]),
            "acc": int(params["acc"]),
            "unroll": int(params["unroll"]),
            "dtype": dtype,
            "layout": layout,
            "storage_type": STORAGE_TYPES[dtype],
            "name": self.name(params, dtype, layout),
        }
