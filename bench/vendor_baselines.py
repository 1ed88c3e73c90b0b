"""What users would call instead of a tunehub kernel, as zero-argument callables over prepared
tensors: torch (cuBLAS, cuDNN, torch.sum, torch.softmax) and Triton ``@triton.autotune`` kernels.

Used by bench/vs_vendor.py on the GPU host (torch and Triton are there). The Triton kernels are
written here in the usual tutorial shape (tiled matmul with grouped ordering; one row per
program softmax) with the usual config lists, autotuned by Triton itself on first call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

__all__ = ["gemm_baselines", "softmax_baselines", "reduce_baselines", "conv2d_baselines"]

_GEMM_CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in [
        (128, 256, 64, 3, 8),
        (64, 256, 32, 4, 4),
        (128, 128, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4),
        (128, 32, 32, 4, 4),
        (64, 32, 32, 5, 2),
        (32, 64, 32, 5, 2),
        (128, 256, 64, 4, 8),
        (256, 128, 64, 3, 8),
    ]
]


@triton.autotune(configs=_GEMM_CONFIGS, key=["M", "N", "K"])
@triton.jit
def _matmul_kernel(
    a,
    b,
    c,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP * tiles_n
    first_m = (pid // per_group) * GROUP
    rows_in_group = min(tiles_m - first_m, GROUP)
    pm = first_m + ((pid % per_group) % rows_in_group)
    pn = (pid % per_group) // rows_in_group
    offs_m = (pm * BM + tl.arange(0, BM)) % M
    offs_n = (pn * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptr = a + offs_m[:, None] * sam + offs_k[None, :] * sak
    b_ptr = b + offs_k[:, None] * sbk + offs_n[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BK)):
        rem = K - k0 * BK
        x = tl.load(a_ptr, mask=offs_k[None, :] < rem, other=0.0)
        y = tl.load(b_ptr, mask=offs_k[:, None] < rem, other=0.0)
        acc = tl.dot(x, y, acc)
        a_ptr += BK * sak
        b_ptr += BK * sbk
    cm = pm * BM + tl.arange(0, BM)
    cn = pn * BN + tl.arange(0, BN)
    mask = (cm[:, None] < M) & (cn[None, :] < N)
    tl.store(c + cm[:, None] * scm + cn[None, :] * scn, acc.to(c.dtype.element_ty), mask=mask)


def _triton_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    m, k = a.shape
    n = b.shape[1]

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)

    _matmul_kernel[grid](
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    )


@triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8, 16, 32)], key=["N", "BLOCK"]
)
@triton.jit
def _softmax_kernel(x, y, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + row * stride + offs, mask=offs < N, other=-float("inf")).to(tl.float32)
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(y + row * stride + offs, (e / tl.sum(e, axis=0)).to(y.dtype.element_ty), mask=offs < N)


@triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (4, 8, 16)], key=["N"])
@triton.jit
def _softmax_online_kernel(x, y, stride, N, BLOCK: tl.constexpr):
    """Rows longer than one block: a running (max, sum) per lane over chunks, then a second
    read that normalises (two reads, one write)."""
    row = tl.program_id(0)
    xr = x + row * stride
    yr = y + row * stride
    run_max = tl.full([BLOCK], -float("inf"), tl.float32)
    run_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(xr + offs, mask=offs < N, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(run_max, v)
        live = new_max != -float("inf")  # lanes that have seen no element yet stay at 0
        scaled = tl.where(live, run_sum * tl.exp(run_max - new_max), 0.0)
        run_sum = scaled + tl.where(live, tl.exp(v - new_max), 0.0)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    row_sum = tl.sum(tl.where(run_sum > 0, run_sum * tl.exp(run_max - row_max), 0.0), axis=0)
    inv = 1.0 / row_sum
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(xr + offs, mask=offs < N, other=-float("inf")).to(tl.float32)
        tl.store(yr + offs, (tl.exp(v - row_max) * inv).to(y.dtype.element_ty), mask=offs < N)


#: longest row the one-block Triton kernel keeps on chip; longer rows take the online kernel
_TRITON_ONE_BLOCK = 16384


def _triton_softmax(x: torch.Tensor, y: torch.Tensor) -> None:
    m, n = x.shape
    if n <= _TRITON_ONE_BLOCK:
        _softmax_kernel[(m,)](x, y, x.stride(0), n, BLOCK=triton.next_power_of_2(n))
    else:
        _softmax_online_kernel[(m,)](x, y, x.stride(0), n, BLOCK=4096)


def gemm_baselines(
    a: torch.Tensor, b_nk: torch.Tensor, c: torch.Tensor
) -> dict[str, Callable[[], None]]:
    """rcr: a [m,k] row-major, b stored [n,k] (column-major k x n), c [m,n]."""
    b = b_nk.t()
    return {
        "cublas": lambda: torch.matmul(a, b, out=c),
        "triton": lambda: _triton_matmul(a, b, c),
    }


def softmax_baselines(x: torch.Tensor, y: torch.Tensor) -> dict[str, Callable[[], None]]:
    return {
        "torch": lambda: torch.softmax(x, dim=1),  # what users call: allocates its output
        "triton": lambda: _triton_softmax(x, y),
    }


def reduce_baselines(x: torch.Tensor, y: torch.Tensor) -> dict[str, Callable[[], None]]:
    return {"torch": lambda: torch.sum(x, dim=1, out=y)}


def conv2d_baselines(
    x_nchw_cl: torch.Tensor, w_cl: torch.Tensor, stride: int, pad: int, dilation: int
) -> dict[str, Callable[[], None]]:
    """cuDNN through torch, channels_last tensors (NHWC in memory)."""
    f = torch.nn.functional.conv2d
    return {"cudnn": lambda: f(x_nchw_cl, w_cl, stride=stride, padding=pad, dilation=dilation)}
