"""FP8 (e4m3) storage, scale layouts, random inputs and the f32 reference of ``scaled_gemm``.

One definition for every backend and caller (the CUDA harness builds the same tensors with
torch in ``tuner.backends.cuda_workload``; the GPU tests check the two agree):

- A [m, k] and B [n, k] are FP8 e4m3 (``float8_e4m3fn``: no infinities, largest 448), stored as
  their bytes, rows contiguous (layout ``rcr``).
- ``per_tensor`` scaling: ``a_scale`` and ``b_scale`` are one f32 each.
- ``block`` scaling (DeepSeek-V3 style): ``a_scale`` holds one f32 per row and 128-wide K block,
  stored M-major, i.e. as a row-major [k/128, m] array (element ``a_scale[kb * m + i]`` scales
  A[i, kb*128 : kb*128+128]); ``b_scale`` one f32 per 128x128 block of B, row-major
  [n/128, k/128] (element ``b_scale[nb * (k/128) + kb]``). These are the layouts DeepGEMM and
  CUTLASS's sm90 groupwise kernels read (SFA M-major, SFB K-major) and ``torch._scaled_mm``'s
  1x128 activation scales (shape [m, k/128], stride (1, m)).
- Kernel inputs, in order: ``a, b, a_scale, b_scale``; output D [m, n] row-major in out_dtype.

Verification: the reference is D = dequant(A) @ dequant(B)^T in float32 (float64 sums), from
the very bytes and scales the kernel reads. Products of two e4m3 values are exact in f32, so a
correct kernel differs from it only by its accumulation order, Hopper's FP8 tensor-core
accumulator (about 14 mantissa bits inside one wgmma, CUTLASS's fast-accumulation kernels) and
the final rounding to bf16/f16. The tolerance (``tuner.reference.error_limit``) is
FP8_TOLERANCE = 2^-7 of |expected| plus the L2 norm of the output's k terms
(:func:`term_norms`): it is the same at any scale of the inputs (their scales span 16x), it does
not fail an output that is near zero by cancellation of large terms, and a dropped 128-wide K
block or a wrong block scale still moves outputs far past it (tests/tuner/test_scaled_gemm.py).
Fast accumulation (a wgmma accumulator carried over the whole K) loses ~2^-13 of the running
sum per K step: at k = 18944 that measured 6% of the output's size on an H100 (2026-12-05), a
wrong result here; at k = 1024-4096 it stays within the bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuner.problems import SCALE_BLOCK, ScaledGemmProblem

__all__ = [
    "E4M3_MAX",
    "OUT_DTYPE_CODES",
    "SCALING_CODES",
    "e4m3_values",
    "e4m3_to_float",
    "float_to_e4m3",
    "scale_counts",
    "make_scaled_gemm_inputs",
    "dequantize",
    "scaled_gemm_reference",
    "scaled_gemm_term_norms",
    "FP8_TOLERANCE",
    "term_norms",
]

#: the largest finite e4m3 (fn) value
E4M3_MAX = 448.0
#: scaled_gemm's out_dtype and scaling as the kernels read them (ABI dims 4 and 5)
OUT_DTYPE_CODES: dict[str, int] = {"bf16": 0, "f16": 1}
SCALING_CODES: dict[str, int] = {"per_tensor": 0, "block": 1}


#: FP8 products' tolerance (scaled_gemm, grouped_gemm e4m3), relative to |expected| plus the
#: L2 norm of the output's k terms (``tuner.reference.error_limit``): Hopper's FP8 tensor
#: cores keep ~13-14 bits inside an MMA, so a correct kernel's accumulation error is a small
#: multiple of 2^-13 of the terms' size, and its bf16 rounding 2^-9 of the output; a dropped
#: K block, a wrong scale or a neighbour's row moves an output by a sizeable share of its
#: terms' norm.
FP8_TOLERANCE = 2.0**-7


def term_norms(a: Any, b: Any) -> Any:
    """||(a[i, :] * b[j, :])||_2 for every output (i, j) of a [m, k] @ b[n, k]^T: the size of
    the k terms an output sums, which sets its accumulation error whatever its own value (an
    output near zero by cancellation has terms as large as its neighbours'). Works alike on
    float32 numpy arrays and torch tensors."""
    return ((a * a) @ (b * b).T) ** 0.5


def _table() -> np.ndarray:
    """float32 value of each of the 256 e4m3fn bytes (0x7F and 0xFF are NaN)."""
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = codes & 0x7
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent - 7.0)
    subnormal = (mantissa / 8.0) * np.exp2(-6.0)
    values = sign * np.where(exponent == 0, subnormal, normal)
    values[(codes & 0x7F) == 0x7F] = np.nan
    return values.astype(np.float32)


_VALUES = _table()
#: the non-negative finite codes 0x00..0x7E in increasing value (the encoder searches these)
_POSITIVE = _VALUES[:0x7F]


def e4m3_values() -> np.ndarray:
    """A copy of the 256-entry decode table (float32, NaN for 0x7F and 0xFF)."""
    return _VALUES.copy()


def e4m3_to_float(codes: np.ndarray) -> np.ndarray:
    """e4m3 bytes (uint8) -> float32."""
    return _VALUES[np.asarray(codes, dtype=np.uint8)]


def float_to_e4m3(values: np.ndarray) -> np.ndarray:
    """float -> e4m3 bytes, round to nearest (ties to the even code), saturating at +-448."""
    x = np.asarray(values, dtype=np.float32)
    mag = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.clip(np.searchsorted(_POSITIVE, mag, side="left"), 0, len(_POSITIVE) - 1)
    lo = np.maximum(hi - 1, 0)
    d_hi = _POSITIVE[hi] - mag
    d_lo = mag - _POSITIVE[lo]
    take_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0))
    code = np.where(take_lo, lo, hi).astype(np.uint8)
    return np.where(np.signbit(x) & (code != 0), code | 0x80, code).astype(np.uint8)


def scale_counts(problem: ScaledGemmProblem) -> tuple[int, int]:
    """How many f32 scales A and B carry (see the module doc for their layouts)."""
    if problem.scaling == "per_tensor":
        return 1, 1
    kb = problem.k // SCALE_BLOCK
    return problem.m * kb, (problem.n // SCALE_BLOCK) * kb


def _quantize(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return float_to_e4m3(x / scale)


def make_scaled_gemm_inputs(
    problem: ScaledGemmProblem, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Random FP8 operands and scales as a quantizer makes them: values in [-1, 1] times a
    random factor per scale group (0.25..4), each group's scale its amax / 448."""
    m, n, k = problem.m, problem.n, problem.k
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, size=(n, k)).astype(np.float32)
    if problem.scaling == "per_tensor":
        sa = np.array([np.abs(a).max() / E4M3_MAX], dtype=np.float32)
        sb = np.array([np.abs(b).max() / E4M3_MAX], dtype=np.float32)
        return {"a": _quantize(a, sa[0]), "b": _quantize(b, sb[0]), "a_scale": sa, "b_scale": sb}
    kb, nb = k // SCALE_BLOCK, n // SCALE_BLOCK
    a_groups = a.reshape(m, kb, SCALE_BLOCK) * rng.uniform(0.25, 4.0, size=(m, kb, 1))
    b_groups = b.reshape(nb, SCALE_BLOCK, kb, SCALE_BLOCK) * rng.uniform(
        0.25, 4.0, size=(nb, 1, kb, 1)
    )
    sa = (np.abs(a_groups).max(axis=2) / E4M3_MAX).astype(np.float32)  # [m, kb]
    sb = (np.abs(b_groups).max(axis=(1, 3)) / E4M3_MAX).astype(np.float32)  # [nb, kb]
    qa = _quantize(a_groups, sa[:, :, None]).reshape(m, k)
    qb = _quantize(b_groups, sb[:, None, :, None]).reshape(n, k)
    # A's scales M-major: [kb, m] row-major; B's [nb, kb] row-major
    return {"a": qa, "b": qb, "a_scale": np.ascontiguousarray(sa.T), "b_scale": sb}


def dequantize(problem: ScaledGemmProblem, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(A, B) as float32 [m, k] and [n, k]: each e4m3 value times its scale."""
    m, n, k = problem.m, problem.n, problem.k
    a = e4m3_to_float(inputs["a"]).reshape(m, k)
    b = e4m3_to_float(inputs["b"]).reshape(n, k)
    if problem.scaling == "per_tensor":
        return a * inputs["a_scale"].reshape(-1)[0], b * inputs["b_scale"].reshape(-1)[0]
    kb = k // SCALE_BLOCK
    sa = inputs["a_scale"].reshape(kb, m).T  # [m, kb]
    sb = inputs["b_scale"].reshape(n // SCALE_BLOCK, kb)
    a = a * np.repeat(sa, SCALE_BLOCK, axis=1)
    b = b * np.repeat(np.repeat(sb, SCALE_BLOCK, axis=0), SCALE_BLOCK, axis=1)
    return a, b


def scaled_gemm_reference(problem: ScaledGemmProblem, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """D = dequant(A) @ dequant(B)^T as float32 [m, n], summed in float64."""
    a, b = dequantize(problem, inputs)
    return (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32)


def scaled_gemm_term_norms(problem: ScaledGemmProblem, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Per output, the L2 norm of its k dequantized terms (:func:`term_norms`), float32."""
    a, b = dequantize(problem, inputs)
    return term_norms(a.astype(np.float32), b.astype(np.float32)).astype(np.float32)
