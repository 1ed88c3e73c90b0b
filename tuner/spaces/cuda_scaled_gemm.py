"""FP8 GEMM with scales (``scaled_gemm``) on CUDA: three families, one space.

    space = CudaScaledGemmSpace()
    space.enumerate("e4m3", "rcr", "sm_90")      # CUTLASS and decode params, stable order
    space.prune(params, ScaledGemmProblem(8, 4096, 4096), "e4m3", "rcr")

- ``cublaslt_fp8`` (library ``cublaslt``): cuBLASLt's FP8 algorithms, discovered per shape by a
  build of ``scaled_gemm_cublaslt.cu.j2``: the heuristic asked with 32 MiB of workspace (its
  first pick is the vendor default) and with 1 MiB (what ``torch._scaled_mm`` asks with: its
  cuBLASLt workspace; the ranking can differ), the two first picks first, then the rest of each
  list, each algorithm once, then at most ``EXTRA_ALGOS`` of the FP8 configurations enumerated
  beyond them as for the f16 family (``cublaslt_discovery.cuh``, ranked by
  :mod:`tuner.spaces._cublaslt_extras`); named by their attributes as the f16 family is
  (:mod:`tuner.spaces.cuda_gemm_cublaslt`), each also with fast accumulation (``fast_accum``
  1: ``CUBLASLT_MATMUL_DESC_FAST_ACCUM``, as ``torch._scaled_mm(use_fast_accum=True)``; the
  default, 0, is what ``torch._scaled_mm`` runs unless asked). Block scaling uses cuBLASLt 13's
  ``CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F`` (weights) and ``VEC128_32F`` (activations).
- ``sm90_fp8`` (library ``cutlass``): CUTLASS 3.x warp-specialized TMA + wgmma kernels, tile x
  cluster x schedule (cooperative, ping-pong) x accumulation (per-tensor: ``fast``, the wgmma
  accumulator alone, or ``promoted`` into f32 every K tile; block scaling: CUTLASS's
  ``...FP8BlockScaledAccum`` kernels, groupwise 1x128x128) x raster x tile scheduler
  (persistent; stream-K for cooperative per-tensor kernels), proven configurations first.
- ``decode_fp8`` (library ``tunehub``): ours, for m <= 16: each warp streams rows of the FP8
  weights in 16-byte vectors and dequantizes in registers, multiplying on CUDA cores
  (``scaled_gemm_decode.cu.j2``); bound by its f32 FMAs from m ~ 8 on.
- ``swapab_fp8`` (library ``tunehub``): ours, for m <= 32 and k % 64 == 0: the weights on the M
  side of ``mma.sync.m16n8k32.e4m3`` (FP8 tensor cores, sm_89+), A's rows on its N side, both
  loaded from global memory in 16-byte vectors, K cut across the CTA's warps
  (``scaled_gemm_swapab.cu.j2``).

Every params dict names ``out_dtype`` and ``scaling``: a variant is built for one of each (one
compile serves every m, n, k) and ``prune`` keeps those of the problem's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from tuner.errors import InvalidRequestError
from tuner.problems import SCALED_GEMM_OUT_DTYPES, SCALINGS, Problem, ScaledGemmProblem
from tuner.spaces import _fp8_decode as fp8_decode
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces._cutlass_common import SM90_SMEM_BYTES, sm90_tile, sm_number
from tuner.spaces._fp8_decode import DECODE_FAMILY, DECODE_MAX_M, SWAPAB_FAMILY, SWAPAB_MAX_M
from tuner.spaces._vendor_discovery import Discovery, VendorDiscoverySpace
from tuner.spaces.base import Params

__all__ = [
    "CudaScaledGemmSpace",
    "FAMILIES",
    "LIBRARIES",
    "DECODE_MAX_M",
    "SWAPAB_MAX_M",
    "DEFAULT_MAX_VARIANTS",
    "head_size",
]

LT_FAMILY = "cublaslt_fp8"
LT_DISCOVERY_FAMILY = "cublaslt_fp8_discover"
SM90_FAMILY = "sm90_fp8"
FAMILIES = (LT_FAMILY, SM90_FAMILY, DECODE_FAMILY, SWAPAB_FAMILY)
LIBRARIES = {
    LT_FAMILY: "cublaslt",
    SM90_FAMILY: "cutlass",
    DECODE_FAMILY: "tunehub",
    SWAPAB_FAMILY: "tunehub",
}
_TEMPLATES = {
    LT_FAMILY: "cuda/scaled_gemm_cublaslt.cu.j2",
    LT_DISCOVERY_FAMILY: "cuda/scaled_gemm_cublaslt.cu.j2",
    SM90_FAMILY: "cuda/scaled_gemm_sm90.cu.j2",
    DECODE_FAMILY: "cuda/scaled_gemm_decode.cu.j2",
    SWAPAB_FAMILY: "cuda/scaled_gemm_swapab.cu.j2",
}
DEFAULT_MAX_VARIANTS = 16

_SM90_TILE_M = (64, 128, 256)
_SM90_TILE_N = (64, 128, 256)
#: FP8 wgmma takes K 32 per instruction; 128 bytes of K per stage row is TMA's swizzle width
_SM90_TILE_K = (128,)
_SM90_CLUSTERS = ((1, 1), (2, 1), (1, 2))
_SM90_SCHEDULES = ("coop", "pingpong")
_SM90_ACCUMS = ("fast", "promoted")
_SM90_RASTERS = ("auto", "m", "n")
#: persistent tiles, or stream-K (cooperative per-tensor kernels: the last wave's K split)
_SM90_SCHEDULERS = ("persistent", "streamk")
#: configurations tried first where their tile M suits m: (tile M, tile N, cluster, schedule,
#: accumulation, scheduler); the FP8 analogues of the f16 space's proven seeds
_SM90_SEEDS: tuple[tuple[int, int, tuple[int, int], str, str, str], ...] = (
    (128, 256, (2, 1), "coop", "fast", "persistent"),
    (128, 128, (1, 2), "coop", "fast", "persistent"),
    (256, 128, (2, 1), "coop", "fast", "persistent"),
    (128, 256, (1, 1), "coop", "fast", "streamk"),
    (128, 128, (1, 1), "coop", "promoted", "persistent"),
    (64, 128, (1, 1), "pingpong", "fast", "persistent"),
    (64, 256, (1, 1), "pingpong", "fast", "persistent"),
    (128, 128, (1, 2), "coop", "promoted", "persistent"),
    (64, 128, (1, 1), "pingpong", "promoted", "persistent"),
)
_MAX_ACCUMULATORS_PER_THREAD = 128
_TMA_EPILOGUE_SMEM = 16 * 1024

#: ``order``: the decode family first (after the vendor default) for m up to this
_DECODE_HEAD_MAX_M = 16
_SWAPAB_HEAD = 4
_DECODE_HEAD = 3
_SM90_HEAD = 4


def head_size(m: int) -> int:
    """How many of our kernels ``order`` puts right after the vendor default for ``m`` rows:
    the swap-AB head (m up to SWAPAB_MAX_M), the decode head (m up to 16), the CUTLASS head.
    A budget of ``1 + head_size(m) + x`` reaches the default, that head and ``x`` more of
    cuBLASLt's algorithms."""
    swapab = _SWAPAB_HEAD if m <= SWAPAB_MAX_M else 0
    decode = _DECODE_HEAD if m <= _DECODE_HEAD_MAX_M else 0
    return swapab + decode + _SM90_HEAD


def _sm90_reason(p: Params) -> str | None:
    tm, tn, tk = p["tile_m"], p["tile_n"], p["tile_k"]
    threads = 256 if p["schedule"] == "coop" else 128
    if p["schedule"] == "coop" and tm < 128:
        return "cooperative needs tile M >= 128"
    if tm * tn // threads > _MAX_ACCUMULATORS_PER_THREAD:
        return "tile holds too many accumulators per thread"
    if 2 * (tm + tn) * tk + _TMA_EPILOGUE_SMEM > SM90_SMEM_BYTES:  # 1-byte FP8 stages
        return "two pipeline stages do not fit in shared memory"
    if p["scheduler"] == "streamk" and (p["schedule"] != "coop" or p["scaling"] != "per_tensor"):
        return "stream-K: cooperative per-tensor kernels"
    if p["scaling"] == "block":
        if tn != 128:
            return "block scaling's 128-wide weight blocks: tile N must be 128"
        if p["accum"] != "promoted":
            return "block-scaled kernels accumulate each K tile's partials in f32 (promoted)"
    return None


def _sm90_params() -> list[Params]:
    out: list[Params] = []
    for scaling, out_dtype, tm, tn, tk, (
        cm,
        cn,
    ), schedule, accum, raster, sched in itertools.product(
        SCALINGS,
        SCALED_GEMM_OUT_DTYPES,
        _SM90_TILE_M,
        _SM90_TILE_N,
        _SM90_TILE_K,
        _SM90_CLUSTERS,
        _SM90_SCHEDULES,
        _SM90_ACCUMS,
        _SM90_RASTERS,
        _SM90_SCHEDULERS,
    ):
        params: Params = {
            "library": "cutlass",
            "family": SM90_FAMILY,
            "out_dtype": out_dtype,
            "scaling": scaling,
            **sm90_tile(tm, tn, tk, cm, cn, schedule),
            "accum": accum,
            "raster": raster,
            "swizzle": 1,
            "scheduler": sched,
        }
        if _sm90_reason(params) is None:
            out.append(params)

    def rank(p: Params) -> tuple[Any, ...]:
        return (
            p["raster"] != "auto",
            abs(p["tile_m"] * p["tile_n"] - 128 * 256),
            _SM90_ACCUMS.index(p["accum"]),
            _SM90_SCHEDULES.index(p["schedule"]),
            _SM90_CLUSTERS.index((p["cluster_m"], p["cluster_n"])),
            _SM90_SCHEDULERS.index(p["scheduler"]),
            p["tile_m"],
        )

    return sorted(out, key=rank)


def _sm90_seed(p: Params) -> int:
    """Position of ``p`` in ``_SM90_SEEDS`` (its length when not a seed in raster auto)."""
    key = (
        p["tile_m"],
        p["tile_n"],
        (p["cluster_m"], p["cluster_n"]),
        p["schedule"],
        p["accum"],
        p["scheduler"],
    )
    if p["raster"] == "auto" and key in _SM90_SEEDS:
        return _SM90_SEEDS.index(key)
    return len(_SM90_SEEDS)


def _sm90_order(candidates: list[Params], m: int) -> list[Params]:
    """Seeds whose tile M is at most m (rounded up to 64) first, then by how close tile M is
    to m; ties in enumerate's order."""
    target = min(max(-(-m // 64) * 64, 64), 256)

    def key(i: int) -> tuple[int, int, int]:
        p = candidates[i]
        seed = _sm90_seed(p) if p["tile_m"] <= target else len(_SM90_SEEDS)
        return (seed, abs(p["tile_m"] - target), i)

    return [candidates[i] for i in sorted(range(len(candidates)), key=key)]


#: cuBLASLt's FP8 accumulation: 0 promoted into f32 (``torch._scaled_mm``'s default), 1 fast
#: (``CUBLASLT_MATMUL_DESC_FAST_ACCUM``: the tensor core's accumulator alone, use_fast_accum=True)
_LT_FAST_ACCUM = (0, 1)
_LT_TAGS = ("out_dtype", "scaling", "fast_accum")


def _lt_reason(params: Mapping[str, Any]) -> str | None:
    if params.get("fast_accum") not in _LT_FAST_ACCUM:
        return f"fast_accum must be one of {_LT_FAST_ACCUM}"
    if params.get("out_dtype") not in SCALED_GEMM_OUT_DTYPES:
        return f"out_dtype must be one of {SCALED_GEMM_OUT_DTYPES}"
    if params.get("scaling") not in SCALINGS:
        return f"scaling must be one of {SCALINGS}"
    rest = {k: v for k, v in params.items() if k not in _LT_TAGS}
    return lt.invalid_reason({**rest, "family": lt.FAMILY})


class _LtFp8:
    """The cuBLASLt FP8 configs, as :class:`VendorDiscoverySpace` asks for them."""

    def invalid_reason(self, params: Mapping[str, Any]) -> str | None:
        if params.get("family") != LT_FAMILY:
            return "not a cuBLASLt FP8 variant"
        return _lt_reason(params)

    def params_from_discovery(self, found: Iterable[Mapping[str, Any]]) -> list[Params]:
        return [{**p, "family": LT_FAMILY} for p in lt.params_from_discovery(found)]


class CudaScaledGemmSpace(VendorDiscoverySpace):
    """FP8 GEMM with per-tensor or 128-block scales on sm_90 (see the module doc)."""

    op = "scaled_gemm"
    backend = "cuda"
    template = "cuda/scaled_gemm_sm90.cu.j2"
    vendor_library = "cublaslt"
    vendor_configs = "cuBLASLt FP8 algorithms"
    vendor = _LtFp8()
    discovery_params: Params = {"family": LT_DISCOVERY_FAMILY}
    requested_algos = 16
    default_max_variants = DEFAULT_MAX_VARIANTS

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        if dtype != "e4m3":
            raise InvalidRequestError("dtype", f"scaled_gemm takes e4m3 inputs, not {dtype!r}")
        if layout != "rcr":
            raise InvalidRequestError("layout", f"scaled_gemm takes layout rcr, not {layout!r}")
        if sm_number(arch) != 90:
            raise InvalidRequestError(
                "device.arch", f"the FP8 scaled_gemm templates are for sm_90 (Hopper), not {arch}"
            )
        return iter(_sm90_params() + fp8_decode.decode_params() + fp8_decode.swapab_params())

    def discoveries(self, problem: Problem) -> list[Discovery]:
        assert isinstance(problem, ScaledGemmProblem)
        params = {**self.discovery_params, "out_dtype": problem.out_dtype}
        params["scaling"] = problem.scaling
        return [Discovery(params, self.discovery_library, self.requested_algos)]

    def from_discovery(
        self, found: list[dict[str, Any]], discovery: Discovery | None = None
    ) -> list[Params]:
        if discovery is None:
            raise ValueError("the FP8 discovery's answer needs its build (out_dtype, scaling)")
        tags = {"out_dtype": discovery.params["out_dtype"], "scaling": discovery.params["scaling"]}
        found_params = self.vendor.params_from_discovery(found)
        # the heuristic's algorithms as found (promoted accumulation, the vendor default
        # first), then each with fast accumulation (cuBLASLt checks it when the plan is made)
        return [
            {"library": self.vendor_library, **p, **tags, "fast_accum": fast}
            for fast in _LT_FAST_ACCUM
            for p in found_params
        ]

    def template_for(self, params: Params) -> str:
        return _TEMPLATES[params["family"]]

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, ScaledGemmProblem):
            return "not a scaled_gemm problem"
        for field in ("out_dtype", "scaling"):
            if params.get(field) != getattr(problem, field):
                return f"built for {field} {params.get(field)}, not {getattr(problem, field)}"
        family = params.get("family")
        if family == LT_FAMILY:
            return _lt_reason({k: v for k, v in params.items() if k != "library"})
        if family in (DECODE_FAMILY, SWAPAB_FAMILY):
            return fp8_decode.prune(params, problem)
        if family == SM90_FAMILY and problem.n % 8:
            return f"n={problem.n} is not a multiple of 8 (16-byte output rows)"
        return None

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """The vendor default first, then the swap-AB kernels (m <= 32) and the CUDA-core decode
        kernels (m <= 16) that fill the SMs, the CUTLASS kernels whose tile M suits m, then the
        rest."""
        if not isinstance(problem, ScaledGemmProblem) or not candidates:
            return list(candidates)
        vendor = [p for p in candidates if p["family"] == LT_FAMILY]
        decode = sorted(
            (p for p in candidates if p["family"] == DECODE_FAMILY),
            key=lambda p: fp8_decode.decode_rank(p, problem),
        )
        cutlass = _sm90_order([p for p in candidates if p["family"] == SM90_FAMILY], problem.m)
        swapab = sorted(
            (p for p in candidates if p["family"] == SWAPAB_FAMILY),
            key=lambda p: fp8_decode.swapab_rank(p, problem),
        )
        # head_size(m) counts the three heads below
        swapab_head = _SWAPAB_HEAD if problem.m <= SWAPAB_MAX_M else 0
        decode_head = _DECODE_HEAD if problem.m <= _DECODE_HEAD_MAX_M else 0
        return [
            *vendor[:1],
            *swapab[:swapab_head],
            *decode[:decode_head],
            *cutlass[:_SM90_HEAD],
            *vendor[1:],
            *cutlass[_SM90_HEAD:],
            *swapab[swapab_head:],
            *decode[decode_head:],
        ]

    def name(self, params: Params, dtype: str, layout: str) -> str:
        family = params["family"]
        tail = f"{params.get('out_dtype', 'x')}_{params.get('scaling', 'x')}"
        if family == LT_DISCOVERY_FAMILY:
            return f"scaled_gemm_e4m3_{tail}_lt_discover"
        if family == LT_FAMILY:
            tags = "_".join(f"{tag}{params[key]}" for key, (tag, _) in lt.ATTRIBUTES.items())
            fast = "_fast" if params["fast_accum"] else ""
            return f"scaled_gemm_e4m3_{tail}_lt_{tags}{fast}"
        if family in (DECODE_FAMILY, SWAPAB_FAMILY):
            return fp8_decode.name(params, tail)
        tile = f"{params['tile_m']}x{params['tile_n']}x{params['tile_k']}"
        parts = [
            f"scaled_gemm_e4m3_{tail}_{tile}",
            f"c{params['cluster_m']}x{params['cluster_n']}",
            params["schedule"],
            params["accum"],
        ]
        if params["scheduler"] == "streamk":
            parts.append("streamk")
        if params["raster"] != "auto":
            parts.append(f"r{params['raster']}")
        return "_".join(parts)
