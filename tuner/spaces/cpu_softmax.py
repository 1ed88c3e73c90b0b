"""CPU row-softmax variants: pack width, accumulators, two-pass versus online statistics.

One compiled variant serves every (m, k).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from tuner.problems import Problem, SoftmaxProblem
from tuner.spaces.base import Params, VariantSpace
from tuner.spaces.cpu_common import STORAGE_TYPES, check_dtype_layout

__all__ = ["CpuSoftmaxSpace", "ALGORITHMS"]

PACKS = (1, 2, 4, 8)
ACCUMULATORS = (1, 2, 4, 8)
#: twopass: max, then sum of exponentials; online: running max with a rescaled sum (one read)
ALGORITHMS = ("twopass", "online")
#: most elements one main-loop step may cover: more only spills registers
MAX_STEP = 32


class CpuSoftmaxSpace(VariantSpace):
    op = "softmax"
    backend = "cpu"
    template = "cpu/softmax.cpp.j2"

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        check_dtype_layout(self.op, dtype, layout, ("row",))
        for pack, acc, algo in itertools.product(PACKS, ACCUMULATORS, ALGORITHMS):
            if pack * acc > MAX_STEP:
                continue
            yield {"pack": pack, "acc": acc, "algo": algo}

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, SoftmaxProblem):
            return f"not a softmax problem: {type(problem).__name__}"
        step = params["pack"] * params["acc"]
        if step > problem.k:
            return f"main-loop step of {step} elements exceeds the row length k={problem.k}"
        return None

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return f"softmax_{dtype}_p{params['pack']}_a{params['acc']}_{params['algo']}"

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        check_dtype_layout(self.op, dtype, layout, ("row",))
        algo = str(params["algo"])
        if algo not in ALGORITHMS:  # only known enums reach the template
            raise ValueError(f"unknown softmax algorithm {algo!r}")
        return {
            "pack": int(params["pack"]),
            "acc": int(params["acc"]),
            "algo": algo,
            "dtype": dtype,
            "layout": layout,
            "storage_type": STORAGE_TYPES[dtype],
            "name": self.name(params, dtype, layout),
        }
