"""``tunehub::scaled_grouped_mm``: an FP8 (e4m3) mixture-of-experts grouped GEMM with rowwise
scales through a tuned ``grouped_gemm`` variant of dtype ``e4m3`` (CUDA only, bf16 out), with
``torch._scaled_grouped_mm`` as its fallback (docs/grouped_gemm.md, "FP8").

    out[i] = (scale_a[i] * a[i]) @ (scale_b[e] * weight[e]).T      for each row i of expert e

in float32, written in ``out_dtype``. The operands are ``torch._scaled_grouped_mm``'s with
``grouped_mm``'s convention for the weight: ``a`` [tokens, k] e4m3 stacked by expert,
``weight`` [E, n, k] e4m3 (each expert's as ``nn.Linear`` stores it; torch takes
``weight.transpose(-2, -1)``), ``scale_a`` float32 [tokens] (one per row), ``scale_b`` float32
[E, n] (one per expert output column), ``offs`` the int32 cumulative tokens per expert.

The key, the per-call counts, the launch and its synchronisation are ``grouped_mm``'s
(:func:`._torch_grouped.run_grouped`: each call copies ``offs`` to the host, so under CUDA
graph capture torch's op is captured instead); the problem is the bucket with dtype e4m3 and
the kernel's inputs are ``a, weight, scale_a, scale_b`` (``tuner.fp8_grouped``). Only
``out_dtype`` bfloat16 is tuned (the e4m3 kernels write bf16), and n and k must be multiples
of 16 (whole 16-byte FP8 rows); other calls run torch's op, said once. Where torch refuses the
call too (this torch has no CPU kernel for it, or an older GPU) the dequantized float32
product runs, said once per shape, as ``scaled_mm`` does.
"""

from __future__ import annotations

import logging

import torch

from service.integrations._torch_fp8 import first_refusal
from service.integrations._torch_grouped import check_grouped_mm, note_unsupported, run_grouped
from service.integrations._torch_ops import Definition, register

__all__ = [
    "OUT_DTYPE",
    "check_scaled_grouped_mm",
    "scaled_grouped_mm_kernel",
    "scaled_grouped_mm_reference",
]

log = logging.getLogger(__name__)

#: the output dtype of the tuned kernels (tuner.problems.GROUPED_FP8_OUT_DTYPE)
OUT_DTYPE = torch.bfloat16
#: FP8 rows move in 16-byte vectors: n and k multiples of this (tuner.problems.FP8_K_ALIGN)
_ALIGN = 16
_OP = "scaled_grouped_mm"


def check_scaled_grouped_mm(
    a: torch.Tensor,
    weight: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    offs: torch.Tensor,
) -> None:
    """ValueError naming the argument for operands no scaled grouped mm takes (torch's
    either): a and weight float8_e4m3fn, grouped_mm's shapes and offs, float32 scales of
    shapes [tokens] and [experts, n]."""
    fp8 = getattr(torch, "float8_e4m3fn", None)
    for name, t in (("a", a), ("weight", weight)):
        if fp8 is None or t.dtype != fp8:
            raise ValueError(f"{_OP}: {name} must be float8_e4m3fn, got {t.dtype}")
    check_grouped_mm(a, weight, offs, _OP)
    wants = (("scale_a", scale_a, (a.shape[0],)), ("scale_b", scale_b, tuple(weight.shape[:2])))
    for name, scale, shape in wants:
        if scale.dtype != torch.float32 or tuple(scale.shape) != shape:
            what = "[tokens]" if name == "scale_a" else "[experts, n]"
            raise ValueError(
                f"{_OP}: {name} must be float32 {what} = {list(shape)}, got {scale.dtype} "
                f"{list(scale.shape)}"
            )


def scaled_grouped_mm_reference(
    a: torch.Tensor,
    weight: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    offs: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """The float32 per-expert product of the dequantized operands, rounded once to
    ``out_dtype``; rows past ``offs[-1]`` zero."""
    deq_a = a.float() * scale_a.unsqueeze(1)
    out = torch.zeros((a.shape[0], weight.shape[1]), dtype=torch.float32, device=a.device)
    start = 0
    for e, end in enumerate(int(v) for v in offs.tolist()):
        if end > start:
            out[start:end] = deq_a[start:end] @ (weight[e].float() * scale_b[e].unsqueeze(1)).t()
        start = max(start, end)
    return out.to(out_dtype)


def _first_sentence(exc: Exception) -> str:
    """What torch said, up to its first sentence's end (its dispatcher lists every backend)."""
    return str(exc).splitlines()[0].split(". ")[0] if str(exc) else type(exc).__name__


def _unsupported(weight: torch.Tensor, out_dtype: torch.dtype) -> str | None:
    """Why no tuned kernel takes this call, before the bucket is known, or None."""
    if out_dtype != OUT_DTYPE:
        return f"out_dtype {out_dtype} (the e4m3 grouped_gemm kernels write bfloat16)"
    _, n, k = weight.shape
    if n % _ALIGN or k % _ALIGN:
        return f"n={n}, k={k} (e4m3 grouped_gemm needs multiples of {_ALIGN})"
    return None


def scaled_grouped_mm_kernel(
    a: torch.Tensor,
    weight: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    offs: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """The tuned kernel's output, else ``torch._scaled_grouped_mm``'s, else (where torch
    refuses: no CPU kernel, an older GPU) the dequantized float32 product, said once per
    shape."""
    check_scaled_grouped_mm(a, weight, scale_a, scale_b, offs)
    why = _unsupported(weight, out_dtype)
    if why is not None:
        note_unsupported(a, why)
        out = None
    else:
        vendor = "torch._scaled_grouped_mm"
        out = run_grouped(a, weight, offs, (scale_a, scale_b), out_dtype, vendor)
    if out is not None:
        return out
    try:  # the fallback (module docstring)
        w_t = weight.transpose(-2, -1)
        out = torch._scaled_grouped_mm(a, w_t, scale_a, scale_b, offs=offs, out_dtype=out_dtype)
        return out.contiguous()
    except (RuntimeError, ValueError, NotImplementedError) as exc:  # torch says why
        said = (_OP, tuple(a.shape), tuple(weight.shape), a.device, out_dtype, str(exc)[:200])
        if first_refusal(said):
            log.warning(
                "torch._scaled_grouped_mm refused scaled_grouped_mm experts=%d,n=%d,k=%d on %s "
                "(%s); running the dequantized float32 product",
                weight.shape[0], weight.shape[1], a.shape[1], a.device, _first_sentence(exc),
            )  # fmt: skip
        return scaled_grouped_mm_reference(a, weight, scale_a, scale_b, offs, out_dtype)


def _scaled_grouped_mm_fake(
    a: torch.Tensor,
    weight: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    offs: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return a.new_empty((a.shape[0], weight.shape[1]), dtype=out_dtype)


_SCHEMA = (
    "(Tensor a, Tensor weight, Tensor scale_a, Tensor scale_b, Tensor offs, ScalarType out_dtype) "
    "-> Tensor"
)
_DEFINITIONS: dict[str, Definition] = {
    "scaled_grouped_mm": (_SCHEMA, scaled_grouped_mm_kernel, _scaled_grouped_mm_fake)
}
register(_DEFINITIONS)
