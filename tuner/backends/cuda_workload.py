"""GPU side of the CUDA harness: inputs, reference, verification and timing, with torch.

Imported only inside the harness process (``tuner.backends.cuda_harness``), never by the
worker: torch lives on the GPU host alone.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tuner.abi import RMS_NORM_EPS, abi_dims
from tuner.epilogues import NONE, activation_of, output_columns
from tuner.fp8 import term_norms
from tuner.moe import token_counts
from tuner.problems import (
    Conv2dProblem,
    GemmProblem,
    GroupedGemmProblem,
    Problem,
    ReduceProblem,
    RmsNormProblem,
    ScaledGemmProblem,
    SoftmaxProblem,
)
from tuner.reference import Verdict, bound_share, error_limit

__all__ = [
    "Workload",
    "build_workload",
    "scaled_gemm_inputs",
    "dequantized",
    "rms_norm_reference",
    "grouped_gemm_reference",
    "apply_epilogue",
    "verify_output",
    "time_launches",
    "TimingRun",
    "TORCH_DTYPES",
    "input_set_count",
    "seeded_generator",
]

TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
#: most input sets rotated; tiny problems stay L2-resident beyond this, as documented
MAX_INPUT_SETS = 256
#: share of free device memory the rotated input sets may take
MEMORY_SHARE = 0.4


@dataclass
class Workload:
    """Everything one problem needs on the device, reused by every variant of that problem."""

    key: str
    inputs: list[list[torch.Tensor]]  # per set, in tuner.reference.make_inputs order
    outputs: list[torch.Tensor]  # per set
    expected: torch.Tensor  # float32 reference of set 0
    dims: list[int]
    reduction_len: int
    set_bytes: int
    pointer_arrays: list[Any] = field(default_factory=list)
    #: the output's dtype when it is not the request's (scaled_gemm: its out_dtype)
    out_dtype: str | None = None
    #: per output, the L2 norm of its k terms (FP8 operands: tuner.reference.error_limit)
    term_norm: torch.Tensor | None = None


def input_set_count(set_bytes: int, l2_bytes: int) -> int:
    """How many input sets a problem rotates through: enough to cover twice the L2 (each
    launch reads operands from memory, not from the last launch's cache), at most
    MEMORY_SHARE of free device memory and MAX_INPUT_SETS."""
    free, _ = torch.cuda.mem_get_info()
    wanted = max(1, math.ceil(2 * l2_bytes / max(1, set_bytes)))
    affordable = max(1, int(free * MEMORY_SHARE) // max(1, set_bytes))
    return min(wanted, affordable, MAX_INPUT_SETS)


def seeded_generator(seed: int) -> torch.Generator:
    """The device generator every workload draws its inputs from."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return gen


def _uniform(
    shape: tuple[int, ...], dtype: str, scale: float, gen: torch.Generator
) -> torch.Tensor:
    values = torch.rand(shape, generator=gen, device="cuda", dtype=torch.float32)
    return ((values * 2.0 - 1.0) * scale).to(TORCH_DTYPES[dtype])


def _shapes(problem: Problem, layout: str) -> tuple[list[tuple[int, ...]], tuple[int, ...], float]:
    """Input shapes, output shape and the value scale of the op."""
    if isinstance(problem, GemmProblem):
        m, n, k = problem.m, problem.n, problem.k
        a = (m, k) if layout[0] == "r" else (k, m)
        b = (k, n) if layout[1] == "r" else (n, k)
        out = (m, output_columns(problem.epilogue, n))
        return ([a, b] if problem.epilogue == NONE else [a, b, (n,)]), out, 1.0
    if isinstance(problem, Conv2dProblem):
        p = problem
        shapes: list[tuple[int, ...]] = [(p.n, p.h, p.w, p.c), (p.k, p.r, p.s, p.c)]
        if p.epilogue != NONE:
            shapes.append((p.k,))  # the bias, one per output channel
        return shapes, (p.n, p.p, p.q, p.k), 1.0
    if isinstance(problem, ReduceProblem):
        return [(problem.m, problem.k)], (problem.m,), 4.0
    if isinstance(problem, SoftmaxProblem):
        return [(problem.m, problem.k)], (problem.m, problem.k), 4.0
    if isinstance(problem, RmsNormProblem):
        return [(problem.m, problem.k), (problem.k,)], (problem.m, problem.k), 4.0
    if isinstance(problem, GroupedGemmProblem):  # A [tokens, k] by expert, W [E, n, k]
        g = problem
        return [(g.tokens, g.k), (g.experts, g.n, g.k)], (g.tokens, g.n), 1.0
    raise TypeError(f"no workload for {type(problem).__name__}")


def apply_epilogue(acc: torch.Tensor, bias: torch.Tensor, epilogue: str) -> torch.Tensor:
    """``tuner.reference.apply_epilogue`` in torch: float32 ``acc`` (last dim: the product's
    columns) and ``bias``; GELU exact (erf), gated_silu: silu(gate half) * up half."""
    x = acc + bias.float()
    if epilogue == "gated_silu":
        half = x.shape[-1] // 2
        return torch.nn.functional.silu(x[..., :half]) * x[..., half:]
    activation = activation_of(epilogue)
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu":
        return torch.nn.functional.gelu(x)
    if activation == "silu":
        return torch.nn.functional.silu(x)
    return x


def _reference(problem: Problem, layout: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    if isinstance(problem, GemmProblem):
        a, b = (t.float() for t in inputs[:2])
        a = a if layout[0] == "r" else a.t()
        b = b if layout[1] == "r" else b.t()
        acc = a @ b
        return acc if problem.epilogue == NONE else apply_epilogue(acc, inputs[2], problem.epilogue)
    if isinstance(problem, Conv2dProblem):
        x = inputs[0].float().permute(0, 3, 1, 2)
        w = inputs[1].float().permute(0, 3, 1, 2)
        y = torch.nn.functional.conv2d(
            x, w, stride=problem.stride, padding=problem.pad, dilation=problem.dilation
        )
        y = y.permute(0, 2, 3, 1).contiguous()
        return y if problem.epilogue == NONE else apply_epilogue(y, inputs[2], problem.epilogue)
    if isinstance(problem, GroupedGemmProblem):
        return grouped_gemm_reference(
            inputs[0], inputs[1], token_counts(problem.experts, problem.tokens, problem.skew)
        )
    x = inputs[0].float()
    if isinstance(problem, RmsNormProblem):
        return rms_norm_reference(x, inputs[1].float(), RMS_NORM_EPS)
    if isinstance(problem, ReduceProblem):
        if problem.kind == "max":
            return x.amax(dim=1)
        return x.mean(dim=1) if problem.kind == "mean" else x.sum(dim=1)
    return torch.softmax(x, dim=1)


def grouped_gemm_reference(a: torch.Tensor, w: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Per-expert matmuls in float32: rows of expert e of ``a`` [tokens, k] times ``w[e]``^T."""
    out = torch.zeros((a.shape[0], w.shape[1]), dtype=torch.float32, device=a.device)
    start = 0
    for e, m in enumerate(counts):
        if m:
            out[start : start + m] = a[start : start + m].float() @ w[e].float().t()
        start += m
    return out


def rms_norm_reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """w * (x * rsqrt(mean(x^2) + eps)) over the last dim, in float32 (x and w float32)."""
    eps32 = float(torch.tensor(eps, dtype=torch.float32))  # the float32 eps a kernel reads
    return w * (x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps32))


def scaled_gemm_inputs(problem: ScaledGemmProblem, gen: torch.Generator) -> list[torch.Tensor]:
    """[a, b, a_scale, b_scale] on the device as ``tuner.fp8`` lays them out: values in
    [-1, 1] times a random factor per scale group (0.25..4), each group's scale its amax / 448
    (torch's float8_e4m3fn cast rounds to nearest even and saturates nothing here)."""
    m, n, k = problem.m, problem.n, problem.k

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=gen, device="cuda") * 2.0 - 1.0

    def factor(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=gen, device="cuda") * 3.75 + 0.25

    fp8 = torch.float8_e4m3fn
    if problem.scaling == "per_tensor":
        a, b = uniform(m, k), uniform(n, k)
        sa, sb = a.abs().amax().reshape(1) / 448.0, b.abs().amax().reshape(1) / 448.0
        return [(a / sa).to(fp8), (b / sb).to(fp8), sa.float(), sb.float()]
    kb, nb = k // 128, n // 128
    a = uniform(m, kb, 128) * factor(m, kb, 1)
    b = uniform(nb, 128, kb, 128) * factor(nb, 1, kb, 1)
    sa = a.abs().amax(dim=2) / 448.0  # [m, kb]
    sb = b.abs().amax(dim=(1, 3)) / 448.0  # [nb, kb]
    qa = (a / sa[:, :, None]).to(fp8).reshape(m, k)
    qb = (b / sb[:, None, :, None]).to(fp8).reshape(n, k)
    return [qa, qb, sa.t().contiguous(), sb.contiguous()]


def dequantized(problem: ScaledGemmProblem, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """(A [m, k], B [n, k]) in float32: each e4m3 value times its scale."""
    a, b, sa, sb = inputs[0].float(), inputs[1].float(), inputs[2], inputs[3]
    if problem.scaling == "per_tensor":
        return a * sa[0], b * sb[0]
    sa_rows = sa.t().repeat_interleave(128, dim=1)  # [m, k]
    sb_blocks = sb.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)  # [n, k]
    return a * sa_rows, b * sb_blocks


def build_workload(problem: Problem, dtype: str, layout: str, seed: int, l2_bytes: int) -> Workload:
    """Random input sets totalling >= 2x L2 (capped by memory), outputs and the reference."""
    if isinstance(problem, ScaledGemmProblem):
        return _scaled_gemm_workload(problem, dtype, layout, seed, l2_bytes)
    if isinstance(problem, GroupedGemmProblem) and dtype == "e4m3":
        # FP8 with rowwise scales; that module builds on this one's Workload
        from tuner.backends.cuda_grouped_fp8 import grouped_fp8_workload

        return grouped_fp8_workload(problem, dtype, layout, seed, l2_bytes)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    in_shapes, out_shape, scale = _shapes(problem, layout)
    elem = torch.tensor([], dtype=TORCH_DTYPES[dtype]).element_size()
    set_bytes = (sum(math.prod(s) for s in in_shapes) + math.prod(out_shape)) * elem
    n_sets = input_set_count(set_bytes, l2_bytes)
    gen = seeded_generator(seed)
    inputs = [[_uniform(s, dtype, scale, gen) for s in in_shapes] for _ in range(n_sets)]
    outputs = [
        torch.empty(out_shape, dtype=TORCH_DTYPES[dtype], device="cuda") for _ in range(n_sets)
    ]
    dims = abi_dims(problem)  # [m, k, eps_bits] for rms_norm: tuner.abi says why
    work = Workload(
        key=f"{problem.op}|{dtype}|{layout}|{problem.key()}|{seed}",
        inputs=inputs,
        outputs=outputs,
        expected=_reference(problem, layout, inputs[0]),
        dims=dims,
        reduction_len=problem.reduction_length(),
        set_bytes=set_bytes,
    )
    work.pointer_arrays = [(ctypes.c_void_p * len(s))(*[t.data_ptr() for t in s]) for s in inputs]
    return work


def _scaled_gemm_workload(
    problem: ScaledGemmProblem, dtype: str, layout: str, seed: int, l2_bytes: int
) -> Workload:
    """FP8 operands and scales per set, outputs in out_dtype, the reference from the
    dequantized set 0 (float32 matmul, TF32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    set_bytes = problem.m * problem.k + problem.n * problem.k + 2 * problem.m * problem.n
    n_sets = input_set_count(set_bytes, l2_bytes)
    gen = seeded_generator(seed)
    inputs = [scaled_gemm_inputs(problem, gen) for _ in range(n_sets)]
    out = TORCH_DTYPES[problem.out_dtype]
    outputs = [torch.empty((problem.m, problem.n), dtype=out, device="cuda") for _ in range(n_sets)]
    a, b = dequantized(problem, inputs[0])
    work = Workload(
        key=f"{problem.op}|{dtype}|{layout}|{problem.key()}|{seed}",
        inputs=inputs,
        outputs=outputs,
        expected=a @ b.t(),
        dims=abi_dims(problem),
        reduction_len=problem.reduction_length(),
        set_bytes=set_bytes,
        out_dtype=problem.out_dtype,
        term_norm=term_norms(a, b),
    )
    work.pointer_arrays = [(ctypes.c_void_p * len(s))(*[t.data_ptr() for t in s]) for s in inputs]
    return work


def verify_output(work: Workload, dtype: str) -> Verdict:
    """Output set 0 against the float32 reference, within ``tuner.reference.error_limit`` (the
    workload's out_dtype and term norms when it has them: scaled_gemm, grouped_gemm e4m3)."""
    dtype = work.out_dtype or dtype
    got = work.outputs[0].float().reshape(work.expected.shape)
    finite = torch.isfinite(got)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return Verdict(
            False, math.inf, f"{bad} non-finite outputs (poison left or overflow)", math.inf
        )
    err = (got - work.expected).abs()
    limit = error_limit(work.expected, dtype, work.reduction_len, work.term_norm)
    worst = float(err.max()) if err.numel() else 0.0
    share = bound_share(err, limit)
    excess = err - limit
    if not bool((excess > 0).any()):
        return Verdict(True, worst, "ok", share)
    flat = int(excess.argmax())
    return Verdict(
        False,
        worst,
        f"max |error| {worst:.3g} ({share:.3g}x the bound); worst at flat index {flat}: got "
        f"{float(got.flatten()[flat]):.6g}, expected {float(work.expected.flatten()[flat]):.6g}",
        share,
    )


@dataclass
class TimingRun:
    samples_us: list[float]
    batch: int
    graph: bool
    aborted: bool
    #: joules per launch over the timed batches (NVML total-energy counter), None unread
    energy_j: float | None = None


def _elapsed_us(fn: Callable[[], None]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


def time_launches(
    launch: Callable[[int, int], None],
    n_sets: int,
    *,
    warmup_s: float,
    bench_s: float,
    min_samples: int,
    max_samples: int,
    abort_us: float | None,
    batch_us: float = 1000.0,
    use_graph: bool = True,
    max_batch: int = 2000,
    energy_mj: Callable[[], int | None] | None = None,
) -> TimingRun:
    """Per-launch microseconds: batches of back-to-back launches (rotating the input sets),
    captured in a CUDA graph when possible, each batch timed with CUDA events.

    ``launch(set_index, stream_handle)`` enqueues one launch on the stream. ``energy_mj``
    reads the device's energy counter before and after the timed batches (the warm-up is
    outside), giving joules per launch; the counter's resolution is 1 mJ, so energy needs
    bench_s long enough for many mJ.
    """
    stream = torch.cuda.current_stream()
    one = min(_elapsed_us(lambda: launch(0, stream.cuda_stream)) for _ in range(3))
    batch = max(1, min(max_batch, math.ceil(batch_us / max(one, 0.5))))

    def run_batch(handle: int) -> None:
        for i in range(batch):
            launch(i % n_sets, handle)

    replay: Callable[[], None] = lambda: run_batch(stream.cuda_stream)  # noqa: E731
    graph_used = False
    if use_graph:
        try:
            # capture_begin/end rather than torch.cuda.graph(): that one runs gc.collect() and
            # empty_cache() on every capture, which costs more than a fast variant's timing
            graph = torch.cuda.CUDAGraph()
            capture_stream = torch.cuda.Stream()
            capture_stream.wait_stream(stream)
            with torch.cuda.stream(capture_stream):
                graph.capture_begin()
                try:
                    run_batch(capture_stream.cuda_stream)
                finally:
                    graph.capture_end()
            stream.wait_stream(capture_stream)
            replay, graph_used = graph.replay, True
        except RuntimeError:  # capture unsupported for this launch: time plain launches
            torch.cuda.synchronize()
    warm_until = time.perf_counter() + warmup_s
    while time.perf_counter() < warm_until:
        _elapsed_us(replay)
    samples: list[float] = []
    torch.cuda.synchronize()
    energy_before = energy_mj() if energy_mj else None
    deadline = time.perf_counter() + bench_s
    aborted = False
    while len(samples) < max_samples:
        samples.append(_elapsed_us(replay) / batch)
        if abort_us is not None and len(samples) >= 3:
            ordered = sorted(samples)
            if ordered[len(ordered) // 2] > abort_us:
                aborted = True
                break
        if len(samples) >= min_samples and time.perf_counter() >= deadline:
            break
    energy_j = None
    if energy_before is not None and energy_mj is not None:
        torch.cuda.synchronize()
        energy_after = energy_mj()
        if energy_after is not None and energy_after > energy_before:
            energy_j = (energy_after - energy_before) / 1000.0 / (len(samples) * batch)
    return TimingRun(samples, batch, graph_used, aborted, energy_j)
