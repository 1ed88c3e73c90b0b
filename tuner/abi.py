"""The run-time dims of the kernel ABI, defined once for every backend and every caller.

Every variant, CUDA (``tunehub_run`` in ``kernel_templates/cuda/_tunehub_abi.cuh``) or CPU
(``th_kernel`` in ``kernel_templates/cpu/_harness.h``), takes its problem's int dims as int64 in
``problem.dim_names`` order, followed by:

- reduce: the kind code (0 sum, 1 max, 2 mean), so ``[m, k, kind]``;
- rms_norm: ``eps_bits``, the IEEE-754 bit pattern of the float32 eps read as an unsigned 32-bit
  integer and held in the int64, so ``[m, k, eps_bits]`` (1e-6 -> 0x358637BD = 897988541).
  eps is a run-time value, not part of the problem key (it does not change the speed); kernels
  refuse a pattern outside [0, 0x7F800000), i.e. a negative, infinite or NaN eps. Tuning and
  verification use :data:`RMS_NORM_EPS`.

- scaled_gemm: the out_dtype code (0 bf16, 1 f16) and the scaling code (0 per_tensor,
  1 block), so ``[m, n, k, out_code, scaling_code]``; a variant is built for one of each and
  refuses the others (``tuner.fp8`` defines the codes, inputs and scale layouts).
- grouped_gemm: the tokens of each expert, ``experts`` more dims, so
  ``[experts, n, k, tokens, skew, m_0, ..., m_{E-1}]``; tuning uses
  ``tuner.moe.token_counts`` of the bucket. A kernel serves any counts that sum to at most
  ``tokens`` rows of A (the bucket dims only size the buffers); tokens are stacked by expert.

Inputs follow ``tuner.reference.make_inputs`` (rms_norm: x [m, k], then w [k]; scaled_gemm:
a, b, a_scale, b_scale; grouped_gemm: a [tokens, k], w [experts, n, k], and with dtype e4m3
also a_scale f32 [tokens] and b_scale f32 [experts, n], the output bf16: ``tuner.fp8_grouped``).
The dims of grouped_gemm do not name its dtype: a variant is built for one.
"""

from __future__ import annotations

import math
import struct

from tuner.fp8 import OUT_DTYPE_CODES, SCALING_CODES
from tuner.moe import token_counts
from tuner.problems import (
    GroupedGemmProblem,
    Problem,
    ReduceProblem,
    RmsNormProblem,
    ScaledGemmProblem,
)

__all__ = [
    "REDUCE_KIND_CODES",
    "RMS_NORM_EPS",
    "MAX_EPS_BITS",
    "eps_bits",
    "eps_from_bits",
    "abi_dims",
]

#: reduce kind -> the code a kernel reads as its third dim
REDUCE_KIND_CODES: dict[str, int] = {"sum": 0, "max": 1, "mean": 2}
#: the eps every rms_norm variant is verified and timed with (Mistral's and Qwen2's)
RMS_NORM_EPS = 1e-6
#: eps bit patterns at or above this are refused (the sign bit, infinities and NaNs)
MAX_EPS_BITS = 0x7F800000


def eps_bits(eps: float) -> int:
    """The float32 bit pattern of ``eps`` (rounded to float32) as a non-negative int.

    ValueError for a negative, infinite or NaN eps, which the kernels refuse too."""
    if not isinstance(eps, int | float) or isinstance(eps, bool):
        raise ValueError(f"eps must be a number, got {eps!r}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    try:
        (bits,) = struct.unpack("<I", struct.pack("<f", eps))
    except OverflowError:
        raise ValueError(f"eps {eps!r} does not fit a float32") from None
    if bits >= MAX_EPS_BITS:
        raise ValueError(f"eps {eps!r} does not fit a float32")
    return int(bits)


def eps_from_bits(bits: int) -> float:
    """The float32 value a kernel reads from ``bits`` (as a Python float)."""
    if not 0 <= bits < MAX_EPS_BITS:
        raise ValueError(f"eps bits must be in [0, {MAX_EPS_BITS:#x}), got {bits:#x}")
    (value,) = struct.unpack("<f", struct.pack("<I", bits))
    return float(value)


def abi_dims(problem: Problem, *, eps: float = RMS_NORM_EPS) -> list[int]:
    """The ``dims`` array a variant of ``problem``'s op takes (see the module docstring);
    ``eps`` is read for rms_norm only."""
    dims = [int(v) for v in problem.int_dims().values()]
    if isinstance(problem, ReduceProblem):
        dims.append(REDUCE_KIND_CODES[problem.kind])
    elif isinstance(problem, RmsNormProblem):
        dims.append(eps_bits(eps))
    elif isinstance(problem, ScaledGemmProblem):
        dims += [OUT_DTYPE_CODES[problem.out_dtype], SCALING_CODES[problem.scaling]]
    elif isinstance(problem, GroupedGemmProblem):
        dims.extend(token_counts(problem.experts, problem.tokens, problem.skew))
    return dims
