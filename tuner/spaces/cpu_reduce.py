"""CPU row-reduce variants: pack width, independent accumulators, unroll, per storage dtype.

One compiled variant serves every (m, k) and every kind (sum, max, mean are a runtime code).
"""

from __future__ import annotations

from tuner.abi import REDUCE_KIND_CODES
from tuner.problems import ReduceProblem
from tuner.spaces.base import Params
from tuner.spaces.cpu_common import CpuRowSpace

__all__ = ["CpuReduceSpace", "REDUCE_KIND_CODES"]


PACKS = (1, 2, 4, 8)
ACCUMULATORS = (1, 2, 4, 8)
UNROLLS = (1, 2, 4)
#: most elements one main-loop step may cover: more only bloats code and spills registers
MAX_STEP = 128


class CpuReduceSpace(CpuRowSpace):
    op = "reduce"
    template = "cpu/reduce.cpp.j2"
    axes = {"pack": PACKS, "acc": ACCUMULATORS, "unroll": UNROLLS}
    step_axes = ("pack", "acc", "unroll")
    max_step = MAX_STEP
    problem_type = ReduceProblem
    problem_noun = "a reduce"

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return f"reduce_{dtype}_p{params['pack']}_a{params['acc']}_u{params['unroll']}"
