"""CPU row-softmax variants: pack width, accumulators, two-pass versus online statistics.

One compiled variant serves every (m, k).
"""

from __future__ import annotations

from typing import Any

from tuner.problems import SoftmaxProblem
from tuner.spaces.base import Params
from tuner.spaces.cpu_common import CpuRowSpace

__all__ = ["CpuSoftmaxSpace", "ALGORITHMS"]

PACKS = (1, 2, 4, 8)
ACCUMULATORS = (1, 2, 4, 8)
#: twopass: max, then sum of exponentials; online: running max with a rescaled sum (one read)
ALGORITHMS = ("twopass", "online")
#: most elements one main-loop step may cover: more only spills registers
MAX_STEP = 32


class CpuSoftmaxSpace(CpuRowSpace):
    op = "softmax"
    template = "cpu/softmax.cpp.j2"
    axes = {"pack": PACKS, "acc": ACCUMULATORS, "algo": ALGORITHMS}
    step_axes = ("pack", "acc")
    max_step = MAX_STEP
    problem_type = SoftmaxProblem
    problem_noun = "a softmax"

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return f"softmax_{dtype}_p{params['pack']}_a{params['acc']}_{params['algo']}"

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        context = super().render_context(params, dtype, layout)
        algo = str(params["algo"])
        if algo not in ALGORITHMS:  # only known enums reach the template
            raise ValueError(f"unknown softmax algorithm {algo!r}")
        return {**context, "algo": algo}
