"""``tunehub::grouped_mm``: a mixture-of-experts grouped GEMM through a tuned ``grouped_gemm``
variant (CUDA only, bf16 and f16), with ``torch._grouped_mm`` as its fallback
(docs/grouped_gemm.md).

    out[offs[e-1]:offs[e]] = a[offs[e-1]:offs[e]] @ weight[e].T      for each expert e

``a`` [tokens, k] holds the tokens stacked by expert, ``weight`` [E, n, k] each expert's weight
as ``nn.Linear`` stores it, ``offs`` the int32 cumulative tokens per expert (torch._grouped_mm's
meaning; its fallback call is ``torch._grouped_mm(a, weight.transpose(-2, -1), offs=offs)``).

**It synchronises.** The shape key is the bucket of the tokens per expert (``tokens`` rounded
up to a power of two, ``skew`` = max / mean rounded up to 1, 2, 4 or 8: ``tuner.moe.bucket_of``)
and the kernel ABI takes the counts as host dims (``[E, n, k, tokens, skew, m_0, ...]``), so
each call copies ``offs`` to the host and waits for it. A CUDA graph cannot hold that: under
capture the op does not run tunehub's kernel (said once, as unsupported) and captures
``torch._grouped_mm`` instead.

:func:`run_grouped` (the bucket, the per-call counts, the launch) and :func:`check_grouped_mm`
serve ``tunehub::scaled_grouped_mm`` too (FP8, :mod:`._torch_grouped_fp8`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from service.integrations._torch_ops import Definition, kernel_entry, ready, register
from service.integrations._torch_runtime import RUNTIME

__all__ = [
    "SKEWS",
    "bucket_of",
    "check_grouped_mm",
    "grouped_mm_kernel",
    "grouped_mm_fallback",
    "run_grouped",
    "note_unsupported",
]

#: the skew buckets (tuner.moe.SKEWS; a test checks they agree)
SKEWS = (1, 2, 4, 8)
#: FP8 e4m3: scaled_grouped_mm's operands (None in a torch without it)
_FP8 = getattr(torch, "float8_e4m3fn", None)
_CAPTURE = (
    "CUDA graph capture (tunehub's grouped ops copy offs to the host and wait for it, which a "
    "graph cannot hold): {vendor} is captured instead"
)


def bucket_of(counts: Sequence[int]) -> tuple[int, int]:
    """(tokens, skew) of a batch's tokens per expert, as ``tuner.moe.bucket_of``: the total
    rounded up to a power of two; max / mean rounded up to one of :data:`SKEWS` (8 above 8).
    The total must be >= 1."""
    total = sum(counts)
    skew = max(counts) * len(counts) / total
    bucket = next((s for s in SKEWS if skew <= s * (1 + 1e-9)), SKEWS[-1])
    return 1 << (total - 1).bit_length(), bucket


def check_grouped_mm(
    a: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor, op: str = "grouped_mm"
) -> None:
    """ValueError for operands no grouped mm takes (torch's either); ``op`` names the op
    in the message (``scaled_grouped_mm`` checks its a, weight and offs here too)."""
    if a.dim() != 2 or weight.dim() != 3 or a.shape[1] != weight.shape[2]:
        raise ValueError(
            f"{op} takes a [tokens, k] and weight [experts, n, k], got {tuple(a.shape)} "
            f"and {tuple(weight.shape)}"
        )
    if offs.dim() != 1 or offs.shape[0] != weight.shape[0] or offs.dtype != torch.int32:
        raise ValueError(
            f"offs must be int32 [experts] (cumulative tokens per expert), got {offs.dtype} "
            f"{tuple(offs.shape)} for {weight.shape[0]} experts"
        )


def grouped_mm_fallback(a: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return torch._grouped_mm(a, weight.transpose(-2, -1), offs=offs)


def grouped_mm_kernel(a: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    check_grouped_mm(a, weight, offs)
    if a.dtype == _FP8:
        note_unsupported(a, "float8_e4m3fn operands (FP8 takes scales: scaled_grouped_mm)")
        out = None
    else:
        out = run_grouped(a, weight, offs, (), a.dtype, "torch._grouped_mm")
    return out if out is not None else grouped_mm_fallback(a, weight, offs).contiguous()


def note_unsupported(a: torch.Tensor, why: str) -> None:
    """Say (once per shape) why torch's op runs for this call."""
    RUNTIME.note_unsupported("grouped_gemm", a, "rcr", why)


def run_grouped(
    a: torch.Tensor,
    weight: torch.Tensor,
    offs: torch.Tensor,
    scales: Sequence[torch.Tensor],
    out_dtype: torch.dtype,
    vendor: str,
) -> torch.Tensor | None:
    """The tuned kernel's output [tokens, n] in ``out_dtype`` for this call (inputs ``a,
    weight, *scales``), or None where torch's op (``vendor``, named when capture makes it
    run) must run. The shape key is the bucket of this call's counts; the launch adds them."""
    if a.is_cuda and torch.cuda.is_current_stream_capturing():
        note_unsupported(a, _CAPTURE.format(vendor=vendor))
        return None
    operands = (a, weight, offs, *scales)
    if weight.dtype != a.dtype or len({t.device for t in operands}) != 1:
        note_unsupported(a, "operands of different dtypes or devices")
        return None
    rows, k = a.shape
    experts, n, _ = weight.shape
    ends = [int(v) for v in offs.tolist()]  # the host copy and sync (module docstring)
    counts = [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]
    total = ends[-1] if ends else 0
    if total < 1 or total > rows or min(counts) < 0:
        note_unsupported(a, f"offs {ends[:8]}{'...' if len(ends) > 8 else ''} for {rows} rows")
        return None
    bucket = (experts, n, k, *bucket_of(counts))
    run_dims = [*bucket, *counts]
    entry = kernel_entry("grouped_gemm", "rcr", a, bucket, run_dims=run_dims)
    if entry is None:
        return None
    if entry.library is not None:
        out = torch.empty((rows, n), dtype=out_dtype, device=a.device)
        inputs = (ready(a), ready(weight), *(ready(s) for s in scales))
        if entry.launch(inputs, out, run_dims):
            if total < rows:
                out[total:].zero_()  # rows past the last expert's: not written
            return out
    entry.stat.fallback_calls += 1
    return None


def _grouped_mm_fake(a: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return a.new_empty((a.shape[0], weight.shape[1]))


_DEFINITIONS: dict[str, Definition] = {
    "grouped_mm": (
        "(Tensor a, Tensor weight, Tensor offs) -> Tensor",
        grouped_mm_kernel,
        _grouped_mm_fake,
    )
}
register(_DEFINITIONS)
