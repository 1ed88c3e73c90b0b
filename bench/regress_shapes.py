"""The fixed shape list of bench/regress.py and each shape's tuning budget (no GPU, no torch).

f16 unless said otherwise. Rows (reduce sum, softmax) at M x K = 2^28 (``ROW_TOTAL``: the size
of every recorded row figure in docs/benchmarks, so the baseline's seeds compare like with like)
for small K (32-128), odd K (1000, 4095), mid K (1024, 4096) and vocabulary K (32000 Llama-2,
50257 GPT-2, 151936 Qwen2), and few rows (M = 1, 4, 8 at K = 128256 Llama-3, 256000 Gemma).
GEMM (rcr, Mistral-7B-class): prefill m = 2048 and decode m = 1, 16 at (n, k) = 4096x4096,
14336x4096, 4096x14336, and one size no tile divides. conv2d (NHWC, ResNet-50 v1.5): a 3x3, a
strided 3x3 and a 1x1 layer at batch 1 and 8.

Then the families of issue 26 (after the others, so that a deadline cuts them first; not in
``--quick``), each beside the call a user makes instead (``Shape.reference``: the serving
benchmarks' labels and timers):
- fused epilogues (f16; bench/serving_epilogue.py's shapes): Mistral-7B's gate_proj (n 14336,
  k 4096) with bias + SiLU at m = 16 and 2048, and ResNet-50's conv3 3x3 at batch 32 with BN
  folded into a bias + ReLU, beside the ``unfused`` pair (torch.matmul or torch's conv2d, then
  torch's bias add and activation);
- FP8 ``scaled_gemm`` (e4m3 in, bf16 out): Mistral-7B's o_proj (n = k = 4096) with per-tensor
  scales at m = 16 and 2048 and with 128-block scales (DeepSeek-style) at m = 2048, beside
  ``torch_scaled_mm`` (torch._scaled_mm, cuBLASLt's FP8 default; it refuses block scales at
  m = 1 on an H100: bench/results/h100-2026-12-05/serving-fp8.json);
- ``grouped_gemm`` (bench/serving_moe.py's model): Mixtral-8x7B's down projection (8 experts,
  n 4096, k 14336) at the decode (16 tokens) and prefill (8192 tokens) buckets, skew 2, in bf16
  beside ``grouped_mm`` (torch._grouped_mm) and in e4m3 beside ``scaled_grouped_mm``
  (torch._scaled_grouped_mm). A shape's key names its dtype when it is not f16, so the keys of
  the f16 shapes (and the records under them) are those they had before.

Budgets are small (the spaces order likely winners first): rows ``ROW_BUDGET`` candidates;
GEMM the cuBLASLt default, the family heads the space puts first for that m and a few more
cuBLASLt algorithms (``bench.vs_vendor_gemm.gemm_budget``); conv2d the first ``CONV_BUDGET``
of cuDNN's configs and the CUTLASS head. ``precompile`` is how much of the order's head
``bench/precompile_cuda.py`` can build without the GPU (every non-vendor candidate of the
budget; cuBLASLt and cuDNN configs are found and built on the GPU host; 0: only the builds that
ask the vendor library for its configs). The new families: a fused GEMM as a plain one, where
cuBLASLt cannot fuse the epilogue (SiLU) its slots going to the next candidates of the order; a
fused conv2d the first ``CONV_BUDGET`` of cuDNN's fused-graph configs (no other conv family
fuses); scaled_gemm the cuBLASLt FP8 default, the heads of the space's order for that m and
``FP8_EXTRA_VENDOR`` more cuBLASLt algorithms; grouped_gemm the head of its order
(``GROUPED_BUDGET``, no vendor candidate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner.problems import problem_from_dict

__all__ = [
    "CONV_BUDGET",
    "DTYPE",
    "FP8_EXTRA_VENDOR",
    "GEMM_EXTRA_VENDOR",
    "GROUPED_BUDGET",
    "ROW_BUDGET",
    "ROW_TOTAL",
    "Shape",
    "family_shapes",
    "precompile_commands",
    "shapes",
]

#: the dtype of a shape unless it names another (every shape before issue 26: left out of keys)
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
#: fused epilogues (f16): (m, n, k, epilogue) of Mistral-7B's gate_proj, and (n, h=w, c, k,
#: r=s, stride, pad, epilogue) of ResNet-50's conv3 3x3 (bench/serving_epilogue.py's shapes)
EPILOGUE_GEMMS = ((16, 14336, 4096, "bias_silu"), (2048, 14336, 4096, "bias_silu"))
EPILOGUE_CONVS = ((32, 28, 128, 128, 3, 1, 1, "bias_relu"),)
#: FP8 scaled_gemm (e4m3 in, bf16 out): (m, n, k, scaling), Mistral-7B's o_proj
SCALED_GEMMS = (
    (16, 4096, 4096, "per_tensor"),
    (2048, 4096, 4096, "per_tensor"),
    (2048, 4096, 4096, "block"),
)
#: cuBLASLt FP8 algorithms beyond its default in a scaled_gemm budget
FP8_EXTRA_VENDOR = 2
FP8_SECONDS = 10.0
#: grouped_gemm: (experts, n, k) of Mixtral-8x7B's down projection, its (tokens, skew) buckets
#: (bench/serving_moe.py's decode and prefill) and dtypes, each dtype's shapes in turn
GROUPED_GEMM = (8, 4096, 14336)
GROUPED_BUCKETS = ((16, 2), (8192, 2))
GROUPED_DTYPES = ("bf16", "e4m3")
#: the leading family's head and the other family's best two (cuda_grouped_gemm's order)
GROUPED_BUDGET = 8
GROUPED_SECONDS = 10.0
#: the label of what a user calls instead, per family (the serving benchmarks' labels)
UNFUSED = "unfused"
SCALED_MM = "torch_scaled_mm"
GROUPED_REFERENCE = {"bf16": "grouped_mm", "e4m3": "scaled_grouped_mm"}
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
    #: the request's dtype (e4m3: scaled_gemm's and grouped_gemm's FP8 inputs)
    dtype: str = DTYPE

    @property
    def key(self) -> str:
        """``softmax m=2796202,k=96``: the op and the problem's canonical dims, with the dtype
        between them when it is not ``DTYPE`` (``grouped_gemm e4m3 experts=8,...``)."""
        dims = problem_from_dict(self.op, dict(self.problem)).key()
        return f"{self.op} {dims}" if self.dtype == DTYPE else f"{self.op} {self.dtype} {dims}"


def _gemm_budget(m: int) -> int:
    from bench.vs_vendor_gemm import gemm_budget

    return gemm_budget(m, 1 + GEMM_EXTRA_VENDOR, cap=16)


def _gemm_heads(m: int) -> int:
    """Non-vendor candidates of a GEMM budget (the space puts them right after the default)."""
    return _gemm_budget(m) - (1 + GEMM_EXTRA_VENDOR)


def _fused_gemm_precompile(m: int, epilogue: str) -> int:
    """A fused GEMM's budget is a plain one's; where cuBLASLt cannot fuse the epilogue (no
    discovery runs) every candidate of it is ours, built here."""
    from tuner.spaces._gemm_epilogues import LT_EPILOGUES

    return _gemm_heads(m) if epilogue in LT_EPILOGUES else _gemm_budget(m)


def shapes(quick: bool = False) -> list[Shape]:
    """Every shape in run order: rows (the kernels most often changed) first, then GEMM, then
    conv2d, then issue 26's families (``family_shapes``); ``quick``: the ``QUICK`` subset."""
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
    out += family_shapes()
    if quick:
        out = [s for s in out if s.key in QUICK]
    return out


def family_shapes() -> list[Shape]:
    """The shapes of issue 26's families, in run order (module doc)."""
    from tuner.problems import Conv2dProblem, GemmProblem, GroupedGemmProblem, ScaledGemmProblem
    from tuner.spaces.cuda_scaled_gemm import head_size as scaled_gemm_head_size

    out: list[Shape] = []
    for m, n, k, epilogue in EPILOGUE_GEMMS:
        dims = GemmProblem(m, n, k, epilogue=epilogue).dims()
        precompile = _fused_gemm_precompile(m, epilogue)
        out.append(Shape("gemm", "rcr", dims, _gemm_budget(m), GEMM_SECONDS, precompile, UNFUSED))
    for batch, hw, c, k, rs, stride, pad, epilogue in EPILOGUE_CONVS:
        conv = Conv2dProblem(batch, hw, hw, c, k, rs, rs, stride, pad, 1, epilogue=epilogue)
        out.append(Shape("conv2d", "nhwc", conv.dims(), CONV_BUDGET, CONV_SECONDS, 0, UNFUSED))
    for m, n, k, scaling in SCALED_GEMMS:
        dims = ScaledGemmProblem(m, n, k, "bf16", scaling).dims()
        heads = scaled_gemm_head_size(m)
        budget = 1 + heads + FP8_EXTRA_VENDOR
        out.append(
            Shape("scaled_gemm", "rcr", dims, budget, FP8_SECONDS, heads, SCALED_MM, dtype="e4m3")
        )
    experts, n, k = GROUPED_GEMM
    for dtype in GROUPED_DTYPES:
        for tokens, skew in GROUPED_BUCKETS:
            dims = GroupedGemmProblem(experts, n, k, tokens, skew).dims()
            out.append(
                Shape(
                    "grouped_gemm",
                    "rcr",
                    dims,
                    GROUPED_BUDGET,
                    GROUPED_SECONDS,
                    GROUPED_BUDGET,
                    GROUPED_REFERENCE[dtype],
                    dtype=dtype,
                )
            )
    return out


def precompile_commands(
    selected: list[Shape], cache_dir: str = ".cache/tunehub", arch: str = "sm_90"
) -> list[str]:
    """``bench/precompile_cuda.py`` command lines, one per shape: its precompilable head and
    the builds that ask the vendor library for its configs (all a fused conv2d has here)."""
    lines = []
    for shape in selected:
        dims = ",".join(f"{k}={v}" for k, v in shape.problem.items())
        lines.append(
            f"python bench/precompile_cuda.py --cache-dir {cache_dir} --arch {arch} "
            f"--op {shape.op} --dtype {shape.dtype} --layout {shape.layout} --problem {dims} "
            f"--max-variants {shape.precompile}"
        )
    return lines
