"""What the PyTorch ops' shape keys hold: the dtypes tunehub has names for, and the problem of
an op's ABI dims (what a lookup asks the service for and what a recording writes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "DTYPES",
    "DTYPE_NAMES",
    "NO_EPILOGUE",
    "SCALED_OUT_CODES",
    "SCALING_CODES",
    "problem_of",
]

#: torch dtypes the kernels take, by tunehub's name
DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
#: every dtype a shape key may hold, by tunehub's name (FP8 e4m3: scaled_mm's inputs only)
DTYPE_NAMES: dict[torch.dtype, str] = {**DTYPES}
if hasattr(torch, "float8_e4m3fn"):
    DTYPE_NAMES[torch.float8_e4m3fn] = "e4m3"
#: a problem without a fused epilogue (the epilogue is left out of its dims and key)
NO_EPILOGUE = "none"
#: scaled_gemm's out_dtype and scaling codes, ABI dims 4 and 5 (tuner.fp8 defines them; a
#: test checks these agree)
SCALED_OUT_CODES = ("bf16", "f16")
SCALING_CODES = ("per_tensor", "block")
_REDUCE_KINDS = ("sum", "max", "mean")
_CONV_DIMS = ("n", "h", "w", "c", "k", "r", "s", "stride", "pad", "dilation")
_GROUPED_DIMS = ("experts", "n", "k", "tokens", "skew")


def problem_of(op: str, dims: Sequence[int], epilogue: str = NO_EPILOGUE) -> dict[str, Any]:
    """The problem of ``op`` whose ABI dims are ``dims`` (reduce: kind code last; rms_norm:
    the eps bits last, not part of the problem; scaled_gemm: the out_dtype and scaling codes
    last). A gemm's fused ``epilogue`` joins the problem unless it is none."""
    if op == "gemm":
        problem = {"m": dims[0], "n": dims[1], "k": dims[2]}
        return problem if epilogue == NO_EPILOGUE else {**problem, "epilogue": epilogue}
    if op == "scaled_gemm":
        codes = {"out_dtype": SCALED_OUT_CODES[dims[3]], "scaling": SCALING_CODES[dims[4]]}
        return {"m": dims[0], "n": dims[1], "k": dims[2], **codes}
    if op == "reduce":
        return {"m": dims[0], "k": dims[1], "kind": _REDUCE_KINDS[dims[2]]}
    if op in ("softmax", "rms_norm"):
        return {"m": dims[0], "k": dims[1]}
    if op == "conv2d":
        return dict(zip(_CONV_DIMS, dims, strict=True))
    if op == "grouped_gemm":  # the bucket; the tokens per expert are not in the key
        return dict(zip(_GROUPED_DIMS, dims[:5], strict=True))
    raise ValueError(f"unknown op {op!r}")
