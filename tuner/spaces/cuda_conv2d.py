"""CUDA conv2d fprop variants (NHWC, KRSC filter): CUTLASS 2.x implicit GEMM on sm_80-sm_90.

    space = CudaConv2dSpace()
    for params in space.enumerate("f16", "nhwc", "sm_90"): ...
    space.prune(params, Conv2dProblem(32, 56, 56, 64, 64, 3, 3, pad=1), "f16", "nhwc")

The implicit GEMM is M = n*p*q, N = k, K = r*s*c; the axes are the threadblock tile, stages,
the activation iterator (``opt``: precomputed offsets, ``analytic``: recomputed, fewer
limits) and the channel alignment (8 elements: 16-byte loads; 4: for c or k not a multiple
of 8). One build serves every layer: the whole problem is a run-time argument.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from tuner.errors import InvalidRequestError
from tuner.problems import Conv2dProblem, Problem
from tuner.spaces._cutlass_common import (
    SM90_SMEM_BYTES,
    check_dtype,
    elements_per_16_bytes,
    sm80_class_smem_bytes,
    sm_number,
)
from tuner.spaces.base import Params, VariantSpace

__all__ = ["CudaConv2dSpace", "DEFAULT_MAX_VARIANTS"]

DEFAULT_MAX_VARIANTS = 12

#: threadblock tiles (M, N, K), strongest first
_TILES = (
    (128, 128, 64),
    (128, 128, 32),
    (256, 128, 32),
    (128, 256, 32),
    (128, 64, 32),
    (64, 128, 32),
    (128, 64, 64),
    (64, 128, 64),
    (64, 64, 64),
    (64, 64, 32),
)
_STAGES = (3, 4, 5)
_ITERATORS = ("opt", "analytic")
_ALIGNMENTS = (8, 4)
_SWIZZLES = (1, 4)


def _smem_limit(sm: int) -> int:
    return SM90_SMEM_BYTES if sm >= 90 else sm80_class_smem_bytes(sm)


class CudaConv2dSpace(VariantSpace):
    op = "conv2d"
    backend = "cuda"
    template = "cuda/conv2d.cu.j2"
    default_max_variants = DEFAULT_MAX_VARIANTS

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        check_dtype(dtype, "conv2d")
        if layout != "nhwc":
            raise InvalidRequestError("layout", f"the CUTLASS conv2d takes nhwc, not {layout!r}")
        sm = sm_number(arch)
        if sm not in (80, 86, 87, 89, 90):
            raise InvalidRequestError("device.arch", f"no CUTLASS conv2d template for {arch}")
        out: list[Params] = []
        for align, iterator, swizzle, (tm, tn, tk), stages in itertools.product(
            _ALIGNMENTS, _ITERATORS, _SWIZZLES, _TILES, _STAGES
        ):
            if stages * (tm + tn) * tk * 2 > _smem_limit(sm):
                continue
            out.append(
                {
                    "tile_m": tm,
                    "tile_n": tn,
                    "tile_k": tk,
                    "warp_m": 64 if tm >= 128 else 32,
                    "warp_n": 64 if tn >= 128 else 32,
                    "stages": stages,
                    "iterator": iterator,
                    "align": align,
                    "swizzle": swizzle,
                }
            )

        def rank(p: Params) -> tuple[Any, ...]:
            return (
                p["align"] != 8,
                p["iterator"] != "opt",
                p["swizzle"] != 1,
                abs(p["stages"] - 3),
                _TILES.index((p["tile_m"], p["tile_n"], p["tile_k"])),
            )

        return sorted(out, key=rank)

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, Conv2dProblem):
            return "not a conv2d problem"
        align = params["align"]
        for dim in ("c", "k"):
            if getattr(problem, dim) % align:
                return f"{dim}={getattr(problem, dim)} is not a multiple of {align}"
        if (
            align < elements_per_16_bytes(dtype)
            and problem.c % elements_per_16_bytes(dtype) == 0
            and problem.k % elements_per_16_bytes(dtype) == 0
        ):
            return "channels allow 16-byte loads: the narrower alignment only loses"
        return None

    def name(self, params: Params, dtype: str, layout: str) -> str:
        parts = [
            f"conv2d_{dtype}_{layout}_{params['tile_m']}x{params['tile_n']}x{params['tile_k']}",
            f"w{params['warp_m']}x{params['warp_n']}",
            f"s{params['stages']}",
            params["iterator"],
            f"a{params['align']}",
        ]
        if params["swizzle"] != 1:
            parts.append(f"sw{params['swizzle']}")
        return "_".join(parts)
