"""The ops as functions (``linear``, ``matmul``, ``scaled_mm``, ``grouped_mm``,
``scaled_grouped_mm``, ``softmax``, ``sum``, ``rms_norm``, ``conv2d``), re-exported by
:mod:`service.integrations.torch`. Each call takes one of three paths: torch's own op where
tunehub has no kernel for it (autograd, a dim other than the last, ...; said once per shape),
the ``torch.ops.tunehub`` custom op while ``torch.compile`` traces, else the custom op's real
kernel called directly (eager)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from service.integrations import _torch_fp8 as _fp8
from service.integrations import _torch_grouped as _grouped
from service.integrations import _torch_grouped_fp8 as _grouped_fp8
from service.integrations import _torch_ops as _ops
from service.integrations._torch_runtime import RUNTIME, SCALING_CODES

__all__ = [
    "linear",
    "ACTIVATIONS",
    "matmul",
    "scaled_mm",
    "SCALINGS",
    "grouped_mm",
    "scaled_grouped_mm",
    "softmax",
    "sum",
    "rms_norm",
    "conv2d",
    "rms_norm_reference",
]

rms_norm_reference = _ops.rms_norm_reference
#: what ``linear(..., activation=)`` fuses into the gemm's epilogue
ACTIVATIONS = tuple(_ops.EPILOGUE_OF_ACTIVATION)
#: what ``scaled_mm(..., scaling=)`` takes
SCALINGS = SCALING_CODES


def _eager_note(op: str, x: torch.Tensor, layout: str, why: str) -> None:
    if not torch.compiler.is_compiling():  # traced away: a graph has no side effects
        RUNTIME.note_unsupported(op, x, layout, why)


#: why an op that autograd records runs torch's op
_AUTOGRAD = "autograd (tunehub kernels are inference only)"


def _autograd(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    activation: str | None = None,
) -> torch.Tensor:
    """``F.linear`` through a tuned gemm (rcr): ``x @ weight.T + bias``.

    With ``activation`` (one of :data:`ACTIVATIONS`) the bias and the activation run in the
    kernel's epilogue, before its one store: ``relu``, ``gelu`` (exact, erf) and ``silu`` of
    ``x @ weight.T + bias``; ``gated_silu``: ``silu(h[..., :n/2]) * h[..., n/2:]`` of
    ``h = x @ weight.T + bias``, for a weight [n, k] holding the gate projection's rows, then
    the up projection's (``torch.cat([w_gate, w_up])``), output [..., n/2]. A fused problem is
    tuned on its own (``epilogue`` in the problem); where it has no answer torch's unfused pair
    runs (``F.linear``, then the activation). Without a bias the kernel gets zeros.
    Without ``activation`` the product is tuned as a plain gemm and torch adds the bias."""
    if activation is not None:
        return _fused_linear(x, weight, bias, activation)
    if _autograd(x, weight, bias):
        _eager_note("gemm", x, "rcr", _AUTOGRAD)
        return F.linear(x, weight, bias)
    if torch.compiler.is_compiling():
        return torch.ops.tunehub.linear(x, weight, bias)
    return _ops.linear_kernel(x, weight, bias)


def _fused_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str
) -> torch.Tensor:
    epilogue = _ops.EPILOGUE_OF_ACTIVATION.get(activation)
    if epilogue is None:
        raise ValueError(f"activation must be one of {ACTIVATIONS} or None, not {activation!r}")
    if epilogue == _ops.GATED and weight.shape[0] % 2:
        raise ValueError(
            f"gated_silu needs a weight of an even number of rows (gate, then up), "
            f"got {tuple(weight.shape)}"
        )
    if _autograd(x, weight, bias):
        _eager_note("gemm", x, "rcr", _AUTOGRAD)
        return _ops.fused_linear_reference(x, weight, bias, epilogue)
    if torch.compiler.is_compiling():
        return getattr(torch.ops.tunehub, f"linear_{epilogue}")(x, weight, bias)
    return _ops.fused_linear_kernel(x, weight, bias, epilogue)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for 2-D ``a`` [m, k] and ``b`` [k, n] through a tuned gemm (rrr)."""
    if a.dim() != 2 or b.dim() != 2 or _autograd(a, b):
        why = "autograd" if a.dim() == b.dim() == 2 else "operands that are not 2-D"
        _eager_note("gemm", a, "rrr", why)
        return torch.matmul(a, b)
    if torch.compiler.is_compiling():
        return torch.ops.tunehub.matmul(a, b)
    return _ops.matmul_kernel(a, b)


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    scaling: str = "per_tensor",
) -> torch.Tensor:
    """FP8 GEMM with scales: ``(scale_a * a) @ (scale_b * b).T`` in ``out_dtype``, through a
    tuned ``scaled_gemm`` kernel (float8_e4m3fn operands on CUDA; bfloat16 or float16 out).

    ``a`` [m, k]; ``b`` [n, k], the weight as ``nn.Linear`` stores it (``torch._scaled_mm``
    takes ``b.t()``); float32 scales: ``per_tensor`` one value each, ``block`` ``scale_a``
    [m, k/128] (one per row and 128-wide K block) and ``scale_b`` [n/128, k/128] (one per
    128x128 block of b). A per-tensor and a block call, or two output dtypes, are different
    problems. Fallback: ``torch._scaled_mm`` (where it refuses, e.g. block scales on the CPU,
    the dequantized float32 product). Bad shapes or scales are a ValueError."""
    if torch.compiler.is_compiling():
        return torch.ops.tunehub.scaled_mm(a, b, scale_a, scale_b, out_dtype, scaling)
    return _fp8.scaled_mm_kernel(a, b, scale_a, scale_b, out_dtype, scaling)


def grouped_mm(a: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Mixture-of-experts grouped GEMM: for each expert ``e``, the rows
    ``a[offs[e-1]:offs[e]]`` times ``weight[e].T``, through a tuned ``grouped_gemm`` kernel
    (bfloat16 or float16 on CUDA).

    ``a`` [tokens, k], stacked by expert; ``weight`` [E, n, k], each expert's weight as
    ``nn.Linear`` stores it; ``offs`` int32 [E], the cumulative tokens per expert. Returns
    [tokens, n] (rows past ``offs[-1]`` are zero). The shape key is the bucket of the tokens
    per expert (total rounded up to a power of two, max / mean skew), not the counts.

    **Synchronises**: each call copies ``offs`` to the host (the kernels take the counts as
    host values), so it is not capturable: under CUDA graph capture tunehub's kernel is not
    used and ``torch._grouped_mm`` is captured instead (said once). The fallback is
    ``torch._grouped_mm(a, weight.transpose(-2, -1), offs=offs)``."""
    if _autograd(a, weight):
        _eager_note("grouped_gemm", a, "rcr", _AUTOGRAD)
        return _grouped.grouped_mm_fallback(a, weight, offs)
    if torch.compiler.is_compiling():
        return torch.ops.tunehub.grouped_mm(a, weight, offs)
    return _grouped.grouped_mm_kernel(a, weight, offs)


def scaled_grouped_mm(
    a: torch.Tensor,
    weight: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    offs: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """FP8 mixture-of-experts grouped GEMM with rowwise scales: for each expert ``e``, the rows
    ``i`` of ``a[offs[e-1]:offs[e]]`` give ``(scale_a[i] * a[i]) @ (scale_b[e] * weight[e]).T``
    in ``out_dtype``, through a tuned ``grouped_gemm`` e4m3 kernel (CUDA; bfloat16 out).

    ``torch._scaled_grouped_mm``'s operands with :func:`grouped_mm`'s weight: ``a`` [tokens, k]
    and ``weight`` [E, n, k] float8_e4m3fn (each expert's as ``nn.Linear`` stores it), float32
    ``scale_a`` [tokens] and ``scale_b`` [E, n], ``offs`` int32 [E] cumulative. Keyed by the
    bucket and synchronising as :func:`grouped_mm` does. Fallback ``torch._scaled_grouped_mm(a,
    weight.transpose(-2, -1), scale_a, scale_b, offs=offs, out_dtype=out_dtype)`` (where it
    refuses, e.g. on the CPU, the dequantized float32 product). Bad dtypes, shapes, scales or
    offs are a ValueError naming the argument."""
    if torch.compiler.is_compiling():
        return torch.ops.tunehub.scaled_grouped_mm(a, weight, scale_a, scale_b, offs, out_dtype)
    return _grouped_fp8.scaled_grouped_mm_kernel(a, weight, scale_a, scale_b, offs, out_dtype)


def _last_dim(x: torch.Tensor, dim: int) -> bool:
    return x.dim() > 0 and dim in (-1, x.dim() - 1)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch.softmax(x, dim)``; tuned over the last dim (other dims run torch's)."""
    if not _last_dim(x, dim) or _autograd(x):
        _eager_note("softmax", x, "row", "autograd" if _autograd(x) else f"dim {dim}")
        return torch.softmax(x, dim)
    if torch.compiler.is_compiling():
        return torch.ops.tunehub.softmax(x)
    return _ops.softmax_kernel(x)


def sum(x: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:  # noqa: A001
    """``torch.sum(x, dim, keepdim)``; tuned over the last dim of float tensors."""
    if not _last_dim(x, dim) or not x.is_floating_point() or _autograd(x):
        why = "autograd" if _autograd(x) else f"dim {dim} of a {x.dtype} tensor"
        _eager_note("reduce", x, "row", why)
        return torch.sum(x, dim, keepdim=keepdim)
    if torch.compiler.is_compiling():
        y = torch.ops.tunehub.sum(x)
    else:
        y = _ops.sum_kernel(x)
    return y.unsqueeze(-1) if keepdim else y


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``weight * x * rsqrt(mean(x^2) + eps)``, statistics in
    float32 (the fallback is :func:`rms_norm_reference`, as Hugging Face models write it)."""
    if _autograd(x, weight) or weight.dtype != x.dtype:
        why = "autograd" if _autograd(x, weight) else "a weight of another dtype"
        _eager_note("rms_norm", x, "row", why)
        return _ops.rms_norm_reference(x, weight, eps)
    if torch.compiler.is_compiling():
        return torch.ops.tunehub.rms_norm(x, weight, eps)
    return _ops.rms_norm_kernel(x, weight, eps)


def _symmetric(value: int | Sequence[int]) -> int | None:
    if isinstance(value, int):
        return value
    values = list(value)
    return values[0] if len(values) == 2 and values[0] == values[1] else None


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | str = 0,
    dilation: int | Sequence[int] = 1,
    *,
    bias: torch.Tensor | None = None,
    groups: int = 1,
) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding, dilation, groups)`` for channels_last
    ``x`` [N, C, H, W] and ``weight`` [K, C, R, S] (NHWC input, KRSC filter): tuned for
    groups 1 and one int each of stride, padding and dilation; the output is channels_last.
    The bias is keyword-only (F.conv2d takes it third)."""
    if isinstance(stride, torch.Tensor):
        raise TypeError("conv2d(x, weight, stride, padding, dilation, *, bias=None, groups=1)")
    sym_stride, sym_dilation = _symmetric(stride), _symmetric(dilation)
    sym_pad = 0 if padding == "valid" else None if isinstance(padding, str) else _symmetric(padding)
    if x.dim() != 4 or weight.dim() != 4 or groups != 1:
        why = "groups != 1" if groups != 1 else "an input that is not 4-D"
    elif sym_stride is None or sym_pad is None or sym_dilation is None:
        why = f"stride {stride}, padding {padding}, dilation {dilation} (not one int each)"
    elif _autograd(x, weight, bias):
        why = "autograd"
    else:
        if torch.compiler.is_compiling():
            return torch.ops.tunehub.conv2d(x, weight, bias, sym_stride, sym_pad, sym_dilation)
        return _ops.conv2d_kernel(x, weight, bias, sym_stride, sym_pad, sym_dilation)
    _eager_note("conv2d", x, "nhwc", why)
    return F.conv2d(x, weight, bias, stride, padding, dilation, groups)  # type: ignore[arg-type]
