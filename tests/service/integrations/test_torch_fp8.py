"""``scaled_mm`` (FP8 e4m3, ``tunehub::scaled_mm``) on the CPU: its tuned kernels are CUDA only,
so CPU tensors run ``torch._scaled_mm`` (or, where torch refuses, the dequantized product),
said once, asking nobody and recording nothing. The lookup and the launch are tested with the
CUDA-only rule lifted for CPU tensors (a test setting) against a test double of the client
whose artifact is the ABI test fixture's scaled_gemm: the problem asked and recorded, the
kernel's inputs (scale layouts) and output. tests/gpu/test_torch_ops.py runs the real thing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip("this torch has no float8_e4m3fn", allow_module_level=True)

import service.integrations.torch as tunehub_torch  # noqa: E402
from service.cli.tune_file import read_shapes  # noqa: E402
from service.integrations._torch_device import cpu_device_key  # noqa: E402
from service.integrations._torch_runtime import (  # noqa: E402
    SCALED_OUT_CODES,
    SCALING_CODES,
    problem_of,
)
from tests.service.integrations.torch_helpers import (  # noqa: E402
    FakeArtifactClient,
    build_fixture,
)
from tuner.abi import abi_dims  # noqa: E402
from tuner.fp8 import OUT_DTYPE_CODES  # noqa: E402
from tuner.fp8 import SCALING_CODES as TUNER_SCALING_CODES  # noqa: E402
from tuner.problems import ScaledGemmProblem  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

DEVICE = cpu_device_key()
FP8 = torch.float8_e4m3fn
RUNTIME_LOG = "service.integrations._torch_runtime"
FP8_LOG = "service.integrations._torch_fp8"
M, N, K = 8, 256, 256


def quantized(scaling: str, m: int = M, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """a [m, K], b [N, K] e4m3 and their float32 scales (block: a [m, K/128] with strides
    (1, m), as torch._scaled_mm's 1x128 scales; b [N/128, K/128])."""
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(m, K, generator=g) * 2 - 1
    b = torch.rand(N, K, generator=g) * 2 - 1
    if scaling == "per_tensor":
        sa, sb = a.abs().amax() / 448, b.abs().amax() / 448
        return (a / sa).to(FP8), (b / sb).to(FP8), sa, sb
    # a random factor (0.25..4) per scale group, as tuner.fp8 does: a scale read from the
    # wrong place changes the answer
    a = a.view(m, K // 128, 128) * (torch.rand(m, K // 128, 1, generator=g) * 3.75 + 0.25)
    a = a.view(m, K)
    b = b.view(N // 128, 128, K // 128, 128)
    b = (b * (torch.rand(N // 128, 1, K // 128, 1, generator=g) * 3.75 + 0.25)).view(N, K)
    sa = a.view(m, K // 128, 128).abs().amax(-1) / 448  # [m, K/128]
    sb = b.view(N // 128, 128, K // 128, 128).abs().amax((1, 3)) / 448
    qa = (a.view(m, K // 128, 128) / sa[..., None]).to(FP8).view(m, K)
    qb = (b.view(N // 128, 128, K // 128, 128) / sb[:, None, :, None]).to(FP8).view(N, K)
    return qa, qb, sa.t().contiguous().t(), sb


def dequantized_product(a, b, sa, sb, scaling: str) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """An independent float64 reference: each element times its own scale, looked up."""
    fa, fb = a.double(), b.double()
    if scaling == "per_tensor":
        return (fa * float(sa)) @ (fb * float(sb)).t()
    rows = torch.arange(a.shape[0])[:, None]
    ka = torch.arange(K)[None, :] // 128
    fa = fa * sa.double()[rows, ka]
    fb = fb * sb.double()[torch.arange(N)[:, None] // 128, ka]
    return fa @ fb.t()


def test_codes_and_problem_agree_with_tuner() -> None:
    assert dict(zip(SCALED_OUT_CODES, range(2), strict=True)) == OUT_DTYPE_CODES
    assert dict(zip(SCALING_CODES, range(2), strict=True)) == TUNER_SCALING_CODES
    assert tunehub_torch.SCALINGS == tuple(TUNER_SCALING_CODES)
    for out_dtype in OUT_DTYPE_CODES:
        for scaling in TUNER_SCALING_CODES:
            problem = ScaledGemmProblem(16, 4096, 4096, out_dtype=out_dtype, scaling=scaling)
            assert problem_of("scaled_gemm", abi_dims(problem)) == problem.dims()


def test_cpu_tensors_run_torch_scaled_mm_said_once(
    client: FakeArtifactClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b, sa, sb = quantized("per_tensor")
    with tunehub_torch.record(tmp_path / "shapes.jsonl") as recorder, torch.inference_mode():
        for _ in range(3):
            got = tunehub_torch.scaled_mm(a, b, sa, sb)
    want = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    (message,) = [r.getMessage() for r in caplog.records if r.name == RUNTIME_LOG]
    assert "cpu tensors (scaled_gemm has CUDA kernels only)" in message
    assert tunehub_torch.stats().ops["scaled_gemm"].reasons == {"unsupported": 3}
    assert client.best_calls == 0 and recorder.written == 0  # nobody asked, nothing to tune


def test_block_scales_torch_refuses_run_the_dequantized_product(
    client: FakeArtifactClient, caplog: pytest.LogCaptureFixture
) -> None:
    a, b, sa, sb = quantized("block")
    with torch.inference_mode():
        for _ in range(2):
            got = tunehub_torch.scaled_mm(a, b, sa, sb, torch.float16, "block")
    want = dequantized_product(a, b, sa, sb, "block")
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2)
    assert got.dtype == torch.float16
    said = [r.getMessage() for r in caplog.records if r.name == FP8_LOG]
    assert len(said) == 1 and "torch._scaled_mm refused block scaled_mm" in said[0]


def test_bad_operands_are_value_errors(client: FakeArtifactClient) -> None:
    a, b, sa, sb = quantized("per_tensor")
    with pytest.raises(ValueError, match="scaling must be one of"):
        tunehub_torch.scaled_mm(a, b, sa, sb, scaling="rowwise")
    with pytest.raises(ValueError, match=r"a \[m, k\] and b \[n, k\]"):
        tunehub_torch.scaled_mm(a[:, :128], b, sa, sb)
    with pytest.raises(ValueError, match="per_tensor scales must be one value each"):
        tunehub_torch.scaled_mm(a, b, sa.expand(M), sb)
    with pytest.raises(ValueError, match=r"block scales must be \(8, 2\) and \(2, 2\)"):
        tunehub_torch.scaled_mm(a, b, sa.reshape(1), sb.reshape(1), scaling="block")
    with pytest.raises(ValueError, match="scales must be float32"):
        tunehub_torch.scaled_mm(a, b, sa.half(), sb)


@pytest.mark.usefixtures("cpu_kernels")
@pytest.mark.parametrize("scaling", ["per_tensor", "block"])
def test_the_kernel_gets_the_problem_and_the_scale_layouts(
    client: FakeArtifactClient, fixtures: Path, scaling: str
) -> None:
    problem = {"m": M, "n": N, "k": K, "out_dtype": "bf16", "scaling": scaling}
    client.serve("scaled_gemm", "rcr", problem, DEVICE, build_fixture(fixtures, "SCALED_GEMM"))
    a, b, sa, sb = quantized(scaling, seed=1)
    with torch.inference_mode():
        got = tunehub_torch.scaled_mm(a, b, sa, sb, torch.bfloat16, scaling)
        # the same scales in row-major memory: made M-major for the kernel, same answer
        again = tunehub_torch.scaled_mm(a, b, sa.contiguous(), sb, torch.bfloat16, scaling)
    want = dequantized_product(a, b, sa, sb, scaling)
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2)
    assert torch.equal(got, again) and got.dtype == torch.bfloat16
    (shape,) = tunehub_torch.stats().shapes
    assert (shape.op, shape.dtype, shape.layout, shape.problem) == (
        "scaled_gemm", "e4m3", "rcr", problem,
    )  # fmt: skip
    assert shape.fallback is None and shape.tunehub_calls == 2
    assert list(client.disk) == [("scaled_gemm", "rcr", tuple(sorted(problem.items())), DEVICE)]


@pytest.mark.usefixtures("cpu_kernels")
def test_untuned_and_refused_shapes_are_recorded(
    client: FakeArtifactClient, fixtures: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """f16 out: the variant refuses it (a variant is built for one output dtype); m=4: not
    tuned. Each is said once, runs torch's op, and is recorded for tune --from-file."""
    library = build_fixture(fixtures, "SCALED_GEMM")
    served = {"m": M, "n": N, "k": K, "out_dtype": "f16", "scaling": "per_tensor"}
    client.serve("scaled_gemm", "rcr", served, DEVICE, library)
    a, b, sa, sb = quantized("per_tensor", seed=2)
    shapes = tmp_path / "shapes.jsonl"
    with tunehub_torch.record(shapes) as recorder, torch.inference_mode():
        for _ in range(2):
            f16 = tunehub_torch.scaled_mm(a, b, sa, sb, torch.float16)
            small = tunehub_torch.scaled_mm(a[:4], b, sa, sb)
    assert torch.equal(f16, torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float16))
    assert torch.equal(small, torch._scaled_mm(a[:4], b.t(), sa, sb, out_dtype=torch.bfloat16))
    said = [r.getMessage() for r in caplog.records if r.name == RUNTIME_LOG]
    assert len(said) == 2
    assert "refused: unsupported shape (3)" in said[0] and "not tuned yet" in said[1]
    assert tunehub_torch.stats().ops["scaled_gemm"].reasons == {"refused": 2, "not_tuned": 2}
    assert recorder.written == 2
    records = [json.loads(line) for line in shapes.read_text().splitlines()]
    assert records[1] == {"op": "scaled_gemm", "dtype": "e4m3", "layout": "rcr", "device": DEVICE,
                          "problem": {"m": 4, "n": N, "k": K, "out_dtype": "bf16",
                                      "scaling": "per_tensor"}}  # fmt: skip
    read = read_shapes(shapes.read_text(), str(shapes))
    assert [dict(s.problem)["out_dtype"] for s in read] == ["f16", "bf16"]


@pytest.mark.usefixtures("cpu_kernels")
def test_opcheck_and_compile(client: FakeArtifactClient, fixtures: Path) -> None:
    """Schema, fake and real kernel agree on the kernel path and torch's; the op traces into
    torch.compile(fullgraph=True) and runs the kernel when the graph runs."""
    problem = {"m": M, "n": N, "k": K, "out_dtype": "bf16", "scaling": "block"}
    client.serve("scaled_gemm", "rcr", problem, DEVICE, build_fixture(fixtures, "SCALED_GEMM"))
    block = quantized("block", seed=3)
    plain = quantized("per_tensor", seed=3)
    # opcheck's test_schema compares inputs before and after with arithmetic that float8
    # tensors lack on the CPU ("mul_cpu_reduced_float" not implemented); the rest runs
    utils = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")
    for args in ((*block, torch.bfloat16, "block"), (*plain, torch.float16, "per_tensor")):
        torch.library.opcheck(torch.ops.tunehub.scaled_mm, args, test_utils=utils)

    def layer(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor):  # type: ignore[no-untyped-def]
        return tunehub_torch.scaled_mm(a, b, sa, sb, torch.bfloat16, "block").float().relu()

    tunehub_torch.reset()
    with torch.inference_mode():
        got = torch.compile(layer, fullgraph=True, backend="aot_eager")(*block)
    torch.testing.assert_close(got.double(), dequantized_product(*block, "block").relu(),
                               rtol=1e-2, atol=1e-2)  # fmt: skip
    (shape,) = tunehub_torch.stats().shapes
    assert shape.fallback is None and shape.tunehub_calls == 1
