"""The ``tunehub::*`` custom ops: their real kernels (a tuned variant through the C ABI, or
torch's own op) and their fake kernels (shapes, dtypes and strides only), so that
``torch.compile(fullgraph=True)`` traces them and CUDA graph capture records the launch.

Each real kernel finds its shape's resolved entry (one dict lookup; the first call of a shape
resolves it, see :mod:`._torch_runtime`), makes the inputs contiguous and 16-byte aligned,
allocates the output with torch and calls ``tunehub_run`` on torch's current stream. Every
path returns a fresh tensor with the strides the fake kernel promises (contiguous; conv2d:
channels_last), whichever path ran.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import torch
import torch.nn.functional as F

from service.integrations._torch_runtime import DTYPES, RUNTIME, Entry

__all__ = [
    "linear_kernel",
    "matmul_kernel",
    "softmax_kernel",
    "sum_kernel",
    "rms_norm_kernel",
    "conv2d_kernel",
    "rms_norm_reference",
    "OPS",
]

#: the pointer alignment the kernels' vector loads need (torch's allocations have 512)
_ALIGN = 16


def _entry(op: str, layout: str, x: torch.Tensor, dims: tuple[int, ...]) -> Entry:
    entry = RUNTIME.kernels.get((op, layout, x.dtype, dims, x.device))
    return entry if entry is not None else RUNTIME.entry(op, layout, x.dtype, dims, x.device)


def _ready(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t if t.data_ptr() % _ALIGN == 0 else t.clone()


def _runnable(*tensors: torch.Tensor) -> str | None:
    """Why tunehub has no kernel for these operands (None: it may have one)."""
    first = tensors[0]
    if first.dtype not in DTYPES:
        return f"dtype {first.dtype} (tunehub kernels take float16, bfloat16, float32)"
    if first.device.type not in ("cpu", "cuda"):
        return f"{first.device.type} tensors"
    for other in tensors[1:]:
        if other.dtype != first.dtype or other.device != first.device:
            return "operands of different dtypes or devices"
    return None


# -- linear and matmul (gemm) ------------------------------------------------------------------


def linear_kernel(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    k = x.shape[-1]
    n = weight.shape[0]
    m = x.numel() // k if k else 0
    why = _runnable(x, weight) or (None if m and n and k else "an empty operand")
    if why is None and bias is not None and (bias.dtype != x.dtype or bias.shape != (n,)):
        why = "a bias of another dtype or shape"
    if why is None:
        entry = _entry("gemm", "rcr", x, (m, n, k))
        if entry.library is not None:
            out = torch.empty((m, n), dtype=x.dtype, device=x.device)
            if entry.launch((_ready(x.reshape(m, k)), _ready(weight)), out):
                if bias is not None:
                    out += bias
                return out.view(*x.shape[:-1], n)
        entry.stat.fallback_calls += 1
    else:
        RUNTIME.note_unsupported("gemm", x, "rcr", why)
    return F.linear(x, weight, bias).contiguous()


def _linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def matmul_kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    why = _runnable(a, b) or (None if m and n and k else "an empty operand")
    if why is None:
        entry = _entry("gemm", "rrr", a, (m, n, k))
        if entry.library is not None:
            out = torch.empty((m, n), dtype=a.dtype, device=a.device)
            if entry.launch((_ready(a), _ready(b)), out):
                return out
        entry.stat.fallback_calls += 1
    else:
        RUNTIME.note_unsupported("gemm", a, "rrr", why)
    return torch.matmul(a, b).contiguous()


def _matmul_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty((a.shape[0], b.shape[1]))


# -- row ops over the last dim: softmax, sum, rms_norm -------------------------------------------


def _rows(x: torch.Tensor) -> tuple[int, int]:
    k = x.shape[-1] if x.dim() else 1
    return (x.numel() // k if k else 0), k


def softmax_kernel(x: torch.Tensor) -> torch.Tensor:
    m, k = _rows(x)
    why = _runnable(x) or (None if m and k else "an empty operand")
    if why is None:
        entry = _entry("softmax", "row", x, (m, k))
        if entry.library is not None:
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            if entry.launch((_ready(x),), out):
                return out
        entry.stat.fallback_calls += 1
    else:
        RUNTIME.note_unsupported("softmax", x, "row", why)
    return torch.softmax(x, dim=-1).contiguous()


def _softmax_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


#: reduce's kind code of a sum (ABI dims [m, k, kind])
_SUM = 0


def sum_kernel(x: torch.Tensor) -> torch.Tensor:
    m, k = _rows(x)
    why = _runnable(x) or (None if m and k else "an empty operand")
    if why is None:
        entry = _entry("reduce", "row", x, (m, k, _SUM))
        if entry.library is not None:
            out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
            if entry.launch((_ready(x),), out):
                return out
        entry.stat.fallback_calls += 1
    else:
        RUNTIME.note_unsupported("reduce", x, "row", why)
    return torch.sum(x, dim=-1).contiguous()


def _sum_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[:-1])


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Hugging Face models write it: the statistics in float32, the weight applied
    in the input dtype (torch's own path, what the tunehub kernel replaces)."""
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(x.dtype)


def eps_bits(eps: float) -> int:
    """The uint32 bit pattern of the float32 ``eps`` (rms_norm's third ABI dim)."""
    return int(struct.unpack("<I", struct.pack("<f", eps))[0])


def rms_norm_kernel(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    m, k = _rows(x)
    why = _runnable(x, weight) or (None if m and k else "an empty operand")
    if why is None and weight.shape != (k,):
        why = f"a weight of shape {tuple(weight.shape)}, not ({k},)"
    if why is None:
        entry = _entry("rms_norm", "row", x, (m, k, eps_bits(eps)))
        if entry.library is not None:
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            if entry.launch((_ready(x), _ready(weight)), out):
                return out
        entry.stat.fallback_calls += 1
    else:
        RUNTIME.note_unsupported("rms_norm", x, "row", why)
    return rms_norm_reference(x, weight, eps).contiguous()


def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)


# -- conv2d (NHWC input, KRSC filter, NPQK output) -----------------------------------------------


def _conv_out(size: int, pad: int, dilation: int, kernel: int, stride: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def conv2d_kernel(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    padding: int,
    dilation: int,
) -> torch.Tensor:
    n, c, h, w = x.shape
    k, _, r, s = weight.shape
    p = _conv_out(h, padding, dilation, r, stride)
    q = _conv_out(w, padding, dilation, s, stride)
    why = _runnable(x, weight) or (None if min(n, c, h, w, k, p, q) > 0 else "an empty operand")
    if why is None and bias is not None and (bias.dtype != x.dtype or bias.shape != (k,)):
        why = "a bias of another dtype or shape"
    if why is None:
        dims = (n, h, w, c, k, r, s, stride, padding, dilation)
        entry = _entry("conv2d", "nhwc", x, dims)
        if entry.library is not None:
            # NCHW tensors in channels_last memory are NHWC (input) and KRSC (filter) arrays
            nhwc = _ready(x.permute(0, 2, 3, 1))
            krsc = _ready(weight.permute(0, 2, 3, 1))
            out = torch.empty((n, k, p, q), dtype=x.dtype, device=x.device,
                              memory_format=torch.channels_last)  # fmt: skip
            if entry.launch((nhwc, krsc), out):
                if bias is not None:
                    out += bias.view(1, k, 1, 1)
                return out
        entry.stat.fallback_calls += 1
    else:
        RUNTIME.note_unsupported("conv2d", x, "nhwc", why)
    y = F.conv2d(x, weight, bias, stride, padding, dilation)
    return y.contiguous(memory_format=torch.channels_last)


def _conv2d_fake(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    padding: int,
    dilation: int,
) -> torch.Tensor:
    n, _, h, w = x.shape
    k, _, r, s = weight.shape
    p = _conv_out(h, padding, dilation, r, stride)
    q = _conv_out(w, padding, dilation, s, stride)
    return torch.empty((n, k, p, q), dtype=x.dtype, device=x.device,
                       memory_format=torch.channels_last)  # fmt: skip


# -- registration ------------------------------------------------------------------------------

#: name: (schema, real kernel, fake kernel)
_DEFINITIONS: dict[str, tuple[str, Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "linear": ("(Tensor x, Tensor weight, Tensor? bias) -> Tensor", linear_kernel, _linear_fake),
    "matmul": ("(Tensor a, Tensor b) -> Tensor", matmul_kernel, _matmul_fake),
    "softmax": ("(Tensor x) -> Tensor", softmax_kernel, _softmax_fake),
    "sum": ("(Tensor x) -> Tensor", sum_kernel, _sum_fake),
    "rms_norm": ("(Tensor x, Tensor weight, float eps) -> Tensor", rms_norm_kernel, _rms_norm_fake),
    "conv2d": (
        "(Tensor x, Tensor weight, Tensor? bias, int stride, int padding, int dilation) -> Tensor",
        conv2d_kernel,
        _conv2d_fake,
    ),
}


def _register() -> dict[str, object]:
    ops: dict[str, object] = {}
    for name, (schema, real, fake) in _DEFINITIONS.items():
        op = torch.library.custom_op(f"tunehub::{name}", real, mutates_args=(), schema=schema)
        op.register_fake(fake)
        ops[name] = op
    return ops


#: the registered ops (also reachable as ``torch.ops.tunehub.<name>``)
OPS = _register()
