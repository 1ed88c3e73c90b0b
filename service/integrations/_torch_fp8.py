"""``tunehub::scaled_mm``: FP8 (e4m3) GEMM with scales through a tuned ``scaled_gemm`` variant
(CUDA only), with ``torch._scaled_mm`` as its fallback (docs/fp8.md).

    D[m, n] = (scale_a * a[m, k]) @ (scale_b * b[n, k]).T    in out_dtype (bf16 or f16)

``b`` is the weight as ``nn.Linear`` stores it, [n, k] row-major (``torch._scaled_mm`` takes its
transpose, ``b.t()``). Scales are float32:

- ``per_tensor``: one value each (shape () or (1,));
- ``block`` (DeepSeek-V3 style): ``scale_a`` [m, k/128], one per row and 128-wide K block (as
  ``torch._scaled_mm``'s 1x128 scales; any strides), ``scale_b`` [n/128, k/128], one per
  128x128 block of b.

The kernel's inputs are ``a, b, a_scale, b_scale`` as ``tuner.fp8`` lays them out: the block
``a_scale`` M-major (a row-major [k/128, m] array: ``scale_a.t().contiguous()``, no copy when
``scale_a`` already has strides (1, m)), ``b_scale`` row-major. ABI dims ``[m, n, k, out_code,
scaling_code]`` (``tuner.abi``).
"""

from __future__ import annotations

import logging

import torch

from service.integrations._torch_ops import Definition, kernel_entry, ready, register
from service.integrations._torch_runtime import DTYPES, RUNTIME, SCALED_OUT_CODES, SCALING_CODES

__all__ = [
    "OUT_DTYPES",
    "check_scaled_mm",
    "first_refusal",
    "scaled_mm_kernel",
    "scaled_mm_fallback",
    "scaled_mm_reference",
]

log = logging.getLogger(__name__)

_DTYPE_OF_NAME = {name: dtype for dtype, name in DTYPES.items()}
#: the output dtypes of the tuned kernels, in ABI code order
OUT_DTYPES: tuple[torch.dtype, ...] = tuple(_DTYPE_OF_NAME[name] for name in SCALED_OUT_CODES)
#: FP8 rows move in 16-byte vectors (scaled_gemm's k rule)
_K_ALIGN = 16
#: block scaling's block edge
_BLOCK = 128
#: (shape, what torch said) already warned about: torch._scaled_mm refused, reference ran
_REFUSED: set[tuple[object, ...]] = set()


def _fp8() -> torch.dtype | None:
    return getattr(torch, "float8_e4m3fn", None)


def check_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    scaling: str,
) -> None:
    """ValueError for operands that no scaled mm takes (torch's either): shapes, scale
    shapes, the scaling's name."""
    if scaling not in SCALING_CODES:
        raise ValueError(f"scaling must be one of {SCALING_CODES}, not {scaling!r}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(
            f"scaled_mm takes a [m, k] and b [n, k] (the weight as nn.Linear stores it), got "
            f"{tuple(a.shape)} and {tuple(b.shape)}"
        )
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        raise ValueError(f"scales must be float32, got {scale_a.dtype} and {scale_b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if scaling == "per_tensor":
        want_a: tuple[int, ...] = (1,)
        want_b: tuple[int, ...] = (1,)
        got_a: tuple[int, ...] = (scale_a.numel(),)
        got_b: tuple[int, ...] = (scale_b.numel(),)
    else:
        if k % _BLOCK or n % _BLOCK:
            raise ValueError(f"block scaling needs k and n multiples of {_BLOCK}, got n={n} k={k}")
        want_a, want_b = (m, k // _BLOCK), (n // _BLOCK, k // _BLOCK)
        got_a, got_b = tuple(scale_a.shape), tuple(scale_b.shape)
    if (got_a, got_b) != (want_a, want_b):
        what = "one value each" if scaling == "per_tensor" else f"{want_a} and {want_b}"
        raise ValueError(f"{scaling} scales must be {what}, got {got_a} and {got_b}")


def _unsupported(
    a: torch.Tensor, b: torch.Tensor, s_a: torch.Tensor, s_b: torch.Tensor, out: torch.dtype
) -> str | None:
    """Why tunehub has no kernel for this call (torch's op runs), or None."""
    fp8 = _fp8()
    if fp8 is None or a.dtype != fp8 or b.dtype != fp8:
        return f"operands {a.dtype} and {b.dtype} (scaled_mm's kernels take float8_e4m3fn)"
    if out not in OUT_DTYPES:
        return f"out_dtype {out} (the kernels write bfloat16 or float16)"
    if len({a.device, b.device, s_a.device, s_b.device}) != 1:
        return "operands on different devices"
    if a.shape[1] % _K_ALIGN:
        return f"k={a.shape[1]}, not a multiple of {_K_ALIGN}"
    return None


def first_refusal(said: tuple[object, ...]) -> bool:
    """Whether torch's refusal ``said`` (the call's shapes and what torch said) is new: the
    FP8 ops warn once per such refusal before running the dequantized product."""
    if said in _REFUSED:
        return False
    _REFUSED.add(said)
    return True


def scaled_mm_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    scaling: str,
) -> torch.Tensor:
    """The float32 product of the dequantized operands, rounded once to ``out_dtype``."""
    fa, fb = a.float(), b.float()
    if scaling == "per_tensor":
        fa, fb = fa * scale_a.reshape(()), fb * scale_b.reshape(())
    else:
        fa = fa * scale_a.repeat_interleave(_BLOCK, dim=1)
        fb = fb * scale_b.repeat_interleave(_BLOCK, dim=0).repeat_interleave(_BLOCK, dim=1)
    return (fa @ fb.t()).to(out_dtype)


def scaled_mm_fallback(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    scaling: str,
) -> torch.Tensor:
    """``torch._scaled_mm`` (block: 1x128 activation and 128x128 weight scales); where this
    torch refuses the call (block scales on the CPU, an older GPU) the dequantized float32
    product runs instead, said once per shape."""
    sa, sb = (scale_a, scale_b) if scaling == "per_tensor" else (scale_a, scale_b.t())
    try:
        return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)
    except (RuntimeError, ValueError, NotImplementedError) as exc:  # torch says why
        said = (tuple(a.shape), tuple(b.shape), a.device, out_dtype, scaling, str(exc)[:200])
        if first_refusal(said):
            log.warning(
                "torch._scaled_mm refused %s scaled_mm m=%d,n=%d,k=%d on %s (%s); running the "
                "dequantized float32 product",
                scaling, a.shape[0], b.shape[0], a.shape[1], a.device, str(exc).splitlines()[0],
            )  # fmt: skip
        return scaled_mm_reference(a, b, scale_a, scale_b, out_dtype, scaling)


def _kernel_scales(
    scale_a: torch.Tensor, scale_b: torch.Tensor, scaling: str
) -> tuple[torch.Tensor, torch.Tensor]:
    if scaling == "per_tensor":
        return ready(scale_a.reshape(1)), ready(scale_b.reshape(1))
    return ready(scale_a.t()), ready(scale_b)  # a: M-major [k/128, m]; b: row-major


def scaled_mm_kernel(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    scaling: str,
) -> torch.Tensor:
    check_scaled_mm(a, b, scale_a, scale_b, out_dtype, scaling)
    why = _unsupported(a, b, scale_a, scale_b, out_dtype)
    if why is not None:
        RUNTIME.note_unsupported("scaled_gemm", a, "rcr", why)
    else:
        m, k = a.shape
        n = b.shape[0]
        dims = (m, n, k, OUT_DTYPES.index(out_dtype), SCALING_CODES.index(scaling))
        entry = kernel_entry("scaled_gemm", "rcr", a, dims)
        if entry is not None:
            if entry.library is not None:
                out = torch.empty((m, n), dtype=out_dtype, device=a.device)
                sa, sb = _kernel_scales(scale_a, scale_b, scaling)
                if entry.launch((ready(a), ready(b), sa, sb), out):
                    return out
            entry.stat.fallback_calls += 1
    return scaled_mm_fallback(a, b, scale_a, scale_b, out_dtype, scaling).contiguous()


def _scaled_mm_fake(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    scaling: str,
) -> torch.Tensor:
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


_SCHEMA = (
    "(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype, str scaling) "
    "-> Tensor"
)
_DEFINITIONS: dict[str, Definition] = {"scaled_mm": (_SCHEMA, scaled_mm_kernel, _scaled_mm_fake)}
register(_DEFINITIONS)
