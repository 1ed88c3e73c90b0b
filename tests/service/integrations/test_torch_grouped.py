"""``grouped_mm`` (mixture-of-experts grouped GEMM, ``tunehub::grouped_mm``) on the CPU: its tuned
kernels are CUDA only, so CPU tensors run ``torch._grouped_mm``, said once. The bucket key, the
per-call counts and the launch are tested with the CUDA-only rule lifted for CPU tensors (a test
setting) against a test double of the client whose artifact is the ABI test fixture's bf16
grouped_gemm. tests/gpu/test_torch_grouped_mm.py runs the real thing, capture included."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "_grouped_mm"):
    pytest.skip("this torch has no _grouped_mm", allow_module_level=True)

import service.integrations.torch as tunehub_torch  # noqa: E402
from service.cli.tune_file import read_shapes  # noqa: E402
from service.integrations import _torch_grouped  # noqa: E402
from service.integrations._torch_device import cpu_device_key  # noqa: E402
from tests.service.integrations.torch_helpers import (  # noqa: E402
    FakeArtifactClient,
    build_fixture,
)
from tuner.moe import SKEWS, bucket_of  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

DEVICE = cpu_device_key()
RUNTIME_LOG = "service.integrations._torch_runtime"
E, N, K = 4, 16, 32
#: two batches of one bucket (tokens 16, skew 2) and one of another (tokens 8)
COUNTS = ([3, 8, 1, 4], [5, 2, 6, 3], [2, 2, 2, 1])
BUCKET = {"experts": E, "n": N, "k": K, "tokens": 16, "skew": 2}


def operands(counts: list[int], dtype: torch.dtype = torch.bfloat16, rows: int | None = None):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(sum(counts))
    a = torch.randn(rows or sum(counts), K, generator=g).to(dtype)
    w = (torch.randn(E, N, K, generator=g) * 0.2).to(dtype)
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    return a, w, offs


def per_expert(a: torch.Tensor, w: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """A loop of per-expert matmuls in float32, rows past the routed ones zero."""
    out = torch.zeros(a.shape[0], N)
    start = 0
    for e, m in enumerate(counts):
        out[start : start + m] = a[start : start + m].float() @ w[e].float().t()
        start += m
    return out


def test_bucket_agrees_with_tuner() -> None:
    assert _torch_grouped.SKEWS == SKEWS
    rng = random.Random(0)
    for _ in range(500):
        counts = [rng.choice((0, 1, 2, 3, 7, 40, 300)) for _ in range(rng.randint(1, 16))]
        if sum(counts):
            assert _torch_grouped.bucket_of(counts) == bucket_of(counts), counts


def test_cpu_tensors_run_torch_grouped_mm_said_once(
    client: FakeArtifactClient, caplog: pytest.LogCaptureFixture
) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        a, w, offs = operands(COUNTS[0], dtype)
        with torch.inference_mode():
            for _ in range(2):
                got = tunehub_torch.grouped_mm(a, w, offs)
        want = per_expert(a, w, COUNTS[0]).to(dtype)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    said = [r.getMessage() for r in caplog.records if r.name == RUNTIME_LOG]
    assert len(said) == 2
    assert "(tunehub's grouped_gemm kernels take float16, bfloat16, float8_e4m3fn)" in said[0]
    assert "cpu tensors (grouped_gemm has CUDA kernels only)" in said[1]
    assert tunehub_torch.stats().ops["grouped_gemm"].reasons == {"unsupported": 4}
    assert client.best_calls == 0


def test_bad_operands_are_value_errors(client: FakeArtifactClient) -> None:
    a, w, offs = operands(COUNTS[0])
    with pytest.raises(ValueError, match=r"a \[tokens, k\] and weight \[experts, n, k\]"):
        tunehub_torch.grouped_mm(a, w[0], offs)
    with pytest.raises(ValueError, match="offs must be int32"):
        tunehub_torch.grouped_mm(a, w, offs.long())
    with pytest.raises(ValueError, match="offs must be int32"):
        tunehub_torch.grouped_mm(a, w, offs[:2])


@pytest.mark.usefixtures("cpu_kernels")
def test_one_bucket_serves_every_batch_in_it(client: FakeArtifactClient, fixtures: Path) -> None:
    client.serve("grouped_gemm", "rcr", BUCKET, DEVICE, build_fixture(fixtures, "GROUPED_GEMM"))
    with torch.inference_mode():
        for counts in COUNTS[:2]:
            a, w, offs = operands(counts, rows=20)  # 4 rows past the routed 16
            got = tunehub_torch.grouped_mm(a, w, offs)
            torch.testing.assert_close(got.float(), per_expert(a, w, counts), rtol=2e-2, atol=2e-2)
            assert not got[16:].any()
    (shape,) = tunehub_torch.stats().shapes
    assert (shape.op, shape.dtype, shape.problem) == ("grouped_gemm", "bf16", BUCKET)
    assert shape.fallback is None and shape.tunehub_calls == 2
    assert client.best_calls == 1  # one bucket, asked once
    assert list(client.disk) == [("grouped_gemm", "rcr", tuple(sorted(BUCKET.items())), DEVICE)]


@pytest.mark.usefixtures("cpu_kernels")
def test_counts_the_variant_refuses_fall_back_for_that_call(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The variant takes at most 6 tokens per expert: the batch with 8 runs torch's op (said
    once), the next batch of the same bucket runs the kernel."""
    library = build_fixture(fixtures, "GROUPED_GEMM", max_per_expert=6)
    client.serve("grouped_gemm", "rcr", BUCKET, DEVICE, library)
    with torch.inference_mode():
        for counts in (COUNTS[1], COUNTS[0], COUNTS[0], COUNTS[1]):
            a, w, offs = operands(counts)
            got = tunehub_torch.grouped_mm(a, w, offs)
            torch.testing.assert_close(got.float(), per_expert(a, w, counts), rtol=2e-2, atol=2e-2)
    (shape,) = tunehub_torch.stats().shapes
    assert (shape.tunehub_calls, shape.fallback_calls) == (2, 2)
    said = [r.getMessage() for r in caplog.records if r.name == RUNTIME_LOG]
    assert (
        len(said) == 1 and "refused dims [4, 16, 32, 16, 2, 3, 8, 1, 4] (too large (4))" in said[0]
    )


@pytest.mark.usefixtures("cpu_kernels")
def test_untuned_buckets_are_recorded(client: FakeArtifactClient, tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.jsonl"
    with tunehub_torch.record(shapes) as recorder, torch.inference_mode():
        for counts in COUNTS:
            tunehub_torch.grouped_mm(*operands(counts))
    assert recorder.written == 2  # two buckets
    records = [json.loads(line) for line in shapes.read_text().splitlines()]
    assert records[0] == {"op": "grouped_gemm", "dtype": "bf16", "layout": "rcr",
                          "device": DEVICE, "problem": BUCKET}  # fmt: skip
    assert records[1]["problem"]["tokens"] == 8
    read = read_shapes(shapes.read_text(), str(shapes))
    assert [dict(s.problem)["tokens"] for s in read] == [16, 8]


@pytest.mark.usefixtures("cpu_kernels")
def test_opcheck_and_compile(client: FakeArtifactClient, fixtures: Path) -> None:
    client.serve("grouped_gemm", "rcr", BUCKET, DEVICE, build_fixture(fixtures, "GROUPED_GEMM"))
    torch.library.opcheck(torch.ops.tunehub.grouped_mm, operands(COUNTS[0]))  # the kernel
    torch.library.opcheck(torch.ops.tunehub.grouped_mm, operands(COUNTS[2]))  # not tuned
    tunehub_torch.reset()
    a, w, offs = operands(COUNTS[1])

    def moe(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return tunehub_torch.grouped_mm(a, w, offs).float().relu()

    with torch.inference_mode():
        got = torch.compile(moe, fullgraph=True, backend="aot_eager")(a, w, offs)
    want = per_expert(a, w, COUNTS[1]).relu()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    (shape,) = tunehub_torch.stats().shapes
    assert shape.fallback is None and shape.tunehub_calls == 1
