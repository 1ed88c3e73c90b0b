"""CUDA GEMM variants: CUTLASS (3.x TMA + wgmma on sm_90, 2.x on the sm_80 class), cuBLASLt
algorithms and the hand-written skinny and swap-AB kernels, one space whose params name their
``library``.

    space = CudaGemmSpace()
    for params in space.enumerate("f16", "rcr", "sm_90"): ...   # strongest candidates first
    space.prune(params, GemmProblem(4096, 4096, 4096), "f16", "rcr")  # None or a reason

The sm_90 space crosses tile M/N/K, cluster shape, kernel schedule (cooperative, ping-pong,
CUTLASS's auto), tile scheduler (persistent or stream-K), raster order and swizzle. Whatever
cannot compile or cannot run well on any shape is left out of ``enumerate`` (accumulator
registers, shared memory, schedule rules); what depends on the shape (alignment) is ``prune``.
Stream-K kernels also come as split-K (``splits`` 2/4/8: ``..._coop_splitk4``), for shapes
with too few output tiles to fill the SMs (skinny M, deep K).

``enumerate`` puts a short list of proven configurations first (the DESIGN anchors), then the
rest by how often such a choice wins. ``order`` then ranks the pruned candidates of one shape
by an estimate of how well their tile grid fills the SMs and whether they are bound by loads
or by tensor cores (:mod:`tuner.spaces._sm90_gemm_estimate`), ties kept in ``enumerate``'s
order, so a capped search (``DEFAULT_MAX_VARIANTS``) sees the likely winners for that shape.

Every params dict names its ``library`` (``cutlass``, ``cublaslt``, ``tunehub``) and its
``family`` (the template: ``sm90``, ``sm80``, ``cublaslt``, ``skinny``, ``swapab``). cuBLASLt
algorithms depend on the shape and GPU, so they are not enumerated: the backend discovers them
at tuning time (:mod:`tuner.spaces.cuda_gemm_cublaslt`) and hands them to
``candidate_params``. ``order`` merges the families: the vendor default (cuBLASLt heuristic #0)
first, so every budget holds it, then the best swap-AB kernels (2 <= m <= 16), the best
skinny kernels (m <= 4), the best CUTLASS kernels (m > 16), then the rest.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any

from tuner.epilogues import NONE, name_suffix, params_epilogue
from tuner.errors import InvalidRequestError
from tuner.problems import GemmProblem, Problem, problem_epilogue
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces import cuda_gemm_skinny as skinny
from tuner.spaces import cuda_gemm_swapab as swapab
from tuner.spaces._cutlass_common import (
    SM90_SMEM_BYTES,
    check_dtype,
    elements_per_16_bytes,
    sm80_class_smem_bytes,
    sm80_tile,
    sm90_tile,
    sm_number,
)
from tuner.spaces._gemm_epilogues import LT_EPILOGUES, epilogue_context, fused_params
from tuner.spaces._sm90_gemm_estimate import estimate_sm90_seconds
from tuner.spaces._vendor_discovery import Discovery, VendorDiscoverySpace
from tuner.spaces.base import Params

__all__ = ["CudaGemmSpace", "DEFAULT_MAX_VARIANTS", "SM90_SEEDS", "LIBRARIES"]

#: a sensible cap for one problem's search when the request names none
DEFAULT_MAX_VARIANTS = 16

_SM90_TILE_MN = (64, 128, 256)
_SM90_TILE_K = (64, 128)
_SM90_CLUSTERS = ((2, 1), (1, 1), (1, 2))
_SM90_SCHEDULES = ("coop", "pingpong", "auto")
_SM90_SCHEDULERS = ("persistent", "streamk")
_SM90_RASTERS = ("auto", "n", "m")
_SM90_SWIZZLES = (1, 2, 4, 8)
#: K splits of the stream-K scheduler's split-K mode (1: its own stream-K heuristic)
_SM90_SPLITS = (1, 2, 4, 8)
#: ``order``: estimates within this factor of the best form the first band (then the next...);
#: inside a band the proven seeds go first, then finer bands of the estimate, raster and
#: swizzle variants last (the estimate is rough: it must not push the seeds out of a capped
#: search on shapes they suit)
_ORDER_BAND = 1.25
_ORDER_FINE_BAND = 1.05
#: f32 accumulators per thread above which the kernel spills (one wgmma warpgroup = 128 threads)
_MAX_ACCUMULATORS_PER_THREAD = 128
#: shared memory the TMA epilogue keeps beside the mainloop stages (bytes, generous)
_TMA_EPILOGUE_SMEM = 16 * 1024

_SM80_TILE_MN = (64, 128, 256)
_SM80_TILE_K = (32, 64)
_SM80_STAGES = (3, 4, 5)
_SM80_SPLIT_K = (1, 2, 4)
_SM80_SWIZZLES = (1, 4)

_LAYOUTS = ("rcr", "rrr")
#: ``order``: swap-AB, skinny, then CUTLASS kernels, tried right after the vendor default
_SWAPAB_HEAD = 6
_SKINNY_HEAD = 6
_CUTLASS_HEAD = 3
#: at most this m, CUTLASS tiles waste most of their rows: its head waits behind cuBLASLt's
_CUTLASS_HEAD_MIN_M = 17
#: the library each template family belongs to (what a client calls)
LIBRARIES = {
    "sm90": "cutlass",
    "sm80": "cutlass",
    lt.FAMILY: "cublaslt",
    skinny.FAMILY: "tunehub",
    swapab.FAMILY: "tunehub",
}

#: proven sm_90 configurations tried first: (tile, cluster, schedule, scheduler)
SM90_SEEDS: tuple[tuple[tuple[int, int, int], tuple[int, int], str, str], ...] = (
    ((128, 256, 64), (2, 1), "coop", "persistent"),  # big shapes (776 TFLOP/s at 8192^3)
    ((64, 128, 64), (1, 1), "pingpong", "persistent"),  # m <= 128
    ((128, 128, 64), (1, 1), "coop", "persistent"),
    ((256, 128, 64), (1, 2), "coop", "persistent"),
    ((128, 256, 64), (1, 1), "coop", "streamk"),  # skinny or deep: few output tiles
    ((64, 256, 64), (1, 1), "pingpong", "persistent"),
    ((128, 128, 64), (2, 1), "pingpong", "persistent"),
    ((128, 128, 64), (1, 1), "coop", "streamk"),
    ((64, 64, 64), (1, 1), "pingpong", "persistent"),
    ((128, 256, 64), (2, 1), "auto", "persistent"),
    ((128, 128, 128), (1, 1), "coop", "persistent"),
    ((64, 128, 128), (1, 2), "pingpong", "persistent"),
)


def _effective_schedule(schedule: str, tile_m: int) -> str:
    # CUTLASS's auto schedule is cooperative for tile M >= 128, else ping-pong
    if schedule == "auto":
        return "coop" if tile_m >= 128 else "pingpong"
    return schedule


def sm90_static_reason(params: Params) -> str | None:
    """Why an sm_90 parameter set cannot build or run well on any shape (None if it can)."""
    tm, tn, tk = params["tile_m"], params["tile_n"], params["tile_k"]
    schedule = _effective_schedule(params["schedule"], tm)
    if schedule == "coop":
        if tm < 128:
            return "cooperative needs tile M >= 128 (two consumer warpgroups split M)"
        if tm * tn // 256 > _MAX_ACCUMULATORS_PER_THREAD:
            return "cooperative tile holds too many accumulators per thread"
    elif tm * tn // 128 > _MAX_ACCUMULATORS_PER_THREAD:
        return "ping-pong tile holds too many accumulators per thread"
    if params["scheduler"] == "streamk" and schedule != "coop":
        return "stream-K needs the cooperative schedule"
    if params["splits"] > 1 and params["scheduler"] != "streamk":
        return "split-K runs through the stream-K scheduler"
    epilogue = 0 if params["schedule"] == "auto" else _TMA_EPILOGUE_SMEM
    if 2 * (tm + tn) * tk * 2 + epilogue > SM90_SMEM_BYTES:
        return "two pipeline stages do not fit in shared memory"
    return None


def sm80_static_reason(params: Params, sm: int) -> str | None:
    tm, tn, tk = params["tile_m"], params["tile_n"], params["tile_k"]
    if tm * tn > 256 * 128:
        return "tile holds too many accumulators"
    if params["stages"] * (tm + tn) * tk * 2 > sm80_class_smem_bytes(sm):
        return f"{params['stages']} stages do not fit in sm_{sm} shared memory"
    return None


def _is_seed(params: Params) -> bool:
    return _sm90_seed_index(params) < len(SM90_SEEDS)


def _sm90_seed_index(params: Params) -> int:
    """Position in ``SM90_SEEDS`` (its length when not a seed, or not in the default order)."""
    seed_key = (
        (params["tile_m"], params["tile_n"], params["tile_k"]),
        (params["cluster_m"], params["cluster_n"]),
        params["schedule"],
        params["scheduler"],
    )
    default_order = params["raster"] == "auto" and params["swizzle"] == 1 and params["splits"] == 1
    if default_order and seed_key in SM90_SEEDS:
        return SM90_SEEDS.index(seed_key)
    return len(SM90_SEEDS)


def _sm90_rank(params: Params) -> tuple[Any, ...]:
    seed_key = (
        (params["tile_m"], params["tile_n"], params["tile_k"]),
        (params["cluster_m"], params["cluster_n"]),
        params["schedule"],
        params["scheduler"],
    )
    default_order = params["raster"] == "auto" and params["swizzle"] == 1
    seed = SM90_SEEDS.index(seed_key) if seed_key in SM90_SEEDS else len(SM90_SEEDS)
    return (
        0 if (seed < len(SM90_SEEDS) and default_order) else 1,
        seed if default_order else len(SM90_SEEDS),
        _SM90_SWIZZLES.index(params["swizzle"]),
        _SM90_RASTERS.index(params["raster"]),
        _SM90_SCHEDULERS.index(params["scheduler"]),
        _SM90_TILE_K.index(params["tile_k"]),
        _SM90_SCHEDULES.index(params["schedule"]),
        _SM90_CLUSTERS.index((params["cluster_m"], params["cluster_n"])),
        abs(params["tile_m"] * params["tile_n"] - 128 * 256),
        params["tile_m"],
        _SM90_SPLITS.index(params["splits"]),
    )


def _sm90_params() -> list[Params]:
    out: list[Params] = []
    for tm, tn, tk, (cm, cn), schedule, scheduler, raster, swizzle in itertools.product(
        _SM90_TILE_MN,
        _SM90_TILE_MN,
        _SM90_TILE_K,
        _SM90_CLUSTERS,
        _SM90_SCHEDULES,
        _SM90_SCHEDULERS,
        _SM90_RASTERS,
        _SM90_SWIZZLES,
    ):
        params: Params = {
            "library": "cutlass",
            "family": "sm90",
            **sm90_tile(tm, tn, tk, cm, cn, schedule),
            "scheduler": scheduler,
            "raster": raster,
            "swizzle": swizzle,
            "splits": 1,
        }
        if sm90_static_reason(params) is not None:
            continue
        out.append(params)
        # raster and swizzle order a large tile grid; split-K is for small ones
        if scheduler == "streamk" and raster == "auto" and swizzle == 1:
            out.extend({**params, "splits": splits} for splits in _SM90_SPLITS[1:])
    return sorted(out, key=_sm90_rank)


def _sm80_params(sm: int) -> list[Params]:
    out: list[Params] = []
    for tk, tm, tn, stages, split_k, swizzle in itertools.product(
        _SM80_TILE_K, _SM80_TILE_MN, _SM80_TILE_MN, _SM80_STAGES, _SM80_SPLIT_K, _SM80_SWIZZLES
    ):
        params: Params = {
            **sm80_tile(tm, tn, tk, stages),
            "split_k": split_k,
            "swizzle": swizzle,
        }
        if sm80_static_reason(params, sm) is None:
            out.append(params)

    def rank(p: Params) -> tuple[Any, ...]:
        return (
            p["split_k"],
            p["swizzle"],
            abs(p["tile_m"] * p["tile_n"] - 128 * 128),
            abs(p["tile_m"] - p["tile_n"]),
            p["tile_k"] != 32,
            abs(p["stages"] - 4),
            p["tile_m"],
            p["tile_n"],
            p["stages"],
        )

    return sorted(out, key=rank)


class CudaGemmSpace(VendorDiscoverySpace):
    """GEMM on CUDA through CUTLASS; the template follows the arch (see ``template_for``)."""

    op = "gemm"
    backend = "cuda"
    template = "cuda/gemm_sm90.cu.j2"
    sm80_template = "cuda/gemm_sm80.cu.j2"
    #: sm_90 variants with a fused epilogue (``tuner.spaces._gemm_epilogues``)
    sm90_fused_template = "cuda/gemm_sm90_fused.cu.j2"
    #: the build that finds the cuBLASLt algorithms of a shape (the backend runs it)
    discovery_params: Params = lt.DISCOVERY_PARAMS
    #: how many algorithms discovery asks the vendor heuristic for
    requested_algos: int = lt.REQUESTED_ALGOS
    vendor_library = "cublaslt"
    vendor_configs = "cuBLASLt algorithms"
    vendor = lt
    default_max_variants = DEFAULT_MAX_VARIANTS

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        check_dtype(dtype, "gemm")
        if layout not in _LAYOUTS:
            raise InvalidRequestError(
                "layout", f"the CUTLASS gemm takes {_LAYOUTS}, not {layout!r}"
            )
        sm = sm_number(arch)
        if sm == 90:
            plain = _sm90_params() + _tunehub_params()
        elif sm in (80, 86, 87, 89):
            plain = _sm80_params(sm) + _tunehub_params()
        else:
            plain = []
        if plain:  # the plain variants, then each family's fused ones per epilogue
            return iter(plain + fused_params(plain))
        raise InvalidRequestError("device.arch", f"no CUTLASS gemm templates for {arch} (sm_80-90)")

    def template_for(self, params: Params) -> str:
        family = params["family"]
        if family in (lt.FAMILY, lt.DISCOVERY_FAMILY):
            return lt.TEMPLATE
        if family == skinny.FAMILY:
            return skinny.TEMPLATE
        if family == swapab.FAMILY:
            return swapab.TEMPLATE
        if family == "sm90" and params_epilogue(params) != NONE:
            return self.sm90_fused_template
        return self.template if family == "sm90" else self.sm80_template

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        # every gemm template reads the epilogue (a plain variant's source does not change)
        return {**super().render_context(params, dtype, layout), **epilogue_context(params)}

    def discovered_reason(self, params: Params, dtype: str, layout: str, arch: str) -> str | None:
        epilogue = params_epilogue(params)
        if epilogue != NONE and epilogue not in LT_EPILOGUES:
            return f"cuBLASLt fuses {LT_EPILOGUES}, not {epilogue!r}"
        plain = {k: v for k, v in params.items() if k != "epilogue"}
        return super().discovered_reason(plain, dtype, layout, arch)

    def discoveries(self, problem: Problem) -> list[Discovery]:
        """The cuBLASLt discovery, with the problem's epilogue on the descriptor (its
        algorithms differ); none for an epilogue cuBLASLt cannot fuse (SiLU, gated_silu)."""
        epilogue = problem_epilogue(problem)
        if epilogue == NONE:
            return super().discoveries(problem)
        if epilogue not in LT_EPILOGUES:
            return []
        params = {**self.discovery_params, "epilogue": epilogue}
        return [Discovery(params, self.discovery_library, self.requested_algos)]

    def from_discovery(
        self, found: list[dict[str, Any]], discovery: Discovery | None = None
    ) -> list[Params]:
        plain = super().from_discovery(found, discovery)
        epilogue = params_epilogue(discovery.params) if discovery is not None else NONE
        return plain if epilogue == NONE else [{**p, "epilogue": epilogue} for p in plain]

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, GemmProblem):
            return "not a gemm problem"
        family = params.get("family")
        if family == lt.FAMILY:
            return lt.invalid_reason(
                {k: v for k, v in params.items() if k not in ("library", "epilogue")}
            )
        if family == skinny.FAMILY:
            return skinny.prune(params, problem, layout)
        if family == swapab.FAMILY:
            return swapab.prune(params, problem, layout)
        align = elements_per_16_bytes(dtype)
        # C/D rows need n; A (row-major) and B (column-major) rows need k; B row-major needs n
        for dim in ("k", "n") + (("m",) if layout[0] == "c" else ()):
            if getattr(problem, dim) % align:
                return f"{dim}={getattr(problem, dim)} is not a multiple of {align} (16-byte loads)"
        if params["family"] == "sm90" and params["splits"] > 1:
            k_tiles = -(-problem.k // params["tile_k"])
            if k_tiles < 2 * params["splits"]:
                return (
                    f"k={problem.k} has {k_tiles} k-tiles of {params['tile_k']}: "
                    f"too few to split {params['splits']} ways"
                )
        if params["family"] == "sm80" and params["split_k"] > 1:
            if problem.k < params["split_k"] * params["tile_k"] * 2:
                return f"k={problem.k} is too short to split {params['split_k']} ways"
        return None

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """The families merged (see the module doc); cuBLASLt keeps the heuristic's order."""
        if not isinstance(problem, GemmProblem) or not candidates:
            return list(candidates)
        vendor = [p for p in candidates if p["family"] == lt.FAMILY]
        fast = skinny.order([p for p in candidates if p["family"] == skinny.FAMILY], problem)
        mma = swapab.order([p for p in candidates if p["family"] == swapab.FAMILY], problem)
        cutlass = self._order_cutlass(
            [p for p in candidates if p["family"] in ("sm90", "sm80")], problem
        )
        head = _CUTLASS_HEAD if problem.m >= _CUTLASS_HEAD_MIN_M else 0
        fast_head = _SKINNY_HEAD if problem.m <= skinny.HEAD_MAX_M else 0
        mma_head = _SWAPAB_HEAD if swapab.HEAD_MIN_M <= problem.m <= swapab.HEAD_MAX_M else 0
        return [
            *vendor[:1],
            *mma[:mma_head],
            *fast[:fast_head],
            *cutlass[:head],
            *vendor[1:],
            *mma[mma_head:],
            *fast[fast_head:],
            *cutlass[head:],
        ]

    def _order_cutlass(self, candidates: list[Params], problem: GemmProblem) -> list[Params]:
        """sm_90 candidates by estimated time on ``problem`` (see ``_ORDER_BAND``); ties, and
        sm_80-class spaces (not estimated), keep ``enumerate``'s order."""
        if not candidates or any(p["family"] != "sm90" for p in candidates):
            return list(candidates)
        seconds = [estimate_sm90_seconds(p, problem, self.sm_count) for p in candidates]
        best = min(seconds)

        def key(i: int) -> tuple[int, bool, bool, int, int]:
            params, ratio = candidates[i], seconds[i] / best
            return (
                math.floor(math.log(ratio) / math.log(_ORDER_BAND)),
                not _is_seed(params),
                params["raster"] != "auto" or params["swizzle"] != 1,
                math.floor(math.log(ratio) / math.log(_ORDER_FINE_BAND)),
                i,
            )

        return [candidates[i] for i in sorted(range(len(candidates)), key=key)]

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return self._plain_name(params, dtype, layout) + name_suffix(params)

    def _plain_name(self, params: Params, dtype: str, layout: str) -> str:
        if params["family"] in (lt.FAMILY, lt.DISCOVERY_FAMILY):
            return lt.name(params, dtype, layout)
        if params["family"] == skinny.FAMILY:
            return skinny.name(params, dtype, layout)
        if params["family"] == swapab.FAMILY:
            return swapab.name(params, dtype, layout)
        tile = f"{params['tile_m']}x{params['tile_n']}x{params['tile_k']}"
        head = f"gemm_{dtype}_{layout}_{tile}"
        if params["family"] == "sm90":
            parts = [head, f"c{params['cluster_m']}x{params['cluster_n']}", params["schedule"]]
            if params["scheduler"] == "streamk":
                splits = params["splits"]
                parts.append(f"splitk{splits}" if splits > 1 else "streamk")
            if params["raster"] != "auto":
                parts.append(f"r{params['raster']}")
            if params["swizzle"] != 1:
                parts.append(f"sw{params['swizzle']}")
            return "_".join(parts)
        parts = [head, f"w{params['warp_m']}x{params['warp_n']}", f"s{params['stages']}"]
        if params["split_k"] > 1:
            parts.append(f"sk{params['split_k']}")
        if params["swizzle"] != 1:
            parts.append(f"sw{params['swizzle']}")
        return "_".join(parts)


def _tunehub_params() -> list[Params]:
    """The hand-written families (library ``tunehub``): skinny, then swap-AB."""
    return [{"library": "tunehub", **p} for p in skinny.skinny_params() + swapab.swapab_params()]


def iter_names(dtype: str, layout: str, arch: str) -> Iterator[str]:
    """Every variant name of the space, in order (for docs and quick inspection)."""
    space = CudaGemmSpace()
    for params in space.enumerate(dtype, layout, arch):
        yield space.name(params, dtype, layout)
