"""The fixed shape list of bench/regress.py and each shape's tuning budget (no GPU, no torch).

f16 throughout. Rows (reduce sum, softmax) at M x K = 2^28 (``ROW_TOTAL``: the size of every
recorded row figure in docs/benchmarks, so the baseline's seeds compare like with like) for
small K (32-128), odd K (1000, 4095), mid K (1024, 4096) and vocabulary K (32000 Llama-2, 50257
GPT-2, 151936 Qwen2), and few rows (M = 1, 4, 8 at K = 128256 Llama-3, 256000 Gemma). GEMM
(rcr, Mistral-7B-class): prefill m = 2048 and decode m = 1, 16 at (n, k) = 4096x4096,
14336x4096, 4096x14336, and one size no tile divides. conv2d (NHWC, ResNet-50 v1.5): a 3x3, a
strided 3x3 and a 1x1 layer at batch 1 and 8.

Budgets are small (the spaces order likely winners first): rows ``ROW_BUDGET`` candidates;
GEMM the cuBLASLt default, the family heads the space puts first for that m and a few more
cuBLASLt algorithms (``bench.vs_vendor_gemm.gemm_budget``); conv2d the first ``CONV_BUDGET``
of cuDNN's configs and the CUTLASS head. ``precompile`` is how much of the order's head
``bench/precompile_cuda.py`` can build without the GPU (every non-vendor candidate of the
budget; cuBLASLt and cuDNN configs are found and built on the GPU host).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner.problems import problem_from_dict

__all__ = [
    "CONV_BUDGET",
    "GEMM_EXTRA_VENDOR",
    "ROW_BUDGET",
    "ROW_TOTAL",
    "Shape",
    "precompile_commands",
    "shapes",
]

DTYPE = "f16"
#: M x K of the many-row shapes (2^28: 2^29 bytes read and 2^29 written in f16)
ROW_TOTAL = 1 << 28
ROW_KS = (32, 64, 96, 128, 1000, 1024, 4095, 4096, 32000, 50257, 151936)
FEW_MS = (1, 4, 8)
FEW_KS = (128256, 256000)
#: candidates per row shape, and the seconds its tuning may take
ROW_BUDGET = {"softmax": 16, "reduce": 12}
ROW_SECONDS = 6.0
#: Mistral-7B-class (n, k): attention out / square, MLP up, MLP down
GEMM_NK = ((4096, 4096), (14336, 4096), (4096, 14336))
GEMM_MS = (2048, 1, 16)
GEMM_ODD = (777, 5000, 3000)
#: cuBLASLt algorithms beyond its default in a GEMM budget (the family heads come on top)
GEMM_EXTRA_VENDOR = 2
GEMM_SECONDS = 10.0
#: (layer, h, c, k, r, stride, pad) at the layer's input, ResNet-50 v1.5
CONV_LAYERS = (
    ("l1.conv2 3x3", 56, 64, 64, 3, 1, 1),
    ("l2.conv2 3x3 s2", 56, 128, 128, 3, 2, 1),
    ("l3.conv1 1x1", 14, 1024, 256, 1, 1, 0),
)
CONV_BATCHES = (1, 8)
CONV_BUDGET = 6
CONV_SECONDS = 15.0
#: the CUTLASS kernels a conv2d budget may reach (bench/vs_vendor_conv.py's head)
CONV_PRECOMPILE = 3
#: a short check (``--quick``): the softmax shapes of issue 22 and one of each other kind
QUICK = (
    "softmax m=4194304,k=64",
    "softmax m=2796202,k=96",
    "softmax m=2097152,k=128",
    "softmax m=268435,k=1000",
    "softmax m=65552,k=4095",
    "softmax m=5341,k=50257",
    "softmax m=4,k=256000",
    "reduce m=2796202,k=96,kind=sum",
    "gemm m=1,n=4096,k=4096",
    "gemm m=2048,n=4096,k=4096",
    "conv2d n=8,h=14,w=14,c=1024,k=256,r=1,s=1,stride=1,pad=0,dilation=1",
)


@dataclass(frozen=True)
class Shape:
    """One shape of the list: what is tuned and how much."""

    op: str
    layout: str
    problem: dict[str, Any]
    max_variants: int
    max_seconds: float
    #: candidates at the head of the order that precompile_cuda.py builds (0: none)
    precompile: int
    #: what a client would call instead: its label in the timing rounds
    reference: str
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        """``softmax m=2796202,k=96``: the op and the problem's canonical dims."""
        return f"{self.op} {problem_from_dict(self.op, dict(self.problem)).key()}"


def _gemm_budget(m: int) -> int:
    from bench.vs_vendor_gemm import gemm_budget

    return gemm_budget(m, 1 + GEMM_EXTRA_VENDOR, cap=16)


def _gemm_heads(m: int) -> int:
    """Non-vendor candidates of a GEMM budget (the space puts them right after the default)."""
    return _gemm_budget(m) - (1 + GEMM_EXTRA_VENDOR)


def shapes(quick: bool = False) -> list[Shape]:
    """Every shape in run order: rows (the kernels most often changed) first, then GEMM, then
    conv2d; ``quick``: the ``QUICK`` subset."""
    out: list[Shape] = []
    row_dims = [{"m": ROW_TOTAL // k, "k": k} for k in ROW_KS]
    row_dims += [{"m": m, "k": k} for k in FEW_KS for m in FEW_MS]
    for dims in row_dims:
        tag = ("few",) if dims["m"] < 256 else ()
        for op, extra in (("softmax", {}), ("reduce", {"kind": "sum"})):
            budget = ROW_BUDGET[op]
            out.append(
                Shape(op, "row", {**dims, **extra}, budget, ROW_SECONDS, budget, "copy", tag)
            )
    gemms = [(m, n, k) for n, k in GEMM_NK for m in GEMM_MS] + [GEMM_ODD]
    for m, n, k in gemms:
        out.append(
            Shape(
                "gemm",
                "rcr",
                {"m": m, "n": n, "k": k},
                _gemm_budget(m),
                GEMM_SECONDS,
                _gemm_heads(m),
                "cublas",
            )
        )
    for batch in CONV_BATCHES:
        for _layer, h, c, k, r, stride, pad in CONV_LAYERS:
            dims = {
                "n": batch,
                "h": h,
                "w": h,
                "c": c,
                "k": k,
                "r": r,
                "s": r,
                "stride": stride,
                "pad": pad,
                "dilation": 1,
            }
            out.append(
                Shape(
                    "conv2d",
                    "nhwc",
                    dims,
                    CONV_BUDGET,
                    CONV_SECONDS,
                    CONV_PRECOMPILE,
                    "cudnn_default",
                )
            )
    if quick:
        out = [s for s in out if s.key in QUICK]
    return out


def precompile_commands(
    selected: list[Shape], cache_dir: str = ".cache/tunehub", arch: str = "sm_90"
) -> list[str]:
    """``bench/precompile_cuda.py`` command lines that build every shape's precompilable head."""
    lines = []
    for shape in selected:
        if shape.precompile <= 0:
            continue
        dims = ",".join(f"{k}={v}" for k, v in shape.problem.items())
        lines.append(
            f"python bench/precompile_cuda.py --cache-dir {cache_dir} --arch {arch} "
            f"--op {shape.op} --dtype {DTYPE} --layout {shape.layout} --problem {dims} "
            f"--max-variants {shape.precompile}"
        )
    return lines
