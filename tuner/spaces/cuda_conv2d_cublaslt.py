"""cuBLASLt algorithms as conv2d variants: the ``cublaslt`` family of :class:`CudaConv2dSpace`,
for the layers that are a GEMM as they lie in memory (1x1 filter, stride 1, no padding,
dilation 1; the space has no groups):

    x NHWC [n, h, w, c]  = A [m = n*h*w, k = c], row-major
    w KRSC [k, 1, 1, c]  = B stored [n = k, k = c]  (layout rcr: B column-major)
    y NPQK [n, h, w, k]  = D [m, n = k], row-major  (p = h, q = w)

A variant is the GEMM space's cuBLASLt variant (:mod:`tuner.spaces.cuda_gemm_cublaslt`: the
same params, attributes, validation and discovery answer) rendered through a thin wrapper
(``conv2d_cublaslt.cu.j2``) that includes the GEMM template for layout rcr and maps the conv2d
dims to (m, n, k) at its ABI. Its algorithms are discovered for that GEMM shape by a second
discovery build of the conv2d space (:func:`discovery`), after cuDNN's, so the cuDNN default
stays the vendor default:

    {"library": "cublaslt", "family": "cublaslt", "algo": 66, "tile": 18, "stages": 35, ...}
"""

from __future__ import annotations

from tuner.problems import Conv2dProblem, GemmProblem, Problem
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces._vendor_discovery import Discovery
from tuner.spaces.base import Params

__all__ = [
    "FAMILY",
    "DISCOVERY_FAMILY",
    "DISCOVERY_PARAMS",
    "LIBRARY",
    "TEMPLATE",
    "GEMM_LAYOUT",
    "discovery",
    "gemm_problem",
    "unsupported_reason",
    "name",
]

FAMILY = lt.FAMILY
DISCOVERY_FAMILY = lt.DISCOVERY_FAMILY
DISCOVERY_PARAMS: Params = {"family": DISCOVERY_FAMILY}
#: ``params["library"]`` of the family (what a client calls)
LIBRARY = "cublaslt"
TEMPLATE = "cuda/conv2d_cublaslt.cu.j2"
#: the GEMM layout the conv2d operands have (A row-major, B column-major, D row-major)
GEMM_LAYOUT = "rcr"


def unsupported_reason(problem: Problem) -> str | None:
    """Why ``problem`` is not a plain GEMM in memory (None when it is)."""
    if not isinstance(problem, Conv2dProblem):
        return "not a conv2d problem"
    p = problem
    if (p.r, p.s, p.stride, p.pad, p.dilation) != (1, 1, 1, 0, 1):
        return (
            "cuBLASLt runs 1x1, stride-1, unpadded, undilated conv2d only (a GEMM as stored), "
            f"not r={p.r} s={p.s} stride={p.stride} pad={p.pad} dilation={p.dilation}"
        )
    return None


def gemm_problem(problem: Conv2dProblem) -> GemmProblem:
    """The GEMM a 1x1 stride-1 conv2d is: m = n*h*w, n = k, k = c."""
    reason = unsupported_reason(problem)
    if reason is not None:
        raise ValueError(reason)
    return GemmProblem(m=problem.n * problem.h * problem.w, n=problem.k, k=problem.c)


def discovery() -> Discovery:
    """The build that asks cuBLASLt for the algorithms of a 1x1 conv2d's GEMM."""
    return Discovery(DISCOVERY_PARAMS, "cublas", lt.REQUESTED_ALGOS)


def name(params: Params, dtype: str, layout: str) -> str:
    """The GEMM variant's name with the op and layout of the conv2d, e.g.
    ``conv2d_f16_nhwc_lt_a66_t18_s35_k1_r0_w0_c0_i0_cl2``."""
    gemm = lt.name(params, dtype, layout)
    return "conv2d_" + gemm.removeprefix("gemm_")
