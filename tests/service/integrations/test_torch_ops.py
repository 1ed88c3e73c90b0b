"""The ``tunehub::*`` ops on f32 CPU tensors against torch: answers from a test double of the
client whose artifacts are the compiled ABI test fixture; the steady state asks nobody; the
custom ops pass torch.library.opcheck and run under torch.compile(fullgraph=True)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import service.integrations.torch as tunehub_torch  # noqa: E402
from service.integrations._torch_device import cpu_device_key  # noqa: E402
from service.integrations._torch_ops import eps_bits  # noqa: E402
from tests.service.integrations.torch_helpers import (  # noqa: E402
    RMS_NORM_KNOWN,
    FakeArtifactClient,
    build_fixture,
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

DEVICE = cpu_device_key()
EPS = 1e-5
#: TinyModel's shapes with an answer (rms_norm: once this tunehub knows the op)
TUNED = 5 if RMS_NORM_KNOWN else 4


def serve_all(client: FakeArtifactClient, fixtures: Path) -> None:
    """Answers for the shapes of TinyModel and of the op tests below."""
    gemm = build_fixture(fixtures, "GEMM_RCR", workspace=32)
    for m, n, k in ((6, 16, 8), (6, 8, 16), (4, 7, 8)):
        client.serve("gemm", "rcr", {"m": m, "n": n, "k": k}, DEVICE, gemm)
    client.serve("gemm", "rrr", {"m": 4, "n": 7, "k": 8}, DEVICE,
                 build_fixture(fixtures, "GEMM_RRR"))  # fmt: skip
    client.serve("softmax", "row", {"m": 6, "k": 16}, DEVICE, build_fixture(fixtures, "SOFTMAX"))
    client.serve("reduce", "row", {"m": 6, "k": 8, "kind": "sum"}, DEVICE,
                 build_fixture(fixtures, "SUM"))  # fmt: skip
    if RMS_NORM_KNOWN:
        client.serve("rms_norm", "row", {"m": 6, "k": 8}, DEVICE,
                     build_fixture(fixtures, "RMS_NORM"))  # fmt: skip
    conv = {"n": 2, "h": 9, "w": 7, "c": 3, "k": 4, "r": 3, "s": 3, "stride": 2, "pad": 1,
            "dilation": 1}  # fmt: skip
    client.serve("conv2d", "nhwc", conv, DEVICE, build_fixture(fixtures, "CONV2D"))


class TinyModel(nn.Module):
    """linear -> rms_norm -> linear -> softmax, and a row sum: the shapes served above."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8, bias=False)
        self.norm = nn.RMSNorm(8, eps=EPS)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = tunehub_torch.linear(tunehub_torch.rms_norm(x, self.norm.weight, EPS), self.up.weight,
                                 self.up.bias)  # fmt: skip
        probs = tunehub_torch.softmax(h, dim=-1)
        y = tunehub_torch.linear(probs, self.down.weight)
        return y, tunehub_torch.sum(y, dim=-1)

    def reference(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.linear(tunehub_torch.rms_norm_reference(x, self.norm.weight, EPS), self.up.weight,
                     self.up.bias)  # fmt: skip
        y = F.linear(torch.softmax(h, dim=-1), self.down.weight)
        return y, y.sum(-1)


def model_and_input() -> tuple[TinyModel, torch.Tensor]:
    torch.manual_seed(0)
    model = TinyModel()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
    return model, torch.randn(2, 3, 8)


def test_each_op_matches_torch(client: FakeArtifactClient, fixtures: Path) -> None:
    serve_all(client, fixtures)
    torch.manual_seed(1)
    x, w, b = torch.randn(4, 8), torch.randn(7, 8), torch.randn(7)
    with torch.inference_mode():
        torch.testing.assert_close(tunehub_torch.linear(x, w, b), F.linear(x, w, b))
        rhs = torch.randn(8, 7)
        torch.testing.assert_close(tunehub_torch.matmul(x, rhs), x @ rhs)
        h = torch.randn(2, 3, 16)
        torch.testing.assert_close(tunehub_torch.softmax(h), torch.softmax(h, -1))
        s = torch.randn(6, 8)
        torch.testing.assert_close(tunehub_torch.sum(s), s.sum(-1))
        torch.testing.assert_close(tunehub_torch.sum(s, keepdim=True), s.sum(-1, keepdim=True))
        g = torch.rand(8) + 0.5
        torch.testing.assert_close(
            tunehub_torch.rms_norm(s, g, EPS), tunehub_torch.rms_norm_reference(s, g, EPS)
        )
        image = torch.randn(2, 3, 9, 7).to(memory_format=torch.channels_last)
        kernel = torch.randn(4, 3, 3, 3).to(memory_format=torch.channels_last)
        bias = torch.randn(4)
        y = tunehub_torch.conv2d(image, kernel, stride=2, padding=1, bias=bias)
        torch.testing.assert_close(y, F.conv2d(image, kernel, bias, stride=2, padding=1))
        assert y.is_contiguous(memory_format=torch.channels_last)
        # an NCHW-contiguous input is made channels_last for the kernel
        torch.testing.assert_close(
            tunehub_torch.conv2d(image.contiguous(), kernel.contiguous(), 2, 1, bias=bias),
            F.conv2d(image, kernel, bias, stride=2, padding=1),
        )
    stats = tunehub_torch.stats()
    tuned = [s for s in stats.shapes if RMS_NORM_KNOWN or s.op != "rms_norm"]
    assert all(s.fallback is None for s in tuned), stats.format()
    assert {s.source for s in tuned} == {"artifact"}
    assert stats.ops["gemm"].tunehub == 2 and stats.ops["conv2d"].tunehub == 2
    assert stats.ops["reduce"].tunehub == 2
    assert stats.ops["rms_norm"].tunehub == (1 if RMS_NORM_KNOWN else 0)


def test_steady_state_asks_nobody(client: FakeArtifactClient, fixtures: Path) -> None:
    serve_all(client, fixtures)
    model, x = model_and_input()
    with torch.inference_mode():
        first = model(x)
        asked, fetched = client.best_calls, client.fetches
        assert asked == TUNED  # gemm x2, rms_norm, softmax, reduce: once each
        assert fetched == TUNED - 1  # the two gemm shapes share one library
        for _ in range(3):
            again = model(x)
    assert (client.best_calls, client.fetches) == (asked, fetched)
    for got, want, same in zip(again, model.reference(x), first, strict=True):
        torch.testing.assert_close(got, want)
        assert torch.equal(got, same)
    calls = [s.tunehub_calls for s in tunehub_torch.stats().shapes if s.fallback is None]
    assert calls == [4] * TUNED


def test_a_new_process_loads_from_its_caches(client: FakeArtifactClient, fixtures: Path) -> None:
    """What a second run sees: the answer and the library on disk, the service down."""
    serve_all(client, fixtures)
    model, x = model_and_input()
    with torch.inference_mode():
        model(x)
        tunehub_torch.reset()  # as a fresh process would start
        client.down = True
        got = model(x)
    for a, b in zip(got, model.reference(x), strict=True):
        torch.testing.assert_close(a, b)
    sources = {s.source for s in tunehub_torch.stats().shapes if s.fallback is None}
    assert sources == {"on-disk cache"}


def test_custom_ops_pass_opcheck(client: FakeArtifactClient, fixtures: Path) -> None:
    """Schema, fake kernel and real kernel agree (shapes, dtypes, strides), on the tunehub
    path and on the fallback path (the 5x8 linear is not tuned)."""
    serve_all(client, fixtures)
    torch.manual_seed(2)
    s = torch.randn(6, 8)
    image = torch.randn(2, 3, 9, 7).to(memory_format=torch.channels_last)
    kernel = torch.randn(4, 3, 3, 3).to(memory_format=torch.channels_last)
    cases = [
        (torch.ops.tunehub.linear, (torch.randn(4, 8), torch.randn(7, 8), torch.randn(7))),
        (torch.ops.tunehub.linear, (torch.randn(5, 8), torch.randn(7, 8), None)),
        (torch.ops.tunehub.matmul, (torch.randn(4, 8), torch.randn(8, 7))),
        (torch.ops.tunehub.softmax, (torch.randn(6, 16),)),
        (torch.ops.tunehub.sum, (s,)),
        (torch.ops.tunehub.rms_norm, (s, torch.rand(8) + 0.5, EPS)),
        (torch.ops.tunehub.conv2d, (image, kernel, torch.randn(4), 2, 1, 1)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_compiled_model_runs_the_custom_ops(client: FakeArtifactClient, fixtures: Path) -> None:
    serve_all(client, fixtures)
    model, x = model_and_input()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.inference_mode():
        got = compiled(x)
    for a, b in zip(got, model.reference(x), strict=True):
        torch.testing.assert_close(a, b)
    # the graph called the ops: the kernels ran (counted at run time, not at trace time)
    calls = [s.tunehub_calls for s in tunehub_torch.stats().shapes if s.fallback is None]
    assert calls == [1] * TUNED


def test_compiled_model_with_inductor(client: FakeArtifactClient, fixtures: Path) -> None:
    serve_all(client, fixtures)
    model, x = model_and_input()
    with torch.inference_mode():
        got = torch.compile(model, fullgraph=True)(x)
    for a, b in zip(got, model.reference(x), strict=True):
        torch.testing.assert_close(a, b)
    calls = [s.tunehub_calls for s in tunehub_torch.stats().shapes if s.fallback is None]
    assert calls == [1] * TUNED


def test_patch_swaps_module_classes(client: FakeArtifactClient, fixtures: Path) -> None:
    serve_all(client, fixtures)
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 7), nn.Softmax(dim=-1))
    keys = list(model.state_dict())
    x = torch.randn(4, 8)
    with torch.inference_mode():
        want = model(x)
        tunehub_torch.patch(model, ops=("linear",))
        assert type(model[0]) is tunehub_torch.TunehubLinear and type(model[1]) is nn.Softmax
        got = model(x)
    torch.testing.assert_close(got, want)
    assert list(model.state_dict()) == keys
    assert tunehub_torch.stats().ops["gemm"].tunehub == 1
    tunehub_torch.unpatch(model)
    assert type(model[0]) is nn.Linear
    with pytest.raises(ValueError, match="cannot patch"):
        tunehub_torch.patch(model, ops=("attention",))


def test_conv2d_takes_the_briefs_order_and_patches_conv_modules(
    client: FakeArtifactClient, fixtures: Path
) -> None:
    serve_all(client, fixtures)
    torch.manual_seed(4)
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1).to(memory_format=torch.channels_last)
    image = torch.randn(2, 3, 9, 7).to(memory_format=torch.channels_last)
    with torch.inference_mode():
        want = conv(image)
        plain = tunehub_torch.conv2d(image, conv.weight, 2, 1, 1)  # as the model bench calls it
        torch.testing.assert_close(plain + conv.bias.view(1, -1, 1, 1), want)
        tunehub_torch.patch(conv)
        assert type(conv) is tunehub_torch.TunehubConv2d
        torch.testing.assert_close(conv(image), want)
        with pytest.raises(TypeError, match="bias=None"):
            tunehub_torch.conv2d(image, conv.weight, conv.bias, 2, 1)  # F.conv2d's order
    stats = tunehub_torch.stats()
    assert stats.ops["conv2d"].tunehub == 2
    as_json = json.loads(json.dumps(stats.to_dict()))
    assert as_json["ops"]["conv2d"] == {"tunehub": 2, "fallback": 0, "reasons": {}}
    assert as_json["shapes"][0]["source"] == "artifact"
    assert str(stats) == stats.format()


def test_eps_bits() -> None:
    assert eps_bits(1e-5) == 0x3727C5AC
    assert eps_bits(1e-6) == 0x358637BD == 897988541
    assert eps_bits(0.0) == 0
    for refused in (-1e-6, float("inf"), float("nan"), 1e39):
        assert eps_bits(refused) is None
