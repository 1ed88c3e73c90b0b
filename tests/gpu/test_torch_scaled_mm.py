"""``scaled_mm`` (FP8 e4m3) on the GPU with answers a real server and CUDA worker tuned in this
module (a tiny budget): per-tensor and block scaling, bf16 and f16 out, against
``torch._scaled_mm`` and the dequantized float32 product, eagerly, under CUDA graph capture and
under torch.compile(fullgraph=True). sm_90 only (the scaled_gemm spaces are Hopper's).

Run on the H200 host:

    TUNEHUB_GPU_TEST_MAX_VARIANTS=2 python -m pytest -m gpu --noconftest -x -q \
        tests/gpu/test_torch_scaled_mm.py
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS

torch = pytest.importorskip("torch")

import service.integrations.torch as tunehub_torch  # noqa: E402
from tests.gpu.test_torch_ops import Server, configured, serve_and_tune  # noqa: E402, F401

pytestmark = [
    *GPU_MARKS,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs an sm_90 GPU",
    ),
]

FP8 = getattr(torch, "float8_e4m3fn", None)
M, N, K = 16, 2048, 1024
#: (scaling, out dtype) of each tuned shape
CASES = (("per_tensor", torch.bfloat16), ("per_tensor", torch.float16), ("block", torch.bfloat16))


def quantized(scaling: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """a [M, K], b [N, K] e4m3 and float32 scales; block: a random factor per scale group,
    scale_a [M, K/128] with strides (1, M) (torch's 1x128 layout), scale_b [N/128, K/128]."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=g, device="cuda") * 2 - 1

    def factor(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=g, device="cuda") * 3.75 + 0.25

    if scaling == "per_tensor":
        a, b = uniform(M, K), uniform(N, K)
        sa, sb = a.abs().amax() / 448, b.abs().amax() / 448
        return (a / sa).to(FP8), (b / sb).to(FP8), sa.float(), sb.float()
    kb, nb = K // 128, N // 128
    a = uniform(M, kb, 128) * factor(M, kb, 1)
    b = uniform(nb, 128, kb, 128) * factor(nb, 1, kb, 1)
    sa = a.abs().amax(-1) / 448
    sb = b.abs().amax((1, 3)) / 448
    qa = (a / sa[..., None]).to(FP8).view(M, K)
    qb = (b / sb[:, None, :, None]).to(FP8).view(N, K)
    return qa, qb, sa.t().contiguous().t(), sb.contiguous()


def dequantized(a, b, sa, sb, scaling: str, out_dtype: torch.dtype) -> torch.Tensor:  # type: ignore[no-untyped-def]
    fa, fb = a.float(), b.float()
    if scaling == "per_tensor":
        return ((fa * sa) @ (fb * sb).t()).to(out_dtype)
    fa = fa * sa.repeat_interleave(128, dim=1)
    fb = fb * sb.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    return (fa @ fb.t()).to(out_dtype)


def run_all(operands: dict[str, tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
    return [
        tunehub_torch.scaled_mm(*operands[scaling], out_dtype, scaling)
        for scaling, out_dtype in CASES
    ]


def operands_of_cases(seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
    return {scaling: quantized(scaling, seed) for scaling in ("per_tensor", "block")}


def assert_matches(got: list[torch.Tensor], operands: dict[str, tuple[torch.Tensor, ...]]) -> None:
    """Against the dequantized f32 product, with tuner.fp8's tolerance (bf16 2e-2, f16 1e-2,
    times max(1, sqrt(k)/8))."""
    for out, (scaling, out_dtype) in zip(got, CASES, strict=True):
        assert out.dtype == out_dtype and out.shape == (M, N)
        want = dequantized(*operands[scaling], scaling, out_dtype)
        tol = (2e-2 if out_dtype == torch.bfloat16 else 1e-2) * max(1.0, K**0.5 / 8)
        torch.testing.assert_close(out.float(), want.float(), rtol=tol, atol=tol)


def tunehub_ran() -> None:
    stats = tunehub_torch.stats()
    shapes = [s for s in stats.shapes if s.op == "scaled_gemm"]
    assert len(shapes) == len(CASES), stats.format()
    for shape in shapes:
        assert shape.fallback is None and shape.tunehub_calls > 0, stats.format()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve_and_tune(
        tmp_path_factory.mktemp("torch-fp8"), lambda: run_all(operands_of_cases()), len(CASES)
    )


def test_scaled_mm_matches_torch(configured: Callable[..., None]) -> None:  # noqa: F811
    operands = operands_of_cases()
    with torch.inference_mode():
        got = run_all(operands)
    torch.cuda.synchronize()
    assert_matches(got, operands)
    # per-tensor against torch._scaled_mm itself (the fallback, cuBLASLt's default)
    for out, (scaling, out_dtype) in zip(got, CASES, strict=True):
        if scaling == "per_tensor":
            a, b, sa, sb = operands[scaling]
            want = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)
            tol = 2e-2 if out_dtype == torch.bfloat16 else 1e-2
            torch.testing.assert_close(out.float(), want.float(), rtol=tol, atol=tol * 4)
    tunehub_ran()
    assert {s.source for s in tunehub_torch.stats().shapes} == {"artifact"}


def test_scaled_mm_under_cuda_graph_capture(configured: Callable[..., None]) -> None:  # noqa: F811
    operands = operands_of_cases()
    with torch.inference_mode():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up: resolves and loads every shape's kernel
            run_all(operands)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = run_all(operands)
        fresh = operands_of_cases(seed=1)
        for scaling, tensors in fresh.items():
            for target, value in zip(operands[scaling], tensors, strict=True):
                target.copy_(value)  # new values in the captured inputs
        graph.replay()
        torch.cuda.synchronize()
    assert_matches(captured, operands)
    tunehub_ran()


def test_scaled_mm_under_torch_compile(configured: Callable[..., None]) -> None:  # noqa: F811
    torch._dynamo.reset()
    operands = operands_of_cases()
    with torch.inference_mode():
        got = torch.compile(run_all, fullgraph=True)(operands)
    assert_matches(got, operands)
    tunehub_ran()
