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

import math
import struct
from collections.abc import Callable

import torch
import torch.nn.functional as F

from service.integrations._torch_runtime import DTYPE_NAMES, NO_EPILOGUE, RUNTIME, Entry

__all__ = [
    "linear_kernel",
    "fused_linear_kernel",
    "fused_linear_reference",
    "fused_columns",
    "EPILOGUE_OF_ACTIVATION",
    "matmul_kernel",
    "softmax_kernel",
    "sum_kernel",
    "rms_norm_kernel",
    "conv2d_kernel",
    "rms_norm_reference",
    "OPS",
    "Definition",
    "register",
    "kernel_entry",
    "ready",
    "CUDA_ONLY",
]

#: the pointer alignment the kernels' vector loads need (torch's allocations have 512)
_ALIGN = 16
#: how many leading ABI dims are sizes (reduce's kind, rms_norm's eps and conv2d's stride,
#: pad and dilation follow them)
_SIZE_DIMS = {"gemm": 3, "reduce": 2, "softmax": 2, "rms_norm": 2, "conv2d": 7, "scaled_gemm": 3,
              "grouped_gemm": 5}  # fmt: skip
#: ops whose tuned kernels exist for CUDA tensors only (their spaces have no CPU family)
CUDA_ONLY = {"scaled_gemm", "grouped_gemm"}
#: the dtypes of ops that do not take f16, bf16 and f32 (tuner.problems.OP_DTYPES; grouped_gemm
#: e4m3 is scaled_grouped_mm's, with its two scales: grouped_mm refuses FP8 itself)
_OP_DTYPES = {"scaled_gemm": ("e4m3",), "grouped_gemm": ("f16", "bf16", "e4m3")}
#: float32 +inf: eps bit patterns from here up are refused (as the kernels refuse them)
_INFINITY_BITS = 0x7F800000


def ready(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t if t.data_ptr() % _ALIGN == 0 else t.clone()


def kernel_entry(
    op: str,
    layout: str,
    x: torch.Tensor,
    dims: tuple[int, ...],
    epilogue: str = NO_EPILOGUE,
    run_dims: list[int] | None = None,
) -> Entry | None:
    """The shape's entry: one dict lookup once resolved. The first call checks what tunehub
    has kernels for (a call it has none for is noted, and gets None) and resolves the shape
    (``run_dims``: its full ABI dims where ``dims``, the key, are not all of them)."""
    entry = RUNTIME.kernels.get((op, epilogue, layout, x.dtype, dims, x.device))
    if entry is not None:
        return entry
    takes = _OP_DTYPES.get(op, ("f16", "bf16", "f32"))
    if DTYPE_NAMES.get(x.dtype) not in takes:
        names = ", ".join(str(t)[6:] for t, name in DTYPE_NAMES.items() if name in takes)
        why = f"dtype {x.dtype} (tunehub's {op} kernels take {names})"
    elif x.device.type not in ("cpu", "cuda"):
        why = f"{x.device.type} tensors"
    elif op in CUDA_ONLY and x.device.type != "cuda":
        why = f"{x.device.type} tensors ({op} has CUDA kernels only)"
    elif min(dims[: _SIZE_DIMS[op]]) <= 0:
        why = "an empty operand"
    else:
        return RUNTIME.entry(op, layout, x.dtype, dims, x.device, epilogue, run_dims)
    RUNTIME.note_unsupported(op, x, layout, why)
    return None


def _same(x: torch.Tensor, *others: torch.Tensor | None) -> bool:
    """Whether every operand has x's dtype and device (None: an absent bias)."""
    return all(o is None or (o.dtype == x.dtype and o.device == x.device) for o in others)


def _mixed(op: str, x: torch.Tensor, layout: str) -> None:
    RUNTIME.note_unsupported(op, x, layout, "operands of different dtypes or devices")


# -- linear and matmul (gemm) ------------------------------------------------------------------


def linear_kernel(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    k = x.shape[-1]
    n = weight.shape[0]
    m = x.numel() // k if k else 0
    # operands torch refuses (k or the bias shape wrong) go to torch, which says why
    if weight.dim() == 2 and weight.shape[1] == k and (bias is None or bias.shape == (n,)):
        if not _same(x, weight, bias):
            _mixed("gemm", x, "rcr")
        elif (entry := kernel_entry("gemm", "rcr", x, (m, n, k))) is not None:
            if entry.library is not None:
                out = torch.empty((m, n), dtype=x.dtype, device=x.device)
                a = x if x.dim() == 2 else x.reshape(m, k)
                if entry.launch((ready(a), ready(weight)), out):
                    if bias is not None:
                        out += bias
                    return out if x.dim() == 2 else out.view(*x.shape[:-1], n)
            entry.stat.fallback_calls += 1
    return F.linear(x, weight, bias).contiguous()


def _linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


# -- fused linear: bias + activation in the gemm's epilogue (docs/epilogues.md) -----------------

#: activation -> the gemm epilogue that fuses it with the bias
EPILOGUE_OF_ACTIVATION = {
    "relu": "bias_relu",
    "gelu": "bias_gelu",
    "silu": "bias_silu",
    "gated_silu": "gated_silu",
}
GATED = "gated_silu"


def fused_columns(epilogue: str, n: int) -> int:
    """Output columns of a fused linear whose weight has ``n`` rows (gated_silu: n/2)."""
    return n // 2 if epilogue == GATED else n


def fused_linear_reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, epilogue: str
) -> torch.Tensor:
    """torch's unfused pair: ``F.linear`` then the activation (gated_silu: the weight's first
    n/2 rows are the gate projection, the last n/2 the up projection, as vLLM's merged
    ``gate_up_proj``: ``silu(gate) * up``)."""
    y = F.linear(x, weight, bias)
    if epilogue == GATED:
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up
    if epilogue == "bias_relu":
        return F.relu(y)
    if epilogue == "bias_gelu":
        return F.gelu(y)  # exact (erf), as the kernels' reference
    if epilogue == "bias_silu":
        return F.silu(y)
    raise ValueError(f"unknown fused epilogue {epilogue!r}")


def fused_linear_kernel(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, epilogue: str
) -> torch.Tensor:
    """A gemm ``rcr`` problem with ``epilogue``: the kernel takes (a, weight, bias) and
    writes [m, n] (gated_silu: [m, n/2]); without a bias it gets zeros (one per column)."""
    k = x.shape[-1]
    n = weight.shape[0]
    m = x.numel() // k if k else 0
    columns = fused_columns(epilogue, n)
    shapes_ok = weight.dim() == 2 and weight.shape[1] == k and (bias is None or bias.shape == (n,))
    if shapes_ok and (epilogue != GATED or n % 2 == 0):
        if not _same(x, weight, bias):
            _mixed("gemm", x, "rcr")
        elif (entry := kernel_entry("gemm", "rcr", x, (m, n, k), epilogue)) is not None:
            if entry.library is not None:
                out = torch.empty((m, columns), dtype=x.dtype, device=x.device)
                a = x if x.dim() == 2 else x.reshape(m, k)
                b = bias if bias is not None else torch.zeros(n, dtype=x.dtype, device=x.device)
                if entry.launch((ready(a), ready(weight), ready(b)), out):
                    return out if x.dim() == 2 else out.view(*x.shape[:-1], columns)
            entry.stat.fallback_calls += 1
    return fused_linear_reference(x, weight, bias, epilogue).contiguous()


def _fused_linear(epilogue: str) -> tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]:
    """The real and fake kernels of ``tunehub::linear_<epilogue>``."""

    def real(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return fused_linear_kernel(x, weight, bias, epilogue)

    def fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], fused_columns(epilogue, weight.shape[0])))

    real.__name__ = fake.__name__ = f"linear_{epilogue}"
    return real, fake


# grouped_mm, scaled_grouped_mm: _torch_grouped.py, _torch_grouped_fp8.py (token-bucket keys; the
# tokens per expert are copied to the host each call: not capturable, docs/grouped_gemm.md).


def matmul_kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] == k:
        if not _same(a, b):
            _mixed("gemm", a, "rrr")
        elif (entry := kernel_entry("gemm", "rrr", a, (m, n, k))) is not None:
            if entry.library is not None:
                out = torch.empty((m, n), dtype=a.dtype, device=a.device)
                if entry.launch((ready(a), ready(b)), out):
                    return out
            entry.stat.fallback_calls += 1
    return torch.matmul(a, b).contiguous()


def _matmul_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty((a.shape[0], b.shape[1]))


# -- row ops over the last dim: softmax, sum, rms_norm -------------------------------------------


def _rows(x: torch.Tensor) -> tuple[int, int]:
    k = x.shape[-1] if x.dim() else 1
    return (x.numel() // k if k else 0), k


def softmax_kernel(x: torch.Tensor) -> torch.Tensor:
    entry = kernel_entry("softmax", "row", x, _rows(x))
    if entry is not None:
        if entry.library is not None:
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            if entry.launch((ready(x),), out):
                return out
        entry.stat.fallback_calls += 1
    return torch.softmax(x, dim=-1).contiguous()


def _softmax_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


#: reduce's kind code of a sum (ABI dims [m, k, kind])
_SUM = 0


def sum_kernel(x: torch.Tensor) -> torch.Tensor:
    entry = kernel_entry("reduce", "row", x, (*_rows(x), _SUM))
    if entry is not None:
        if entry.library is not None:
            out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
            if entry.launch((ready(x),), out):
                return out
        entry.stat.fallback_calls += 1
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


def eps_bits(eps: float) -> int | None:
    """The uint32 bit pattern of the float32 ``eps`` (rms_norm's third ABI dim); None for an
    eps the kernels refuse (negative, infinite, NaN, beyond float32)."""
    if not math.isfinite(eps) or eps < 0:
        return None
    try:
        bits = int(struct.unpack("<I", struct.pack("<f", eps))[0])
    except OverflowError:
        return None
    return bits if bits < _INFINITY_BITS else None


def rms_norm_kernel(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    m, k = _rows(x)
    bits = eps_bits(eps)
    if weight.shape == (k,):
        if not _same(x, weight):
            _mixed("rms_norm", x, "row")
        elif bits is None:
            RUNTIME.note_unsupported("rms_norm", x, "row", f"eps {eps!r}")
        elif (entry := kernel_entry("rms_norm", "row", x, (m, k, bits))) is not None:
            if entry.library is not None:
                out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
                if entry.launch((ready(x), ready(weight)), out):
                    return out
            entry.stat.fallback_calls += 1
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
    k, c_filter, r, s = weight.shape
    p = _conv_out(h, padding, dilation, r, stride)
    q = _conv_out(w, padding, dilation, s, stride)
    shapes_ok = c_filter == c and min(p, q, stride, dilation) > 0 and padding >= 0
    if shapes_ok and (bias is None or bias.shape == (k,)):
        dims = (n, h, w, c, k, r, s, stride, padding, dilation)
        if not _same(x, weight, bias):
            _mixed("conv2d", x, "nhwc")
        elif (entry := kernel_entry("conv2d", "nhwc", x, dims)) is not None:
            if entry.library is not None:
                # NCHW tensors in channels_last memory are NHWC (input) and KRSC (filter) arrays
                nhwc = ready(x.permute(0, 2, 3, 1))
                krsc = ready(weight.permute(0, 2, 3, 1))
                out = torch.empty((n, k, p, q), dtype=x.dtype, device=x.device,
                                  memory_format=torch.channels_last)  # fmt: skip
                if entry.launch((nhwc, krsc), out):
                    if bias is not None:
                        out += bias.view(1, k, 1, 1)
                    return out
            entry.stat.fallback_calls += 1
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

#: (schema, real kernel, fake kernel) of one op
Definition = tuple[str, Callable[..., torch.Tensor], Callable[..., torch.Tensor]]
#: linear's, fused or not
_LINEAR_SCHEMA = "(Tensor x, Tensor weight, Tensor? bias) -> Tensor"
#: name: definition
_DEFINITIONS: dict[str, Definition] = {
    "linear": (_LINEAR_SCHEMA, linear_kernel, _linear_fake),
    "matmul": ("(Tensor a, Tensor b) -> Tensor", matmul_kernel, _matmul_fake),
    "softmax": ("(Tensor x) -> Tensor", softmax_kernel, _softmax_fake),
    "sum": ("(Tensor x) -> Tensor", sum_kernel, _sum_fake),
    "rms_norm": ("(Tensor x, Tensor weight, float eps) -> Tensor", rms_norm_kernel, _rms_norm_fake),
    "conv2d": (
        "(Tensor x, Tensor weight, Tensor? bias, int stride, int padding, int dilation) -> Tensor",
        conv2d_kernel,
        _conv2d_fake,
    ),
    **{f"linear_{e}": (_LINEAR_SCHEMA, *_fused_linear(e)) for e in EPILOGUE_OF_ACTIVATION.values()},
}


#: the registered ops (also reachable as ``torch.ops.tunehub.<name>``)
OPS: dict[str, object] = {}


def register(definitions: dict[str, Definition]) -> None:
    """Register each as the custom op ``tunehub::<name>`` with its fake kernel, in :data:`OPS`
    (the FP8 module registers its op through here too)."""
    for name, (schema, real, fake) in definitions.items():
        op = torch.library.custom_op(f"tunehub::{name}", real, mutates_args=(), schema=schema)
        op.register_fake(fake)
        OPS[name] = op


register(_DEFINITIONS)
