"""FP8 (e4m3) grouped GEMM with rowwise scales: inputs and the f32 reference (issue 26 item 2).

``grouped_gemm`` with dtype ``e4m3`` computes, for each expert ``e`` and each token row ``i``
routed to it (tokens stacked by expert, as for bf16):

    C[i, j] = bf16( sum_k A[i, k] * W[e, j, k] * scale_a[i] * scale_b[e, j] )

with f32 accumulation: ``torch._scaled_grouped_mm``'s rowwise scaling on sm90. Layouts (the
kernel's inputs, in order; ``tuner.abi``):

- ``a`` [tokens, k] e4m3 (``float8_e4m3fn`` bytes), rows stacked by expert;
- ``w`` [experts, n, k] e4m3, each expert's weight as ``nn.Linear`` stores it (layout rcr);
- ``a_scale`` f32 [tokens]: one per token row;
- ``b_scale`` f32 [experts, n]: one per expert output column;
- output C [tokens, n] bf16 (:data:`tuner.problems.GROUPED_FP8_OUT_DTYPE`).

Inputs are made as a rowwise quantizer makes them, like ``scaled_gemm``'s (``tuner.fp8``):
values in [-1, 1] times a random factor per scale group (0.25..4: one per token row, one per
expert output column), each group's scale its amax / 448. The factors make every scale matter:
a kernel that applies a neighbour's scale, or none, is off by up to 16x on some output.

Verification: the reference is the per-expert product of the dequantized operands (the very
bytes and scales the kernel reads) in float32 with float64 sums; the tolerance is FP8's, as for
``scaled_gemm`` (``tuner.reference.error_limit``: 2^-7 of |expected| plus the L2 norm of the
output's k terms, :func:`grouped_fp8_term_norms`), so it scales with the inputs' factors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tuner.fp8 import E4M3_MAX, e4m3_to_float, float_to_e4m3, term_norms
from tuner.moe import token_counts
from tuner.problems import GroupedGemmProblem

__all__ = [
    "SCALE_FACTORS",
    "make_grouped_fp8_inputs",
    "dequantize_grouped",
    "grouped_fp8_reference",
    "grouped_fp8_term_norms",
]

#: the range of the random factor per scale group (the harness draws the same range)
SCALE_FACTORS = (0.25, 4.0)


def _rowwise(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(e4m3 bytes, f32 scales) of ``values`` quantized per last-dim row: scale = amax / 448."""
    scale = (np.abs(values).max(axis=-1) / E4M3_MAX).astype(np.float32)
    return float_to_e4m3(values / scale[..., None]), scale


def make_grouped_fp8_inputs(
    problem: GroupedGemmProblem, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Random FP8 operands and rowwise scales (module docstring): a, w, a_scale, b_scale."""
    t, e, n, k = problem.tokens, problem.experts, problem.n, problem.k
    low, high = SCALE_FACTORS
    a = rng.uniform(-1.0, 1.0, size=(t, k)) * rng.uniform(low, high, size=(t, 1))
    w = rng.uniform(-1.0, 1.0, size=(e, n, k)) * rng.uniform(low, high, size=(e, n, 1))
    qa, sa = _rowwise(a.astype(np.float32))
    qw, sw = _rowwise(w.astype(np.float32))
    return {"a": qa, "w": qw, "a_scale": sa, "b_scale": sw}


def dequantize_grouped(
    problem: GroupedGemmProblem, inputs: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(A [tokens, k], W [experts, n, k]) as float32: each e4m3 value times its row's scale."""
    t, e, n, k = problem.tokens, problem.experts, problem.n, problem.k
    a = e4m3_to_float(inputs["a"]).reshape(t, k) * inputs["a_scale"].reshape(t, 1)
    w = e4m3_to_float(inputs["w"]).reshape(e, n, k) * inputs["b_scale"].reshape(e, n, 1)
    return a, w


def _per_expert(
    problem: GroupedGemmProblem,
    inputs: dict[str, np.ndarray],
    counts: Sequence[int] | None,
    product: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """[tokens, n] float32: ``product(rows, weight)`` of each expert's dequantized token rows
    and weight [n, k] for ``counts`` tokens per expert (default: the bucket's,
    ``tuner.moe.token_counts``); rows past the counts' total stay zero."""
    a, w = dequantize_grouped(problem, inputs)
    out = np.zeros((problem.tokens, problem.n), dtype=np.float32)
    if counts is None:
        counts = token_counts(problem.experts, problem.tokens, problem.skew)
    start = 0
    for e, m in enumerate(counts):
        out[start : start + m] = product(a[start : start + m], w[e])
        start += m
    return out


def grouped_fp8_reference(
    problem: GroupedGemmProblem,
    inputs: dict[str, np.ndarray],
    counts: Sequence[int] | None = None,
) -> np.ndarray:
    """C as float32 [tokens, n] for ``counts`` tokens per expert (default: the bucket's),
    summed in float64; rows past the counts' total stay zero (a bucket's counts fill every
    row)."""
    return _per_expert(
        problem, inputs, counts, lambda rows, w: rows.astype(np.float64) @ w.astype(np.float64).T
    )


def grouped_fp8_term_norms(
    problem: GroupedGemmProblem,
    inputs: dict[str, np.ndarray],
    counts: Sequence[int] | None = None,
) -> np.ndarray:
    """Per output, the L2 norm of its k dequantized terms (``tuner.fp8.term_norms``): the
    ``term_norm`` of ``tuner.reference.verify``."""
    return _per_expert(problem, inputs, counts, term_norms)
