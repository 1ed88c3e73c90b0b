"""GPU side of grouped_gemm e4m3 (FP8, rowwise scales, bf16 out): the harness's workload,
inputs and reference, made with torch as ``tuner.fp8_grouped`` makes them with numpy (layouts
there).

Imported only inside the harness process, by ``tuner.backends.cuda_workload.build_workload``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch

from tuner.abi import abi_dims
from tuner.backends.cuda_workload import (
    TORCH_DTYPES,
    Workload,
    input_set_count,
    seeded_generator,
)
from tuner.fp8 import E4M3_MAX, term_norms
from tuner.fp8_grouped import SCALE_FACTORS
from tuner.moe import token_counts
from tuner.problems import GROUPED_FP8_OUT_DTYPE, GroupedGemmProblem

__all__ = [
    "grouped_fp8_workload",
    "grouped_fp8_inputs",
    "grouped_fp8_reference",
    "grouped_fp8_term_norms",
    "grouped_fp8_set_bytes",
]


def _rowwise(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3, f32 scales) of ``values`` quantized per last-dim row: scale = amax / 448 (torch's
    float8_e4m3fn cast rounds to nearest even; |values / scale| <= 448 saturates nothing)."""
    scale = values.abs().amax(dim=-1) / E4M3_MAX
    return (values / scale.unsqueeze(-1)).to(torch.float8_e4m3fn), scale.float().contiguous()


def grouped_fp8_inputs(problem: GroupedGemmProblem, gen: torch.Generator) -> list[torch.Tensor]:
    """[a [tokens, k], w [experts, n, k], a_scale [tokens], b_scale [experts, n]] on the
    generator's device: values in [-1, 1] times a random factor per row (``SCALE_FACTORS``),
    scale = amax / 448."""
    t, e, n, k = problem.tokens, problem.experts, problem.n, problem.k
    low, high = SCALE_FACTORS

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=gen, device=gen.device) * 2.0 - 1.0

    def factor(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=gen, device=gen.device) * (high - low) + low

    qa, sa = _rowwise(uniform(t, k) * factor(t, 1))
    qw, sw = _rowwise(uniform(e, n, k) * factor(e, n, 1))
    return [qa, qw, sa, sw]


def _per_expert(
    inputs: list[torch.Tensor],
    counts: list[int],
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """[tokens, n] float32: ``product(rows, weight)`` of each expert's dequantized token rows
    and dequantized weight [n, k]; rows past ``sum(counts)`` are zero."""
    a, w, sa, sw = inputs
    deq_a = a.float() * sa.unsqueeze(1)
    out = torch.zeros((a.shape[0], w.shape[1]), dtype=torch.float32, device=a.device)
    start = 0
    for e, m in enumerate(counts):
        if m:
            deq_w = w[e].float() * sw[e].unsqueeze(1)
            out[start : start + m] = product(deq_a[start : start + m], deq_w)
        start += m
    return out


def grouped_fp8_reference(inputs: list[torch.Tensor], counts: list[int]) -> torch.Tensor:
    """C [tokens, n] in float32: per expert, the dequantized token rows times the dequantized
    weight's transpose (TF32 off: the caller sets it); rows past ``sum(counts)`` are zero."""
    return _per_expert(inputs, counts, lambda rows, w: rows @ w.t())


def grouped_fp8_term_norms(inputs: list[torch.Tensor], counts: list[int]) -> torch.Tensor:
    """Per output, the L2 norm of its k terms (``tuner.fp8.term_norms``), per expert."""
    return _per_expert(inputs, counts, term_norms)


def grouped_fp8_set_bytes(problem: GroupedGemmProblem) -> int:
    """Bytes of one input set and its bf16 output (the rotation's unit)."""
    t, e, n, k = problem.tokens, problem.experts, problem.n, problem.k
    return t * k + e * n * k + 4 * (t + e * n) + 2 * t * n


def grouped_fp8_workload(
    problem: GroupedGemmProblem, dtype: str, layout: str, seed: int, l2_bytes: int
) -> Workload:
    """FP8 operands and rowwise scales per set, bf16 outputs, the reference from the
    dequantized set 0 (float32 matmuls, TF32 off), sets rotated over >= 2x L2 as every op's."""
    torch.backends.cuda.matmul.allow_tf32 = False
    set_bytes = grouped_fp8_set_bytes(problem)
    n_sets = input_set_count(set_bytes, l2_bytes)
    gen = seeded_generator(seed)
    inputs = [grouped_fp8_inputs(problem, gen) for _ in range(n_sets)]
    out = TORCH_DTYPES[GROUPED_FP8_OUT_DTYPE]
    shape = (problem.tokens, problem.n)
    outputs = [torch.empty(shape, dtype=out, device="cuda") for _ in range(n_sets)]
    counts = token_counts(problem.experts, problem.tokens, problem.skew)
    work = Workload(
        key=f"{problem.op}|{dtype}|{layout}|{problem.key()}|{seed}",
        inputs=inputs,
        outputs=outputs,
        expected=grouped_fp8_reference(inputs[0], counts),
        term_norm=grouped_fp8_term_norms(inputs[0], counts),
        dims=abi_dims(problem),
        reduction_len=problem.reduction_length(),
        set_bytes=set_bytes,
        out_dtype=GROUPED_FP8_OUT_DTYPE,
    )
    work.pointer_arrays = [(ctypes.c_void_p * len(s))(*[t.data_ptr() for t in s]) for s in inputs]
    return work
