"""CUDA conv2d fprop variants (NHWC, KRSC filter): CUTLASS 2.x implicit GEMM on sm_80-sm_90,
cuDNN engine configs, and cuBLASLt algorithms for the layers that are a plain GEMM (1x1,
stride 1, no padding): one space whose params name their ``library``.

    space = CudaConv2dSpace()
    for params in space.enumerate("f16", "nhwc", "sm_90"): ...
    space.prune(params, Conv2dProblem(32, 56, 56, 64, 64, 3, 3, pad=1), "f16", "nhwc")

The implicit GEMM is M = n*p*q, N = k, K = r*s*c; the CUTLASS axes are the threadblock tile,
stages, the activation iterator (``opt``: precomputed offsets, ``analytic``: recomputed, fewer
limits) and the channel alignment (8 elements: 16-byte loads; 4: for c or k not a multiple
of 8). One build serves every layer: the whole problem is a run-time argument.

On sm_90 the space also holds CUTLASS 3.x kernels (family ``sm90``, ``conv2d_sm90.cu.j2``: the
conv collective builder, TMA im2col + wgmma; CUTLASS's one sm90 conv schedule, so the axes are
the tile and the cluster). They are compile-checked and verified on an H200 (one variant, two
layers, 2026-12-04) but not yet benchmarked, so ``order`` puts them last: a default budget does
not reach them until a run shows where they win.

cuDNN engine configs depend on the shape and GPU, so they are not enumerated: the backend
discovers them at tuning time (:mod:`tuner.spaces.cuda_conv2d_cudnn`); for a 1x1 stride-1
unpadded layer a second discovery build asks cuBLASLt for the algorithms of its GEMM
(:mod:`tuner.spaces.cuda_conv2d_cublaslt`). ``order`` merges the families: the vendor default
(cuDNN heuristic mode A's #0) first, so every budget holds it, then the #0 of modes INSTANT
(what torch's cuDNN path runs) and B, then cuBLASLt's first algorithms (heuristic order; 1x1
layers only), then the CUTLASS tiles that best fill the SMs for this shape (small batch: small
tiles), then the rest of cuDNN's configs merged by rank, the rest of cuBLASLt's, the rest of
CUTLASS.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from tuner.epilogues import CONV2D_EPILOGUES, NONE, activation_of, name_suffix, params_epilogue
from tuner.errors import InvalidRequestError
from tuner.problems import Conv2dProblem, Problem, problem_epilogue
from tuner.spaces import cuda_conv2d_cublaslt as convlt
from tuner.spaces import cuda_conv2d_cudnn as dnn
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces._cutlass_common import (
    SM90_SMEM_BYTES,
    check_dtype,
    elements_per_16_bytes,
    sm80_class_smem_bytes,
    sm80_tile,
    sm_number,
)
from tuner.spaces._vendor_discovery import Discovery, VendorDiscoverySpace
from tuner.spaces.base import Params

__all__ = ["CudaConv2dSpace", "DEFAULT_MAX_VARIANTS", "LIBRARIES"]

#: the vendor default, the CUTLASS head and the next cuDNN configs fit in this
DEFAULT_MAX_VARIANTS = 16
#: ``order``: cuDNN configs tried first (the #0 of heuristic modes A, INSTANT and B)
_VENDOR_HEAD = 3
#: ``order``: cuBLASLt algorithms (1x1 layers) tried right after them
_CUBLASLT_HEAD = 3
#: ``order``: CUTLASS kernels tried right after those
_CUTLASS_HEAD = 3
#: ``order``: estimates within this factor of the best form one band (then the next...)
_ORDER_BAND = 1.25
#: ``order``: the tile's share of peak rate rises with its arithmetic intensity
#: tm*tn/(tm+tn) (operand bytes per MMA); this intensity gives half of it
_HALF_RATE_INTENSITY = 32.0
#: the library each template family belongs to (what a client calls)
LIBRARIES = {
    "sm80": "cutlass",
    "sm90": "cutlass",
    dnn.FAMILY: "cudnn",
    convlt.FAMILY: convlt.LIBRARY,
}
SM90_TEMPLATE = "cuda/conv2d_sm90.cu.j2"
#: sm_90 CUTLASS 3.x tiles (M, N, K): one consumer warpgroup holds the M x N accumulators
_SM90_TILES = ((128, 128, 64), (128, 64, 64), (64, 128, 64), (64, 64, 64))
_SM90_CLUSTERS = ((1, 1), (2, 1), (1, 2))

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


class CudaConv2dSpace(VendorDiscoverySpace):
    op = "conv2d"
    backend = "cuda"
    template = "cuda/conv2d.cu.j2"
    default_max_variants = DEFAULT_MAX_VARIANTS
    #: the build that finds the cuDNN engine configs of a shape (the backend runs it)
    discovery_params: Params = dnn.DISCOVERY_PARAMS
    #: how many engine configs discovery keeps
    requested_algos: int = dnn.REQUESTED_CONFIGS
    vendor_library = "cudnn"
    vendor_configs = "cuDNN engine configs"
    vendor = dnn
    #: the vendor library the discovered variants call (toolchain key, build flags)
    discovery_library = "cudnn"
    # 1x1 layers may run as cuBLASLt GEMMs (``discoveries``)
    other_vendor_libraries = ("cublas",)

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
                    **sm80_tile(tm, tn, tk, stages),
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

        ordered = sorted(out, key=rank)
        if sm == 90:
            ordered += _sm90_params()
        return ordered

    def discoveries(self, problem: Problem) -> list[Discovery]:
        """cuDNN's build; for a layer that is a plain GEMM, cuBLASLt's after it. A fused
        problem: cuDNN's build of the fused graph alone (``tuner.epilogues``; the CUTLASS and
        cuBLASLt conv families fuse nothing)."""
        epilogue = problem_epilogue(problem)
        if epilogue != NONE:
            params = {**self.discovery_params, "epilogue": epilogue}
            return [Discovery(params, self.discovery_library, self.requested_algos)]
        found = super().discoveries(problem)
        if convlt.unsupported_reason(problem) is None:
            found.append(convlt.discovery())
        return found

    def from_discovery(
        self, found: list[dict[str, Any]], discovery: Discovery | None = None
    ) -> list[Params]:
        if discovery is not None and discovery.params == convlt.DISCOVERY_PARAMS:
            return [{"library": convlt.LIBRARY, **p} for p in lt.params_from_discovery(found)]
        plain = super().from_discovery(found, discovery)
        epilogue = params_epilogue(discovery.params) if discovery is not None else NONE
        return plain if epilogue == NONE else [{**p, "epilogue": epilogue} for p in plain]

    def discovered_reason(self, params: Params, dtype: str, layout: str, arch: str) -> str | None:
        if params.get("library") != convlt.LIBRARY:
            epilogue = params_epilogue(params)
            if epilogue not in CONV2D_EPILOGUES:
                return f"unknown conv2d epilogue {epilogue!r}"
            plain = {k: v for k, v in params.items() if k != "epilogue"}
            return super().discovered_reason(plain, dtype, layout, arch)
        self.enumerate(dtype, layout, arch)  # InvalidRequestError for a dtype/layout/arch it lacks
        return lt.invalid_reason({k: v for k, v in params.items() if k != "library"})

    def template_for(self, params: Params) -> str:
        if params["family"] in (dnn.FAMILY, dnn.DISCOVERY_FAMILY):
            return dnn.TEMPLATE
        if params["family"] in (convlt.FAMILY, convlt.DISCOVERY_FAMILY):
            return convlt.TEMPLATE
        if params["family"] == "sm90":
            return SM90_TEMPLATE
        return self.template

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        context = super().render_context(params, dtype, layout)
        epilogue = params_epilogue(params)  # the cuDNN template reads it; the others do not
        context.update(epilogue=epilogue, activation=activation_of(epilogue))
        if params["family"] == dnn.FAMILY:
            context["knob_pairs"] = dnn.knobs(params)
        if params["family"] in (convlt.FAMILY, convlt.DISCOVERY_FAMILY):
            context["layout"] = convlt.GEMM_LAYOUT  # the GEMM template's operand layout
        return context

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, Conv2dProblem):
            return "not a conv2d problem"
        if params.get("family") == convlt.FAMILY:
            reason = lt.invalid_reason({k: v for k, v in params.items() if k != "library"})
            return reason if reason is not None else convlt.unsupported_reason(problem)
        if params.get("family") in (dnn.FAMILY, "sm90"):
            if params["family"] == dnn.FAMILY:
                reason = dnn.invalid_reason(
                    {k: v for k, v in params.items() if k not in ("library", "epilogue")}
                )
                if reason is not None:
                    return reason
            # 16-byte aligned channel rows (cuDNN's tensor descriptors, TMA's strides)
            align = elements_per_16_bytes(dtype)
            for dim in ("c", "k"):
                if getattr(problem, dim) % align:
                    return f"{dim}={getattr(problem, dim)} is not a multiple of {align}"
            return None
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

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """The families merged (see the module doc); cuDNN keeps its heuristics' order."""
        if not isinstance(problem, Conv2dProblem) or not candidates:
            return list(candidates)
        vendor = [p for p in candidates if p.get("family") == dnn.FAMILY]
        gemm = [p for p in candidates if p.get("family") == convlt.FAMILY]
        cutlass = self._order_cutlass([p for p in candidates if p.get("family") == "sm80"], problem)
        # not yet measured on a GPU: last, in the SM-fill order (see the module doc)
        sm90 = self._order_cutlass([p for p in candidates if p.get("family") == "sm90"], problem)
        return [
            *vendor[:_VENDOR_HEAD],
            *gemm[:_CUBLASLT_HEAD],
            *cutlass[:_CUTLASS_HEAD],
            *vendor[_VENDOR_HEAD:],
            *gemm[_CUBLASLT_HEAD:],
            *cutlass[_CUTLASS_HEAD:],
            *sm90,
        ]

    def _order_cutlass(self, candidates: list[Params], problem: Conv2dProblem) -> list[Params]:
        """CUTLASS candidates by a rough time estimate on ``problem`` (bands of
        ``_ORDER_BAND``; inside a band, ``enumerate``'s order): a 128x128 tile leaves most
        SMs idle on a batch-1 7x7 layer, where 64x64 tiles fill them."""
        if not candidates:
            return []
        estimates = [_cutlass_estimate(p, problem, self.sm_count) for p in candidates]
        best = min(estimates)
        # inside a band each tile's first (enumerate-ranked) variant goes first, so the head
        # holds several tiles rather than one tile's stage counts
        repeat: list[int] = []
        seen: dict[tuple[int, int, int], int] = {}
        for p in candidates:
            tile = (p["tile_m"], p["tile_n"], p["tile_k"])
            repeat.append(seen.get(tile, 0))
            seen[tile] = repeat[-1] + 1

        def key(i: int) -> tuple[int, int, int]:
            band = math.floor(math.log(estimates[i] / best) / math.log(_ORDER_BAND))
            return (band, repeat[i], i)

        return [candidates[i] for i in sorted(range(len(candidates)), key=key)]

    def name(self, params: Params, dtype: str, layout: str) -> str:
        if params.get("family") in (dnn.FAMILY, dnn.DISCOVERY_FAMILY):
            return dnn.name(params, dtype, layout) + name_suffix(params)
        if params.get("family") in (convlt.FAMILY, convlt.DISCOVERY_FAMILY):
            return convlt.name(params, dtype, layout)
        if params["family"] == "sm90":
            tile = f"{params['tile_m']}x{params['tile_n']}x{params['tile_k']}"
            return (
                f"conv2d_{dtype}_{layout}_sm90_{tile}_c{params['cluster_m']}x{params['cluster_n']}"
            )
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


def _cutlass_estimate(params: Params, problem: Conv2dProblem, sm_count: int) -> float:
    """Relative time of a CUTLASS tile on ``problem``: waves of CTAs over the SMs, each CTA's
    work (tile area) divided by the share of peak rate its arithmetic intensity reaches."""
    tm, tn = params["tile_m"], params["tile_n"]
    rows = problem.n * problem.p * problem.q
    ctas = math.ceil(rows / tm) * math.ceil(problem.k / tn)
    waves = math.ceil(ctas / sm_count)
    intensity = tm * tn / (tm + tn)
    rate = intensity / (intensity + _HALF_RATE_INTENSITY)
    return waves * tm * tn / rate


def _sm90_params() -> list[Params]:
    return [
        {
            "library": "cutlass",
            "family": "sm90",
            "tile_m": tm,
            "tile_n": tn,
            "tile_k": tk,
            "cluster_m": cm,
            "cluster_n": cn,
        }
        for (tm, tn, tk), (cm, cn) in itertools.product(_SM90_TILES, _SM90_CLUSTERS)
    ]
