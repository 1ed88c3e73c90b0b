"""Random inputs, numpy references and per-dtype tolerances for every op.

Every backend verifies a variant's output against these before its timing counts. Storage
types: f32 -> float32, f16 -> float16, bf16 -> uint16 holding the upper half of a float32.
References compute in float32 (float64 for long reductions) from the stored (rounded) inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.abi import RMS_NORM_EPS
from tuner.epilogues import NONE, activation_of
from tuner.fp8 import FP8_TOLERANCE, make_scaled_gemm_inputs, scaled_gemm_reference
from tuner.fp8_grouped import grouped_fp8_reference, make_grouped_fp8_inputs
from tuner.moe import token_counts
from tuner.problems import (
    Conv2dProblem,
    GemmProblem,
    GroupedGemmProblem,
    Problem,
    ReduceProblem,
    RmsNormProblem,
    ScaledGemmProblem,
    SoftmaxProblem,
)

__all__ = [
    "STORAGE",
    "ELEMENT_SIZE",
    "to_storage",
    "from_storage",
    "make_inputs",
    "reference",
    "rms_norm_reference",
    "grouped_gemm_reference",
    "apply_epilogue",
    "Verdict",
    "tolerance",
    "bound_share",
    "non_finite",
    "error_limit",
    "verify",
]

STORAGE: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),
}
ELEMENT_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "e4m3": 1}
# (relative, absolute) tolerances of the output, per output storage dtype
_TOLERANCE = {"f32": (1e-4, 1e-4), "f16": (1e-2, 1e-2), "bf16": (2e-2, 2e-2)}


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """float array -> storage array of ``dtype`` (bf16 rounds to nearest even)."""
    if dtype == "bf16":
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        rounded = bits + 0x7FFF + ((bits >> 16) & 1)
        return (rounded >> 16).astype(np.uint16)
    return np.ascontiguousarray(values, dtype=STORAGE[dtype])


def from_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """storage array -> float32 array."""
    if dtype == "bf16":
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values.astype(np.float32, copy=False)  # f32 inputs are read, never written


def make_inputs(
    problem: Problem, dtype: str, layout: str, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Random (never zero-filled) inputs in storage dtype, laid out as the kernel reads them."""

    def uniform(*shape: int, scale: float = 1.0) -> np.ndarray:
        # drawn in float32 and scaled in place: a 64 MB input in a third of the time of a
        # float64 draw and a cast (a new job makes its inputs again)
        values = rng.random(size=shape, dtype=np.float32)
        values *= 2.0 * scale
        values -= scale
        return to_storage(values, dtype)

    if isinstance(problem, ScaledGemmProblem):  # FP8 bytes and f32 scales (tuner.fp8)
        return make_scaled_gemm_inputs(problem, rng)
    if isinstance(problem, GroupedGemmProblem) and dtype == "e4m3":  # tuner.fp8_grouped
        return make_grouped_fp8_inputs(problem, rng)
    if isinstance(problem, GemmProblem):
        m, n, k = problem.m, problem.n, problem.k
        a = uniform(m, k) if layout[0] == "r" else uniform(k, m)
        b = uniform(k, n) if layout[1] == "r" else uniform(n, k)
        if problem.epilogue == NONE:
            return {"a": a, "b": b}
        return {"a": a, "b": b, "bias": uniform(n)}  # a fused epilogue's third input
    if isinstance(problem, Conv2dProblem):
        p = problem
        x, w = uniform(p.n, p.h, p.w, p.c), uniform(p.k, p.r, p.s, p.c)
        return {"x": x, "w": w} if p.epilogue == NONE else {"x": x, "w": w, "bias": uniform(p.k)}
    if isinstance(problem, ReduceProblem | SoftmaxProblem):
        return {"x": uniform(problem.m, problem.k, scale=4.0)}
    if isinstance(problem, RmsNormProblem):
        return {"x": uniform(problem.m, problem.k, scale=4.0), "w": uniform(problem.k, scale=4.0)}
    if isinstance(problem, GroupedGemmProblem):  # A [tokens, k] stacked by expert, W [E, n, k]
        g = problem
        return {"a": uniform(g.tokens, g.k), "w": uniform(g.experts, g.n, g.k)}
    raise TypeError(f"no inputs for {type(problem).__name__}")


def reference(
    problem: Problem, dtype: str, layout: str, inputs: dict[str, np.ndarray]
) -> np.ndarray:
    """The expected output as float32 (C row-major, y NPQK, y[m] or y[m, k])."""
    if isinstance(problem, ScaledGemmProblem):  # from the dequantized FP8 inputs
        return scaled_gemm_reference(problem, inputs)
    if isinstance(problem, GroupedGemmProblem) and dtype == "e4m3":  # rowwise-scaled FP8
        return grouped_fp8_reference(problem, inputs)
    if isinstance(problem, GemmProblem):
        a = from_storage(inputs["a"], dtype)
        b = from_storage(inputs["b"], dtype)
        a = a if layout[0] == "r" else a.T
        b = b if layout[1] == "r" else b.T
        return _epilogue(a @ b, problem.epilogue, inputs, dtype)
    if isinstance(problem, Conv2dProblem):
        y = _conv2d_nhwc(
            problem, from_storage(inputs["x"], dtype), from_storage(inputs["w"], dtype)
        )
        return _epilogue(y, problem.epilogue, inputs, dtype)
    if isinstance(problem, ReduceProblem):
        x = from_storage(inputs["x"], dtype)
        if problem.kind == "max":
            return x.max(axis=1).astype(np.float32)
        total = x.sum(axis=1, dtype=np.float64)  # accumulated in float64, without a copy
        return (total / problem.k if problem.kind == "mean" else total).astype(np.float32)
    if isinstance(problem, SoftmaxProblem):
        x = from_storage(inputs["x"], dtype)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    if isinstance(problem, RmsNormProblem):
        return rms_norm_reference(
            from_storage(inputs["x"], dtype), from_storage(inputs["w"], dtype), RMS_NORM_EPS
        )
    if isinstance(problem, GroupedGemmProblem):
        return grouped_gemm_reference(
            from_storage(inputs["a"], dtype),
            from_storage(inputs["w"], dtype),
            token_counts(problem.experts, problem.tokens, problem.skew),
        )
    raise TypeError(f"no reference for {type(problem).__name__}")


def grouped_gemm_reference(a: np.ndarray, w: np.ndarray, counts: list[int]) -> np.ndarray:
    """Per-expert matmuls in float32: rows ``start:start + m_e`` of ``a`` [tokens, k] times
    ``w[e]``^T ([n, k]); rows past ``sum(counts)`` are zero here (kernels leave them
    unwritten: a bucket's benchmark counts sum to its ``tokens``)."""
    out = np.zeros((a.shape[0], w.shape[1]), dtype=np.float32)
    start = 0
    for e, m in enumerate(counts):
        out[start : start + m] = a[start : start + m] @ w[e].T
        start += m
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf: vectorize math.erf (the reference is not timed)
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _activate(x: np.ndarray, activation: str) -> np.ndarray:
    if activation == "relu":
        return np.maximum(x, 0.0)
    if activation == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if activation == "silu":
        return x / (1.0 + np.exp(-x))
    return x


def apply_epilogue(acc: np.ndarray, bias: np.ndarray | None, epilogue: str) -> np.ndarray:
    """The float32 output of ``epilogue`` on the product ``acc`` (last dim: output columns of
    the product) and the float32 ``bias`` (one per product column)."""
    if epilogue == NONE:
        return acc
    if bias is None:
        raise ValueError(f"epilogue {epilogue} needs a bias")
    x = acc.astype(np.float64) + bias.astype(np.float64)
    if epilogue == "gated_silu":
        half = x.shape[-1] // 2
        out = _activate(x[..., :half], "silu") * x[..., half:]
    else:
        out = _activate(x, activation_of(epilogue))
    return out.astype(np.float32)


def _epilogue(
    acc: np.ndarray, epilogue: str, inputs: dict[str, np.ndarray], dtype: str
) -> np.ndarray:
    if epilogue == NONE:
        return acc
    return apply_epilogue(acc, from_storage(inputs["bias"], dtype), epilogue)


def rms_norm_reference(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """w * (x * rsqrt(mean(x^2) + eps)) over the last dim of float32 ``x`` [m, k] with float32
    ``w`` [k]: the sum of squares in float64, eps as the float32 a kernel reads."""
    squares = np.square(x).sum(axis=1, dtype=np.float64)
    mean = squares / x.shape[1] + float(np.float32(eps))
    scale = (1.0 / np.sqrt(mean)).astype(np.float32)
    return (w * (x * scale[:, None])).astype(np.float32, copy=False)


def _conv2d_nhwc(p: Conv2dProblem, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (p.pad, p.pad), (p.pad, p.pad), (0, 0)))
    y = np.zeros((p.n, p.p, p.q, p.k), dtype=np.float32)
    for r in range(p.r):
        for s in range(p.s):
            h0, w0 = r * p.dilation, s * p.dilation
            patch = xp[
                :, h0 : h0 + p.stride * p.p : p.stride, w0 : w0 + p.stride * p.q : p.stride, :
            ]
            y += patch @ w[:, r, s, :].T
    return y


def tolerance(dtype: str, reduction_len: int = 1) -> tuple[float, float]:
    """(rtol, atol) for an output of ``dtype`` that accumulates ``reduction_len`` terms.

    It grows with sqrt(reduction length): the fp accumulation error of a correct kernel grows
    that way, a wrong kernel's error does not stay that small.
    """
    rtol, atol = _TOLERANCE[dtype]
    scale = max(1.0, math.sqrt(reduction_len) / 8.0)
    return rtol * scale, atol * scale


def error_limit(
    expected: Any, dtype: str, reduction_len: int = 1, term_norm: Any | None = None
) -> Any:
    """The largest |error| each output may have (numpy arrays and torch tensors alike).

    With ``term_norm`` (FP8 operands: ``tuner.fp8.term_norms``) the bound is
    FP8_TOLERANCE * (|expected| + term_norm), the same at any scale of the inputs; without it,
    the output dtype's (rtol, atol) of :func:`tolerance`, set for inputs in [-1, 1].
    """
    if term_norm is not None:
        return FP8_TOLERANCE * (abs(expected) + term_norm)
    rtol, atol = tolerance(dtype, reduction_len)
    return atol + rtol * abs(expected)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    max_abs_error: float
    message: str
    #: the largest |error| / error_limit over the outputs: <= 1 passes; how near a kernel
    #: came to the bound (kept in a measurement's provenance)
    bound_share: float = 0.0


def verify(
    output: np.ndarray,
    expected: np.ndarray,
    dtype: str,
    reduction_len: int = 1,
    term_norm: np.ndarray | None = None,
) -> Verdict:
    """Compare a kernel's output (storage dtype) with the float32 reference (error_limit:
    ``term_norm`` for FP8 operands)."""
    got = from_storage(np.asarray(output), dtype).reshape(expected.shape)
    if not np.all(np.isfinite(got)):
        bad = int(np.count_nonzero(~np.isfinite(got)))
        return non_finite(bad)
    err = np.abs(got - expected)
    limit = error_limit(expected, dtype, reduction_len, term_norm)
    worst = float(err.max()) if err.size else 0.0
    share = bound_share(err, limit)
    if np.all(err <= limit):
        return Verdict(True, worst, "ok", share)
    where = np.unravel_index(int(np.argmax(err - limit)), err.shape)
    return Verdict(
        False,
        worst,
        f"max |error| {worst:.3g} ({share:.3g}x the bound) at {tuple(int(i) for i in where)}: "
        f"got {float(got[where]):.6g}, expected {float(expected[where]):.6g}",
        share,
    )


def non_finite(count: int) -> Verdict:
    """The verdict on an output with ``count`` NaN or infinite values."""
    return Verdict(
        False, math.inf, f"{count} non-finite outputs (poison left or overflow)", math.inf
    )


def bound_share(err: Any, limit: Any) -> float:
    """max(err / limit) over the outputs (numpy arrays or torch tensors alike); 0 when empty,
    inf where a zero limit meets an error."""
    count = err.size if isinstance(err, np.ndarray) else err.numel()
    if count == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = err / limit
    ratio[err == 0] = 0.0  # 0 / 0 where an exact output's limit is zero
    return float(ratio.max())
