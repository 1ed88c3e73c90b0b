"""CPU conv2d (NHWC) variants: direct (vectors over C) or implicit GEMM (vectors over K).

Direct: ``vc`` lanes over input channels, ``uk`` output channels per pass sharing each x load.
Implicit GEMM: tiles of ``tm`` output pixels x ``bk`` output channels held in registers,
``bc`` input channels per cache block. One compiled variant serves every shape, stride,
padding and dilation (all runtime dims); ``prune`` only drops a variant that would behave
exactly like a smaller sibling on the problem.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from tuner.epilogues import CONV2D_EPILOGUES, NONE, activation_of, name_suffix, params_epilogue
from tuner.problems import Conv2dProblem, Problem
from tuner.spaces.base import Params
from tuner.spaces.cpu_common import (
    STORAGE_TYPES,
    CpuFusedSpace,
    check_dtype_layout,
    smallest_covering,
)

__all__ = ["CpuConv2dSpace", "K_BLOCKS", "C_BLOCKS", "C_VECTORS", "K_UNROLLS", "pixel_tile"]

K_BLOCKS = (8, 16, 32)
C_BLOCKS = (16, 32, 64, 128)
C_VECTORS = (4, 8, 16)
K_UNROLLS = (1, 4)


def pixel_tile(bk: int) -> int:
    """Output pixels per register tile: fewer when each pixel's row of K lanes is wider."""
    return 6 if bk <= 16 else 4


class CpuConv2dSpace(CpuFusedSpace):
    op = "conv2d"
    template = "cpu/conv2d.cpp.j2"
    fused_template = "cpu/conv2d_fused.cpp.j2"
    epilogues = CONV2D_EPILOGUES

    def _plain(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        check_dtype_layout(self.op, dtype, layout, ("nhwc",))
        for bk, bc in itertools.product(K_BLOCKS, C_BLOCKS):
            yield {"algo": "implicit", "bk": bk, "bc": bc, "tm": pixel_tile(bk)}
        for vc, uk in itertools.product(C_VECTORS, K_UNROLLS):
            yield {"algo": "direct", "vc": vc, "uk": uk}

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, Conv2dProblem):
            return f"not a conv2d problem: {type(problem).__name__}"
        if params["algo"] == "implicit":
            cover = smallest_covering(C_BLOCKS, problem.c)
            if cover is not None and params["bc"] > cover:
                return f"bc={params['bc']} acts like bc={cover} when c={problem.c}"
            return None
        # vectors wider than C leave every channel to the scalar tail: all such are alike
        wider = [v for v in C_VECTORS if v > problem.c]
        if params["vc"] in wider and params["vc"] > min(wider):
            return f"vc={params['vc']} acts like vc={min(wider)} when c={problem.c}"
        return None

    def name(self, params: Params, dtype: str, layout: str) -> str:
        if params["algo"] == "implicit":
            name = f"conv2d_{dtype}_{layout}_implicit_bk{params['bk']}_bc{params['bc']}"
        else:
            name = f"conv2d_{dtype}_{layout}_direct_vc{params['vc']}_uk{params['uk']}"
        return name + name_suffix(params)

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        check_dtype_layout(self.op, dtype, layout, ("nhwc",))
        algo = params["algo"]
        if algo not in ("implicit", "direct"):
            raise ValueError(f"unknown conv2d algo {algo!r}")
        context: dict[str, Any] = {
            "algo": algo,
            "dtype": dtype,
            "layout": layout,
            "storage_type": STORAGE_TYPES[dtype],
            "name": self.name(params, dtype, layout),
        }
        if algo == "implicit":
            context.update(bk=int(params["bk"]), bc=int(params["bc"]), tm=int(params["tm"]))
        else:
            context.update(vc=int(params["vc"]), uk=int(params["uk"]))
        epilogue = params_epilogue(params)
        if epilogue != NONE:  # a plain variant's context (and source) stays as it was
            if epilogue not in CONV2D_EPILOGUES:
                raise ValueError(f"unknown epilogue {epilogue!r}")
            context.update(epilogue=epilogue, activation=activation_of(epilogue))
        return context
