"""Fused linear ops (``linear(..., activation=...)``, ``tunehub::linear_<epilogue>``) on f32 CPU
tensors against torch's unfused pair: the epilogue is part of the shape key and of the problem
asked and recorded; answers come from a test double of the client whose artifacts are the
compiled ABI test fixture with a fused epilogue (the bias its third input, gated_silu's output
n/2 columns); the ops pass opcheck and run under torch.compile(fullgraph=True)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import service.integrations.torch as tunehub_torch  # noqa: E402
from service.cli.tune_file import read_shapes  # noqa: E402
from service.integrations._torch_device import cpu_device_key  # noqa: E402
from tests.service.integrations.torch_helpers import (  # noqa: E402
    FakeArtifactClient,
    build_fixture,
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

DEVICE = cpu_device_key()
RUNTIME_LOG = "service.integrations._torch_runtime"
#: activation -> (epilogue, the fixture's FIXTURE_EPILOGUE code)
FUSED = {
    "relu": ("bias_relu", 1),
    "gelu": ("bias_gelu", 2),
    "silu": ("bias_silu", 3),
    "gated_silu": ("gated_silu", 4),
}
M, N, K = 6, 16, 8


def serve_fused(client: FakeArtifactClient, fixtures: Path, m: int = M) -> None:
    for epilogue, code in FUSED.values():
        library = build_fixture(fixtures, "GEMM_RCR", epilogue=code)
        client.serve("gemm", "rcr", {"m": m, "n": N, "k": K, "epilogue": epilogue}, DEVICE,
                     library)  # fmt: skip


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, activation: str):
    y = F.linear(x, w, b)
    if activation == "gated_silu":
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up
    return {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[activation](y)


def operands(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    return torch.randn(2, 3, K), torch.randn(N, K), torch.randn(N)


@pytest.mark.parametrize("activation", list(FUSED))
def test_fused_linear_runs_the_fused_kernel(
    client: FakeArtifactClient, fixtures: Path, activation: str
) -> None:
    serve_fused(client, fixtures)
    x, w, b = operands()
    with torch.inference_mode():
        got = tunehub_torch.linear(x, w, b, activation=activation)
        no_bias = tunehub_torch.linear(x, w, activation=activation)  # zeros go to the kernel
    columns = N // 2 if activation == "gated_silu" else N
    assert got.shape == (2, 3, columns) and got.is_contiguous()
    torch.testing.assert_close(got, reference(x, w, b, activation))
    torch.testing.assert_close(no_bias, reference(x, w, None, activation))
    (shape,) = tunehub_torch.stats().shapes
    epilogue = FUSED[activation][0]
    assert shape.problem == {"m": M, "n": N, "k": K, "epilogue": epilogue}
    assert (shape.source, shape.tunehub_calls, shape.fallback_calls) == ("artifact", 2, 0)
    assert f"epilogue={epilogue}" in tunehub_torch.stats().format()


def test_plain_and_fused_shapes_are_different_keys(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the plain gemm is tuned: linear runs it, the fused call of the very same dims does
    not get the plain answer, it falls back (said once, counted per call)."""
    client.serve("gemm", "rcr", {"m": M, "n": N, "k": K}, DEVICE,
                 build_fixture(fixtures, "GEMM_RCR"))  # fmt: skip
    x, w, b = operands(1)
    with torch.inference_mode():
        plain = tunehub_torch.linear(x, w, b)
        for _ in range(3):
            fused = tunehub_torch.linear(x, w, b, activation="silu")
    torch.testing.assert_close(plain, F.linear(x, w, b))
    torch.testing.assert_close(fused, F.silu(F.linear(x, w, b)))
    plain_stat, fused_stat = tunehub_torch.stats().shapes
    assert plain_stat.fallback is None and plain_stat.tunehub_calls == 1
    assert fused_stat.fallback is not None and fused_stat.fallback.reason == "not_tuned"
    assert (fused_stat.tunehub_calls, fused_stat.fallback_calls) == (0, 3)
    messages = [r.getMessage() for r in caplog.records if r.name == RUNTIME_LOG]
    (message,) = messages
    assert f"gemm f32 m={M},n={N},k={K},epilogue=bias_silu" in message
    assert "not tuned yet" in message
    counts = tunehub_torch.stats().ops["gemm"]
    assert (counts.tunehub, counts.fallback, dict(counts.reasons)) == (1, 3, {"not_tuned": 3})
    assert client.best_calls == 2  # each key asked once


def test_fused_shapes_are_recorded_for_tune_from_file(
    client: FakeArtifactClient, tmp_path: Path
) -> None:
    x, w, b = operands(2)
    shapes = tmp_path / "shapes.jsonl"
    with tunehub_torch.record(shapes) as recorder, torch.inference_mode():
        for activation in FUSED:
            got = tunehub_torch.linear(x, w, b, activation=activation)
            torch.testing.assert_close(got, reference(x, w, b, activation))
        tunehub_torch.linear(x, w, b, activation="gelu")  # seen again: no second line
    assert recorder.written == len(FUSED)
    records = [json.loads(line) for line in shapes.read_text().splitlines()]
    assert [r["problem"]["epilogue"] for r in records] == [e for e, _ in FUSED.values()]
    assert records[0] == {"op": "gemm", "dtype": "f32", "layout": "rcr", "device": DEVICE,
                          "problem": {"m": M, "n": N, "k": K, "epilogue": "bias_relu"}}  # fmt: skip
    # what `tunehub tune --from-file` reads and posts: the fused problems, one job group
    read = read_shapes(shapes.read_text(), str(shapes))
    assert [dict(s.problem)["epilogue"] for s in read] == [e for e, _ in FUSED.values()]
    assert len({s.group() for s in read}) == 1
    assert read[0].query().problem == records[0]["problem"]


def test_arguments_tunehub_has_no_kernel_for(client: FakeArtifactClient, fixtures: Path) -> None:
    serve_fused(client, fixtures)
    x, w, b = operands(3)
    with pytest.raises(ValueError, match="activation must be one of"):
        tunehub_torch.linear(x, w, b, activation="tanh")
    with pytest.raises(ValueError, match="even number of rows"):
        tunehub_torch.linear(x, w[:7], b[:7], activation="gated_silu")
    # autograd: torch's unfused pair, with gradients
    w.requires_grad_(True)
    y = tunehub_torch.linear(x, w, b, activation="gelu")
    y.sum().backward()
    assert w.grad is not None
    w.requires_grad_(False)
    # another dtype: torch's pair, said as unsupported
    with torch.inference_mode():
        got = tunehub_torch.linear(x.double(), w.double(), b.double(), activation="relu")
    torch.testing.assert_close(got, F.relu(F.linear(x, w, b)).double())
    reasons = tunehub_torch.stats().ops["gemm"].reasons
    assert reasons == {"unsupported": 2}


def test_fused_ops_pass_opcheck(client: FakeArtifactClient, fixtures: Path) -> None:
    """Schema, fake kernel and real kernel agree, on the tunehub path (6 x 8 -> 16, served)
    and the fallback path (5 rows: not tuned), with and without a bias."""
    serve_fused(client, fixtures)
    torch.manual_seed(4)
    for epilogue, _ in FUSED.values():
        op = getattr(torch.ops.tunehub, f"linear_{epilogue}")
        for rows in (M, 5):
            torch.library.opcheck(op, (torch.randn(rows, K), torch.randn(N, K), torch.randn(N)))
        torch.library.opcheck(op, (torch.randn(M, K), torch.randn(N, K), None))
    tuned = [s for s in tunehub_torch.stats().shapes if s.fallback is None]
    assert len(tuned) == len(FUSED) and all(s.tunehub_calls > 0 for s in tuned)


class GatedMlp(torch.nn.Module):
    """A Llama-style MLP: merged gate_up projection with gated_silu, then the down projection
    with relu (a fused op each)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate_up = torch.nn.Linear(K, N)
        self.out = torch.nn.Linear(N // 2, N)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = tunehub_torch.linear(x, self.gate_up.weight, self.gate_up.bias,
                                 activation="gated_silu")  # fmt: skip
        return tunehub_torch.linear(h, self.out.weight, self.out.bias, activation="relu")

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        h = reference(x, self.gate_up.weight, self.gate_up.bias, "gated_silu")
        return reference(h, self.out.weight, self.out.bias, "relu")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_model_runs_the_fused_ops(
    client: FakeArtifactClient, fixtures: Path, backend: str
) -> None:
    serve_fused(client, fixtures)
    client.serve("gemm", "rcr", {"m": M, "n": N, "k": N // 2, "epilogue": "bias_relu"}, DEVICE,
                 build_fixture(fixtures, "GEMM_RCR", epilogue=1))  # fmt: skip
    torch.manual_seed(5)
    model = GatedMlp()
    x = torch.randn(2, 3, K)
    with torch.inference_mode():
        got = torch.compile(model, fullgraph=True, backend=backend)(x)
        want = model.reference(x)
    torch.testing.assert_close(got, want)
    shapes = tunehub_torch.stats().shapes
    assert [s.problem.get("epilogue") for s in shapes] == ["gated_silu", "bias_relu"]
    assert all(s.fallback is None and s.tunehub_calls == 1 for s in shapes)
