"""``grouped_mm`` (mixture-of-experts grouped GEMM) on the GPU with answers a real server and CUDA
worker tuned in this module (a tiny budget): two batches of one token bucket against
``torch._grouped_mm``; under CUDA graph capture the op does not run tunehub's kernel (it copies
offs to the host) and captures torch._grouped_mm instead, said once; under
torch.compile(fullgraph=True) it runs the kernel.

Run on the H200 host:

    TUNEHUB_GPU_TEST_MAX_VARIANTS=2 python -m pytest -m gpu --noconftest -x -q \
        tests/gpu/test_torch_grouped_mm.py
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
        reason="needs an sm_90 GPU (torch._grouped_mm, the CUTLASS family)",
    ),
]

E, N, K = 8, 512, 1024
#: two batches of the bucket tokens 32, skew 2 (mean 4 tokens per expert: the decode family)
COUNTS = ([8, 4, 3, 5, 2, 4, 3, 3], [2, 6, 4, 8, 1, 3, 5, 3])


def operands(counts: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.rand(sum(counts), K, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
    w = ((torch.rand(E, N, K, generator=g, device="cuda") * 2 - 1) * 0.05).to(torch.bfloat16)
    offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    return a, w, offs


def torch_grouped(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)


def assert_close(got: torch.Tensor, want: torch.Tensor) -> None:
    scale = max(1.0, float(want.float().abs().max()))
    torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2 * scale)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    def record() -> None:
        tunehub_torch.grouped_mm(*operands(COUNTS[0]))

    yield from serve_and_tune(tmp_path_factory.mktemp("torch-moe"), record, min_shapes=1)


def the_bucket() -> tunehub_torch.ShapeStat:
    (shape,) = [s for s in tunehub_torch.stats().shapes if s.op == "grouped_gemm" and s.variant]
    return shape


def test_grouped_mm_matches_torch(configured: Callable[..., None]) -> None:  # noqa: F811
    with torch.inference_mode():
        for seed, counts in enumerate(COUNTS):
            a, w, offs = operands(counts, seed)
            assert_close(tunehub_torch.grouped_mm(a, w, offs), torch_grouped(a, w, offs))
    shape = the_bucket()
    assert shape.problem == {"experts": E, "n": N, "k": K, "tokens": 32, "skew": 2}
    assert shape.fallback is None and shape.tunehub_calls == 2 and shape.source == "artifact"


def test_capture_runs_torch_grouped_mm(
    configured: Callable[..., None],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, w, offs = operands(COUNTS[0])
    with torch.inference_mode():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up: the bucket resolves and runs the kernel
            tunehub_torch.grouped_mm(a, w, offs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = tunehub_torch.grouped_mm(a, w, offs)
        fresh = operands(COUNTS[1], seed=1)
        for target, value in zip((a, w, offs), fresh, strict=True):
            target.copy_(value)  # new values (and counts) in the captured inputs
        graph.replay()
        torch.cuda.synchronize()
    assert_close(captured, torch_grouped(a, w, offs))
    said = [r.getMessage() for r in caplog.records if "CUDA graph capture" in r.getMessage()]
    assert len(said) == 1 and "torch._grouped_mm is captured instead" in said[0]
    assert the_bucket().tunehub_calls == 1  # the warm-up; the graph holds torch's op
    assert tunehub_torch.stats().ops["grouped_gemm"].reasons == {"unsupported": 1}


def test_grouped_mm_under_torch_compile(configured: Callable[..., None]) -> None:  # noqa: F811
    torch._dynamo.reset()
    a, w, offs = operands(COUNTS[1], seed=1)
    with torch.inference_mode():
        got = torch.compile(tunehub_torch.grouped_mm, fullgraph=True)(a, w, offs)
    assert_close(got, torch_grouped(a, w, offs))
    assert the_bucket().tunehub_calls == 1
