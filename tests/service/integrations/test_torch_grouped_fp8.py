"""``scaled_grouped_mm`` (FP8 e4m3 mixture-of-experts grouped GEMM with rowwise scales,
``tunehub::scaled_grouped_mm``) on the CPU: its tuned kernels are CUDA only, so CPU tensors run
``torch._scaled_grouped_mm``, which this torch has no CPU kernel for: the dequantized float32
product runs, each said once. The bucket asked (grouped_gemm, dtype e4m3), the per-call counts
and the launch with both scales are tested with the CUDA-only rule lifted for CPU tensors (a
test setting) against a test double of the client whose artifact is the ABI test fixture's
grouped_gemm in e4m3. tests/gpu/test_torch_scaled_grouped_mm.py runs the real thing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_grouped_mm"):
    pytest.skip("this torch has no float8_e4m3fn or _scaled_grouped_mm", allow_module_level=True)

import service.integrations.torch as tunehub_torch  # noqa: E402
from service.cli.tune_file import read_shapes  # noqa: E402
from service.integrations import _torch_grouped_fp8  # noqa: E402
from service.integrations._torch_device import cpu_device_key  # noqa: E402
from service.integrations._torch_runtime import DTYPE_NAMES  # noqa: E402
from tests.service.integrations.torch_helpers import (  # noqa: E402
    FakeArtifactClient,
    build_fixture,
)
from tuner.problems import FP8_K_ALIGN, GROUPED_FP8_OUT_DTYPE  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

DEVICE = cpu_device_key()
FP8 = torch.float8_e4m3fn
RUNTIME_LOG = "service.integrations._torch_runtime"
OP_LOG = "service.integrations._torch_grouped_fp8"
E, N, K = 4, 16, 32
#: two batches of one bucket (tokens 16, skew 2) and one of another (tokens 8)
COUNTS = ([3, 8, 1, 4], [5, 2, 6, 3], [2, 2, 2, 1])
BUCKET = {"experts": E, "n": N, "k": K, "tokens": 16, "skew": 2}


def fp8_fixture(folder: Path, **macros: int) -> Path:
    return build_fixture(folder, "GROUPED_GEMM", grouped_fp8=True, **macros)


def operands(counts: list[int], rows: int | None = None, n: int = N) -> tuple[torch.Tensor, ...]:
    """a [rows, K] and weight [E, n, K] e4m3 quantized per row as a quantizer does (a random
    factor 0.25..4 per row: a scale read from the wrong row changes the answer), their
    float32 scales a [rows] and b [E, n], and int32 cumulative offs."""
    g = torch.Generator().manual_seed(sum(counts) + n)
    rows = rows or sum(counts)

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=g) * 2 - 1

    def factor(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=g) * 3.75 + 0.25

    a, w = uniform(rows, K) * factor(rows, 1), uniform(E, n, K) * factor(E, n, 1)
    sa, sb = a.abs().amax(-1) / 448, w.abs().amax(-1) / 448
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    return (a / sa[:, None]).to(FP8), (w / sb[..., None]).to(FP8), sa, sb, offs


def dequantized_product(a, w, sa, sb, offs) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """An independent float64 reference: per expert, each row and column times its scale;
    rows past offs[-1] zero."""
    out = torch.zeros(a.shape[0], w.shape[1], dtype=torch.float64)
    start = 0
    for e, end in enumerate(offs.tolist()):
        rows = a[start:end].double() * sa[start:end, None].double()
        out[start:end] = rows @ (w[e].double() * sb[e][:, None].double()).t()
        start = end
    return out


def assert_product(got: torch.Tensor, args: tuple[torch.Tensor, ...]) -> None:
    torch.testing.assert_close(got.double(), dequantized_product(*args), rtol=1e-2, atol=2e-2)


def said(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_kernel_rules_agree_with_tuner() -> None:
    assert DTYPE_NAMES[_torch_grouped_fp8.OUT_DTYPE] == GROUPED_FP8_OUT_DTYPE
    assert _torch_grouped_fp8._ALIGN == FP8_K_ALIGN


def test_bad_operands_are_value_errors_naming_the_argument(client: FakeArtifactClient) -> None:
    a, w, sa, sb, offs = operands(COUNTS[0])
    op = tunehub_torch.scaled_grouped_mm
    with pytest.raises(ValueError, match="scaled_grouped_mm: a must be float8_e4m3fn"):
        op(a.to(torch.bfloat16), w, sa, sb, offs)
    with pytest.raises(ValueError, match="scaled_grouped_mm: weight must be float8_e4m3fn"):
        op(a, w.to(torch.bfloat16), sa, sb, offs)
    with pytest.raises(ValueError, match=r"scaled_grouped_mm takes a \[tokens, k\] and weight"):
        op(a, w[0], sa, sb, offs)
    with pytest.raises(ValueError, match=r"scale_a must be float32 \[tokens\] = \[16\]"):
        op(a, w, sa[:8], sb, offs)
    with pytest.raises(ValueError, match=r"scale_a must be float32 .* got torch.float16"):
        op(a, w, sa.half(), sb, offs)
    with pytest.raises(ValueError, match=r"scale_b must be float32 \[experts, n\] = \[4, 16\]"):
        op(a, w, sa, sb[:, 0], offs)
    with pytest.raises(ValueError, match="offs must be int32"):
        op(a, w, sa, sb, offs.long())
    with pytest.raises(ValueError, match="offs must be int32"):
        op(a, w, sa, sb, offs[:2])
    assert client.best_calls == 0


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_fake_kernel_shape_and_dtype(out_dtype: torch.dtype) -> None:
    meta = [t.to("meta") for t in operands(COUNTS[0], rows=20)]
    out = torch.ops.tunehub.scaled_grouped_mm(*meta, out_dtype)
    assert (out.device.type, tuple(out.shape), out.dtype) == ("meta", (20, N), out_dtype)
    assert out.is_contiguous()


def test_cpu_tensors_run_torch_or_the_dequantized_product_said_once(
    client: FakeArtifactClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    args = operands(COUNTS[0])
    with tunehub_torch.record(tmp_path / "shapes.jsonl") as recorder, torch.inference_mode():
        for _ in range(2):
            got = tunehub_torch.scaled_grouped_mm(*args)
    assert got.dtype == torch.bfloat16 and got.shape == (16, N)
    assert_product(got, args)
    (message,) = said(caplog, RUNTIME_LOG)
    assert "cpu tensors (grouped_gemm has CUDA kernels only)" in message
    assert tunehub_torch.stats().ops["grouped_gemm"].reasons == {"unsupported": 2}
    assert client.best_calls == 0 and recorder.written == 0  # nobody asked, nothing to tune
    try:
        a, w, sa, sb, offs = args
        torch._scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs=offs, out_dtype=got.dtype)
    except (RuntimeError, NotImplementedError):  # this torch has no CPU kernel: said once
        (refused,) = said(caplog, OP_LOG)
        assert refused.startswith("torch._scaled_grouped_mm refused scaled_grouped_mm "
                                  "experts=4,n=16,k=32 on cpu (")  # fmt: skip
        assert refused.endswith("); running the dequantized float32 product")
    else:  # a torch with a CPU kernel ran it: nothing else to say
        assert said(caplog, OP_LOG) == []


@pytest.mark.usefixtures("cpu_kernels")
def test_one_e4m3_bucket_serves_every_batch_in_it(
    client: FakeArtifactClient, fixtures: Path
) -> None:
    client.serve("grouped_gemm", "rcr", BUCKET, DEVICE, fp8_fixture(fixtures))
    with torch.inference_mode():
        for counts in COUNTS[:2]:
            args = operands(counts, rows=20)  # 4 rows past the routed 16
            got = tunehub_torch.scaled_grouped_mm(*args)
            assert got.dtype == torch.bfloat16
            assert_product(got, args)
            assert not got[16:].any()
    (shape,) = tunehub_torch.stats().shapes
    assert (shape.op, shape.dtype, shape.layout, shape.problem) == (
        "grouped_gemm", "e4m3", "rcr", BUCKET,
    )  # fmt: skip
    assert shape.fallback is None and shape.tunehub_calls == 2
    assert [(q.op, q.dtype, q.problem) for q in client.asked] == [("grouped_gemm", "e4m3", BUCKET)]
    assert list(client.disk) == [("grouped_gemm", "rcr", tuple(sorted(BUCKET.items())), DEVICE)]


@pytest.mark.usefixtures("cpu_kernels")
def test_out_dtypes_and_dims_the_kernels_do_not_take_fall_back(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """f16 out (the kernels write bf16) and n = 24 (not a multiple of 16) run torch's op
    (here the dequantized product), said once each, asking nobody."""
    client.serve("grouped_gemm", "rcr", BUCKET, DEVICE, fp8_fixture(fixtures))
    with torch.inference_mode():
        for _ in range(2):
            args = operands(COUNTS[0])
            a, w, sa, sb, offs = args
            f16 = tunehub_torch.scaled_grouped_mm(a, w, sa, sb, offs, out_dtype=torch.float16)
            assert f16.dtype == torch.float16
            assert_product(f16, args)
            narrow = operands(COUNTS[0], n=24)
            assert_product(tunehub_torch.scaled_grouped_mm(*narrow), narrow)
    messages = said(caplog, RUNTIME_LOG)
    assert len(messages) == 2
    assert "out_dtype torch.float16 (the e4m3 grouped_gemm kernels write bfloat16)" in messages[0]
    assert "n=24, k=32 (e4m3 grouped_gemm needs multiples of 16)" in messages[1]
    assert tunehub_torch.stats().ops["grouped_gemm"].reasons == {"unsupported": 4}
    assert client.best_calls == 0


@pytest.mark.usefixtures("cpu_kernels")
def test_grouped_mm_leaves_fp8_to_scaled_grouped_mm(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An e4m3 bucket is tuned, but grouped_mm has no scales to give its kernel: it asks
    nobody and runs torch._grouped_mm, which refuses FP8 itself."""
    client.serve("grouped_gemm", "rcr", BUCKET, DEVICE, fp8_fixture(fixtures))
    a, w, _, _, offs = operands(COUNTS[0])
    with pytest.raises(RuntimeError):
        tunehub_torch.grouped_mm(a, w, offs)
    (message,) = said(caplog, RUNTIME_LOG)
    assert "float8_e4m3fn operands (FP8 takes scales: scaled_grouped_mm)" in message
    assert client.best_calls == 0


@pytest.mark.usefixtures("cpu_kernels")
def test_untuned_buckets_are_recorded_as_e4m3(client: FakeArtifactClient, tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.jsonl"
    with tunehub_torch.record(shapes) as recorder, torch.inference_mode():
        for counts in COUNTS:
            tunehub_torch.scaled_grouped_mm(*operands(counts))
    assert recorder.written == 2  # two buckets
    records = [json.loads(line) for line in shapes.read_text().splitlines()]
    assert records[0] == {"op": "grouped_gemm", "dtype": "e4m3", "layout": "rcr",
                          "device": DEVICE, "problem": BUCKET}  # fmt: skip
    read = read_shapes(shapes.read_text(), str(shapes))
    assert [(s.dtype, dict(s.problem)["tokens"]) for s in read] == [("e4m3", 16), ("e4m3", 8)]


@pytest.mark.usefixtures("cpu_kernels")
def test_opcheck_and_compile(client: FakeArtifactClient, fixtures: Path) -> None:
    """Schema, fake and real kernel agree on the kernel path and the fallback; the op traces
    into torch.compile(fullgraph=True) and runs the kernel when the graph runs."""
    client.serve("grouped_gemm", "rcr", BUCKET, DEVICE, fp8_fixture(fixtures))
    # opcheck's test_schema compares inputs with arithmetic float8 lacks on the CPU (as
    # test_torch_fp8.py says); the rest runs
    utils = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")
    op = torch.ops.tunehub.scaled_grouped_mm
    torch.library.opcheck(op, (*operands(COUNTS[0]), torch.bfloat16), test_utils=utils)  # kernel
    torch.library.opcheck(op, (*operands(COUNTS[2]), torch.bfloat16), test_utils=utils)  # untuned
    tunehub_torch.reset()
    args = operands(COUNTS[1])

    def moe(a, w, sa, sb, offs):  # type: ignore[no-untyped-def]
        return tunehub_torch.scaled_grouped_mm(a, w, sa, sb, offs).float().relu()

    with torch.inference_mode():
        got = torch.compile(moe, fullgraph=True, backend="aot_eager")(*args)
    torch.testing.assert_close(got.double(), dequantized_product(*args).relu(),
                               rtol=1e-2, atol=2e-2)  # fmt: skip
    (shape,) = tunehub_torch.stats().shapes
    assert shape.fallback is None and shape.tunehub_calls == 1
