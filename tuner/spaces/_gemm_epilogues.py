"""Which CUDA gemm family fuses which epilogue (``tuner.epilogues``), and the params of the
fused variants of :class:`tuner.spaces.cuda_gemm.CudaGemmSpace`.

- ``cublaslt``: CUBLASLT_EPILOGUE_BIAS, RELU_BIAS and GELU_BIAS (GELU there is the tanh
  approximation). cuBLASLt has no SiLU epilogue, so bias_silu and gated_silu are left to the
  other families. Its fused algorithms are discovered like the plain ones, with the epilogue
  on the matmul descriptor (the discovery build carries it); a SiLU problem runs no cuBLASLt
  discovery.
- ``sm90`` (CUTLASS 3.x, fused variants render ``gemm_sm90_fused.cu.j2``): an epilogue visitor tree,
  LinearCombination + per-column bias + activation (relu, gelu, silu). gated_silu does not
  fit a tile epilogue: its gate and up columns lie n/2 apart, in different tiles.
- ``skinny`` and ``swapab`` (decode, m <= 64): every epilogue, in registers before the one
  store; gated_silu with one K slice (skinny) and without split-K (both), whose partial sums
  would need the plain product first.

The sm_80-class CUTLASS family fuses nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tuner.epilogues import GEMM_EPILOGUES, NONE, activation_of, params_epilogue
from tuner.spaces.base import Params

__all__ = [
    "FUSED_BY_FAMILY",
    "LT_EPILOGUES",
    "SM90_EPILOGUES",
    "fused_params",
    "epilogue_context",
    "fuses",
]

LT_EPILOGUES: tuple[str, ...] = ("bias", "bias_relu", "bias_gelu")
SM90_EPILOGUES: tuple[str, ...] = ("bias", "bias_relu", "bias_gelu", "bias_silu")
_DECODE_EPILOGUES = tuple(e for e in GEMM_EPILOGUES if e != NONE)
#: family -> the epilogues its template fuses
FUSED_BY_FAMILY: dict[str, tuple[str, ...]] = {
    "cublaslt": LT_EPILOGUES,
    "cublaslt_discover": LT_EPILOGUES,
    "sm90": SM90_EPILOGUES,
    "skinny": _DECODE_EPILOGUES,
    "swapab": _DECODE_EPILOGUES,
}


def fuses(params: Params) -> bool:
    """Whether the template of ``params`` can fuse its epilogue (plain params always can)."""
    epilogue = params_epilogue(params)
    if epilogue == NONE:
        return True
    if epilogue not in FUSED_BY_FAMILY.get(str(params.get("family")), ()):
        return False
    if params["family"] == "sm90" and params.get("schedule") == "auto":
        return False  # the tree runs in the TMA warp-specialized epilogue only
    if epilogue == "gated_silu":
        return params.get("splits", 1) == 1 and (
            params["family"] != "skinny" or params.get("slices", 1) == 1
        )
    return True


def fused_params(
    plain: Iterable[Params], epilogues: Iterable[str] = GEMM_EPILOGUES
) -> list[Params]:
    """The fused variants of the enumerated ``plain`` params: per epilogue, those of every
    family that fuses it (cuBLASLt's are discovered, not enumerated)."""
    plain = list(plain)
    out: list[Params] = []
    for epilogue in epilogues:
        if epilogue == NONE:
            continue
        out.extend(fused for p in plain if fuses(fused := {**p, "epilogue": epilogue}))
    return out


def epilogue_context(params: Params) -> dict[str, Any]:
    """What the gemm templates read about the epilogue (also for plain params: ``none``)."""
    epilogue = params_epilogue(params)
    if epilogue not in GEMM_EPILOGUES:
        raise ValueError(f"unknown epilogue {epilogue!r}")
    return {
        "epilogue": epilogue,
        "activation": activation_of(epilogue),
        "gated": epilogue == "gated_silu",
    }
