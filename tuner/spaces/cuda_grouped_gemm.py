"""CUDA grouped GEMM variants for mixture-of-experts layers (issue 26 item 2).

Two families, each params dict naming its ``library`` and ``family``:

- ``sm90`` (library ``cutlass``): CUTLASS 3.x pointer-array grouped GEMM on sm_90a
  (``kernel_templates/cuda/grouped_gemm_sm90.cu.j2``): tile M/N/K, cluster shape, cooperative
  or ping-pong schedule. One launch serves every expert; tiles of small experts waste rows, so
  it suits the mid and prefill buckets.
- ``decode`` (library ``tunehub``): our persistent swap-AB kernel on CUDA cores
  (``grouped_gemm_decode.cu.j2``): a warp owns ``rows`` rows of one expert's weight and
  ``tokens_per_pass`` of its tokens, so each weight row is streamed once per pass (once in
  decode). Built for sm_80 and up.

dtype ``e4m3`` (FP8 with rowwise scales, bf16 out: ``tuner.fp8_grouped``): both families, each
variant's params carrying ``scaling: rowwise`` (bf16/f16 params carry no scaling, so their
names and ids are what they were). ``decode`` streams FP8 weights (half the bytes of bf16) in
``grouped_gemm_decode_fp8.cu.j2`` and applies the two scales to each finished sum; ``sm90`` is
CUTLASS's FP8 pointer-array kernel (``grouped_gemm_sm90_fp8.cu.j2``: tile K 128, fast or
promoted accumulation) whose epilogue multiplies by the per-group token-row scales (a column
broadcast) and the expert's output-column scales (a row broadcast), both through per-group
pointer arrays, in the same single launch.

The vendor paths a user would call (``torch._grouped_mm``, ``torch._scaled_grouped_mm``) are
the benchmark's baselines (``bench/serving_moe.py``), not candidates: they have no ABI entry
point of their own here.
``order`` puts the decode family first when the bucket's mean tokens per expert is at most
:data:`DECODE_MEAN_TOKENS`, else the CUTLASS family (each tile on one CTA before clusters,
64-row tiles first for small experts, the largest first above 64 tokens an expert); the other
family's best two follow the leader's first six, so a capped search measures both.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from tuner.errors import InvalidRequestError
from tuner.moe import token_counts
from tuner.problems import FP8_K_ALIGN, GroupedGemmProblem, Problem, op_dtypes
from tuner.spaces._cutlass_common import sm90_tile, sm_number
from tuner.spaces.base import Params, VariantSpace

__all__ = [
    "CudaGroupedGemmSpace",
    "DECODE_MEAN_TOKENS",
    "DECODE_MAX_TOKENS",
    "LIBRARIES",
    "SCALING",
]

#: ``order``: at most this many tokens per expert on average, the decode family goes first
DECODE_MEAN_TOKENS = 8
#: the decode family re-streams the weights once per pass of ``tokens_per_pass`` tokens and
#: runs on CUDA cores: above this many tokens on one expert it is pruned
DECODE_MAX_TOKENS = 64
LIBRARIES = {"sm90": "cutlass", "decode": "tunehub"}
#: ``order``: candidates of the leading family before the other family's best two
_HEAD = 6

#: (tile_m, tile_n, tile_k, schedule); cooperative needs tile M >= 128 (two consumer warpgroups)
_SM90_TILES = (
    (64, 128, 64, "pingpong"),
    (64, 256, 64, "pingpong"),
    (128, 128, 64, "pingpong"),
    (128, 128, 64, "coop"),
    (128, 256, 64, "coop"),
    (256, 128, 64, "coop"),
    (128, 128, 128, "coop"),
)
_SM90_CLUSTERS = ((1, 1), (2, 1), (1, 2))
#: e4m3: tile K 128 (128 bytes of FP8 a row, the 128-byte swizzle)
_SM90_FP8_TILES = (
    (64, 128, 128, "pingpong"),
    (64, 256, 128, "pingpong"),
    (128, 128, 128, "pingpong"),
    (128, 128, 128, "coop"),
    (128, 256, 128, "coop"),
    (256, 128, 128, "coop"),
)
#: e4m3 accumulation enumerated: ``promoted`` (into f32 registers every K tile). The template
#: also renders ``fast`` (the wgmma accumulator alone, as scaled_gemm's per-tensor kernels); it
#: is left out: its error grows with K (tuner.fp8: 6% of an output's size at k = 18944) and
#: the call a user makes, torch._scaled_grouped_mm, accumulates promoted. (Its H100 failure of
#: 2026-12-06 at k = 1024 was the old elementwise bound on an output near zero by cancellation,
#: which the promoted kernel failed once too; tests/gpu/test_cuda_grouped_gemm_fp8.py.)
_SM90_FP8_ACCUMS = ("promoted",)
#: the params key (and its one value) that marks an e4m3 variant: rowwise scales
SCALING = "rowwise"
_DECODE_TOKENS = (1, 2, 4, 8, 16)
_DECODE_ROWS = (1, 2, 4)
_DECODE_WARPS = (4, 8)


def _sm90_params() -> list[Params]:
    return [
        {"library": "cutlass", "family": "sm90", **sm90_tile(tm, tn, tk, cm, cn, schedule)}
        for (tm, tn, tk, schedule), (cm, cn) in itertools.product(_SM90_TILES, _SM90_CLUSTERS)
    ]


def _sm90_fp8_params() -> list[Params]:
    return [
        {
            "library": "cutlass",
            "family": "sm90",
            **sm90_tile(tm, tn, tk, cm, cn, schedule),
            "accum": accum,
            "scaling": SCALING,
        }
        for (tm, tn, tk, schedule), accum, (cm, cn) in itertools.product(
            _SM90_FP8_TILES, _SM90_FP8_ACCUMS, _SM90_CLUSTERS
        )
    ]


def _decode_params(dtype: str) -> list[Params]:
    scaling = {"scaling": SCALING} if dtype == "e4m3" else {}
    return [
        {
            "library": "tunehub",
            "family": "decode",
            "tokens_per_pass": t,
            "rows": r,
            "warps": w,
            **scaling,
        }
        for t, r, w in itertools.product(_DECODE_TOKENS, _DECODE_ROWS, _DECODE_WARPS)
        if t * r <= 32  # one lane writes one (token, row) result
    ]


def _check_dtype(dtype: str) -> None:
    allowed = op_dtypes("grouped_gemm")
    if dtype not in allowed:
        raise InvalidRequestError(
            "dtype", f"the grouped_gemm templates take {', '.join(allowed)}, not {dtype!r}"
        )


class CudaGroupedGemmSpace(VariantSpace):
    op = "grouped_gemm"
    backend = "cuda"
    template = "cuda/grouped_gemm_sm90.cu.j2"
    decode_template = "cuda/grouped_gemm_decode.cu.j2"
    fp8_template = "cuda/grouped_gemm_sm90_fp8.cu.j2"
    fp8_decode_template = "cuda/grouped_gemm_decode_fp8.cu.j2"
    default_max_variants = 12

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        _check_dtype(dtype)
        if layout != "rcr":
            raise InvalidRequestError("layout", f"grouped_gemm takes rcr, not {layout!r}")
        sm = sm_number(arch)
        if sm < 80:
            raise InvalidRequestError(
                "device.arch", f"no grouped_gemm templates for {arch} (sm_80 and up)"
            )
        sm90 = (_sm90_fp8_params() if dtype == "e4m3" else _sm90_params()) if sm == 90 else []
        return iter(sm90 + _decode_params(dtype))

    def template_for(self, params: Params) -> str:
        fp8 = params.get("scaling") == SCALING
        if params["family"] == "decode":
            return self.fp8_decode_template if fp8 else self.decode_template
        return self.fp8_template if fp8 else self.template

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, GroupedGemmProblem):
            return f"not a grouped_gemm problem: {type(problem).__name__}"
        if (params.get("scaling") == SCALING) != (dtype == "e4m3"):
            return f"a variant of another dtype than {dtype}"
        if dtype == "e4m3" and (problem.n % FP8_K_ALIGN or problem.k % FP8_K_ALIGN):
            return f"e4m3 rows need n and k multiples of {FP8_K_ALIGN} (16-byte FP8 vectors)"
        if params["family"] == "decode":
            most = max(token_counts(problem.experts, problem.tokens, problem.skew))
            if most > DECODE_MAX_TOKENS:
                return (
                    f"an expert takes {most} tokens: the decode kernel streams its weights once "
                    f"per {params['tokens_per_pass']} tokens on CUDA cores (at most "
                    f"{DECODE_MAX_TOKENS})"
                )
        return None

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """Decode first for few tokens per expert, else CUTLASS; inside a family the likely
        winners first (see the module doc). Deterministic."""
        if not isinstance(problem, GroupedGemmProblem):
            return list(candidates)
        mean = problem.tokens / problem.experts
        most = max(token_counts(problem.experts, problem.tokens, problem.skew))

        def decode_key(p: Params) -> tuple[Any, ...]:
            passes = -(-most // int(p["tokens_per_pass"]))
            return (passes, int(p["tokens_per_pass"]), -int(p["rows"]), int(p["warps"]))

        def sm90_key(p: Params) -> tuple[Any, ...]:
            # every tile on one CTA first (a capped search sees each tile), clusters after
            small = mean <= 64
            fit = int(p["tile_m"]) if small else -int(p["tile_m"]) * int(p["tile_n"])
            clustered = p["cluster_m"] * p["cluster_n"] > 1
            coop = p["schedule"] != "coop"
            return (clustered, fit, coop, p["tile_k"], p["cluster_n"])

        decode = sorted((p for p in candidates if p["family"] == "decode"), key=decode_key)
        sm90 = sorted((p for p in candidates if p["family"] == "sm90"), key=sm90_key)
        first, second = (decode, sm90) if mean <= DECODE_MEAN_TOKENS else (sm90, decode)
        # the other family's best two right after the leading family's head: a capped search
        # measures both families
        return first[:_HEAD] + second[:2] + first[_HEAD:] + second[2:]

    def name(self, params: Params, dtype: str, layout: str) -> str:
        if params["family"] == "decode":
            return (
                f"grouped_gemm_{dtype}_decode_t{params['tokens_per_pass']}"
                f"_r{params['rows']}_w{params['warps']}"
            )
        tile = f"{params['tile_m']}x{params['tile_n']}x{params['tile_k']}"
        cluster = f"c{params['cluster_m']}x{params['cluster_n']}"
        accum = f"_{params['accum']}" if "accum" in params else ""
        return f"grouped_gemm_{dtype}_{tile}_{cluster}_{params['schedule']}{accum}"

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        _check_dtype(dtype)
        if (params.get("scaling") == SCALING) != (dtype == "e4m3"):
            raise InvalidRequestError("dtype", f"params of another dtype than {dtype}")
        return super().render_context(params, dtype, layout)
