"""``scaled_grouped_mm`` (FP8 e4m3 mixture-of-experts grouped GEMM, rowwise scales) on the GPU
with answers a real server and CUDA worker tuned in this module (a tiny budget): two batches of
one token bucket against ``torch._scaled_grouped_mm``, eagerly and under
torch.compile(fullgraph=True). Capture is grouped_mm's code path (tests/gpu/
test_torch_grouped_mm.py).

Run on the H200 host:

    TUNEHUB_GPU_TEST_MAX_VARIANTS=2 python -m pytest -m gpu --noconftest -x -q \
        tests/gpu/test_torch_scaled_grouped_mm.py
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
        not torch.cuda.is_available()
        or torch.cuda.get_device_capability() != (9, 0)
        or not hasattr(torch, "_scaled_grouped_mm"),
        reason="needs an sm_90 GPU and torch._scaled_grouped_mm",
    ),
]

E, N, K = 8, 512, 1024
#: two batches of the bucket tokens 64, skew 2 (mean 8 tokens per expert: the decode family
#: first); each count a multiple of 16, as torch._scaled_grouped_mm asks on sm90
COUNTS = ([16, 0, 16, 0, 0, 16, 0, 16], [0, 16, 0, 16, 16, 0, 16, 0])
BUCKET = {"experts": E, "n": N, "k": K, "tokens": 64, "skew": 2}


def operands(counts: list[int], seed: int = 0) -> tuple[torch.Tensor, ...]:
    """a [tokens, K] and weight [E, N, K] e4m3 quantized per row (scale = amax / 448), their
    float32 scales [tokens] and [E, N], and int32 cumulative offs."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.rand(sum(counts), K, generator=g, device="cuda") * 2 - 1
    w = (torch.rand(E, N, K, generator=g, device="cuda") * 2 - 1) * 0.05
    sa, sb = a.abs().amax(-1) / 448, w.abs().amax(-1) / 448
    qa, qw = (a / sa[:, None]).to(torch.float8_e4m3fn), (w / sb[..., None]).to(torch.float8_e4m3fn)
    offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    return qa, qw, sa, sb, offs


def torch_scaled_grouped(a, w, sa, sb, offs) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return torch._scaled_grouped_mm(
        a, w.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16
    )


def assert_close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == torch.bfloat16
    scale = max(1.0, float(want.float().abs().max()))
    torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2 * scale)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    def record() -> None:
        tunehub_torch.scaled_grouped_mm(*operands(COUNTS[0]))

    yield from serve_and_tune(tmp_path_factory.mktemp("torch-moe-fp8"), record, min_shapes=1)


def the_bucket() -> tunehub_torch.ShapeStat:
    (shape,) = [
        s for s in tunehub_torch.stats().shapes
        if s.op == "grouped_gemm" and s.dtype == "e4m3" and s.variant
    ]  # fmt: skip
    return shape


def test_scaled_grouped_mm_matches_torch(configured: Callable[..., None]) -> None:  # noqa: F811
    with torch.inference_mode():
        for seed, counts in enumerate(COUNTS):
            args = operands(counts, seed)
            assert_close(tunehub_torch.scaled_grouped_mm(*args), torch_scaled_grouped(*args))
    shape = the_bucket()
    assert shape.problem == BUCKET
    assert shape.fallback is None and shape.tunehub_calls == 2 and shape.source == "artifact"


def test_scaled_grouped_mm_under_torch_compile(configured: Callable[..., None]) -> None:  # noqa: F811
    torch._dynamo.reset()
    args = operands(COUNTS[1], seed=1)
    with torch.inference_mode():
        got = torch.compile(tunehub_torch.scaled_grouped_mm, fullgraph=True)(*args)
    assert_close(got, torch_scaled_grouped(*args))
    assert the_bucket().tunehub_calls == 1
