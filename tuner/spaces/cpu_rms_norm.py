"""CPU RMSNorm variants: pack width x independent accumulators of the row's sum of squares.

One compiled variant serves every (m, k) and every eps (a run-time dim, ``tuner.abi``).
"""

from __future__ import annotations

from tuner.problems import Problem, RmsNormProblem
from tuner.spaces.base import Params
from tuner.spaces.cpu_common import CpuRowSpace

__all__ = ["CpuRmsNormSpace"]

PACKS = (1, 2, 4, 8)
ACCUMULATORS = (1, 2, 4, 8)
#: most elements one main-loop step may cover: more only spills registers
MAX_STEP = 32


class CpuRmsNormSpace(CpuRowSpace):
    op = "rms_norm"
    template = "cpu/rms_norm.cpp.j2"
    axes = {"pack": PACKS, "acc": ACCUMULATORS}
    step_axes = ("pack", "acc")
    max_step = MAX_STEP
    problem_type = RmsNormProblem
    problem_noun = "an rms_norm"

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """Widest pack first (the likely winner on any SIMD host), then more accumulators."""
        return sorted(candidates, key=lambda p: (-int(p["pack"]), -int(p["acc"])))

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return f"rms_norm_{dtype}_p{params['pack']}_a{params['acc']}"
