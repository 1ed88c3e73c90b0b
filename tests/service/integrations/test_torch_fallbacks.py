"""Every reason a tunehub op runs torch's op instead: said once per shape (one warning),
counted per call, and for the untunable-yet ones recorded for ``tunehub tune --from-file``.
Answers come from a test double of the client; kernels are the compiled ABI test fixture."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import service.integrations.torch as tunehub_torch  # noqa: E402
from service.integrations._torch_device import cpu_device_key  # noqa: E402
from service.integrations._torch_record import ShapeRecorder  # noqa: E402
from service.integrations._torch_runtime import Runtime  # noqa: E402
from tests.service.integrations.torch_helpers import (  # noqa: E402
    RMS_NORM_KNOWN,
    FakeArtifactClient,
    build_fixture,
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

DEVICE = cpu_device_key()
RUNTIME_LOG = "service.integrations._torch_runtime"


def linear_calls(m: int, times: int = 3) -> torch.Tensor:
    torch.manual_seed(m)
    x, w = torch.randn(m, 8), torch.randn(7, 8)
    with torch.inference_mode():
        for _ in range(times):
            y = tunehub_torch.linear(x, w)
    torch.testing.assert_close(y, F.linear(x, w))
    return y


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == RUNTIME_LOG]


def only_shape() -> tunehub_torch.ShapeStat:
    (shape,) = tunehub_torch.stats().shapes
    return shape


def test_not_tuned(client: FakeArtifactClient, caplog: pytest.LogCaptureFixture) -> None:
    linear_calls(4)
    (message,) = warnings_of(caplog)
    assert "gemm f32 m=4,n=7,k=8" in message and "not tuned yet" in message
    shape = only_shape()
    assert (shape.fallback_calls, shape.tunehub_calls) == (3, 0)
    assert shape.source == "fallback: not tuned yet for this device"
    assert tunehub_torch.stats().ops["gemm"].reasons == {"not_tuned": 3}
    assert client.best_calls == 1  # asked once, not per call


def test_too_far_unless_the_bound_is_raised(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    problem = {"m": 4, "n": 7, "k": 8}
    tuned = {"m": 64, "n": 7, "k": 8}
    client.serve("gemm", "rcr", problem, DEVICE, build_fixture(fixtures, "GEMM_RCR"),
                 exact=False, distance=4.0, tuned_problem=tuned)  # fmt: skip
    linear_calls(4)
    (message,) = warnings_of(caplog)
    assert "nearest tuned shape (m=64,n=7,k=8) is at log2 distance 4.00, beyond 2" in message
    assert only_shape().fallback is not None and only_shape().fallback.reason == "too_far"

    tunehub_torch.configure(max_distance=5.0)  # resolves again, with the wider bound
    linear_calls(4)
    shape = only_shape()
    assert shape.fallback is None and shape.tunehub_calls == 3
    assert (shape.exact, shape.distance) == (False, 4.0)
    assert "nearest at 4.00" in tunehub_torch.stats().format()


def test_can_run_refuses(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    library = build_fixture(fixtures, "GEMM_RCR", k_multiple=16)
    client.serve("gemm", "rcr", {"m": 4, "n": 7, "k": 8}, DEVICE, library)
    linear_calls(4)
    (message,) = warnings_of(caplog)
    assert "tunehub_can_run refused: misaligned (2)" in message
    assert only_shape().fallback_calls == 3


def test_no_artifact_and_no_way_to_build(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    answer = client.serve("gemm", "rcr", {"m": 4, "n": 7, "k": 8}, DEVICE,
                          build_fixture(fixtures, "GEMM_RCR"))  # fmt: skip
    answer.artifact = None
    tunehub_torch.configure(load="auto")  # the artifact, else the source: neither is there
    linear_calls(4)
    (message,) = warnings_of(caplog)
    assert "artifact: the answer names no artifact" in message
    assert "source build: HTTP 404" in message
    assert only_shape().fallback.reason == "no_library"  # type: ignore[union-attr]


def test_tampered_artifact_is_refused(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client.serve("gemm", "rcr", {"m": 4, "n": 7, "k": 8}, DEVICE,
                 build_fixture(fixtures, "GEMM_RCR"))  # fmt: skip
    client.corrupt = True
    linear_calls(4)
    (message,) = warnings_of(caplog)
    assert "sha256 mismatch" in message
    assert only_shape().fallback.reason == "no_library"  # type: ignore[union-attr]


def test_run_fails(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    library = build_fixture(fixtures, "GEMM_RCR", run_fails=True)
    client.serve("gemm", "rcr", {"m": 4, "n": 7, "k": 8}, DEVICE, library)
    linear_calls(4)
    (message,) = warnings_of(caplog)
    assert "tunehub_run: launch failed (5)" in message
    assert only_shape().fallback_calls == 3


def test_service_down(
    client: FakeArtifactClient, fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client.serve("gemm", "rcr", {"m": 4, "n": 7, "k": 8}, DEVICE,
                 build_fixture(fixtures, "GEMM_RCR"))  # fmt: skip
    linear_calls(4)  # the answer is now on "disk"
    client.down = True
    tunehub_torch.reset()
    linear_calls(4)
    linear_calls(5)  # never answered: nothing cached
    linear_calls(6)  # the service is known to be down: not asked again
    shapes = tunehub_torch.stats().shapes
    assert shapes[0].source == "on-disk cache" and shapes[0].tunehub_calls == 3
    assert [s.fallback.reason for s in shapes[1:]] == ["unreachable"] * 2  # type: ignore[union-attr]
    assert "cannot reach tunehub" in shapes[1].source and "nothing cached" in shapes[1].source
    assert client.best_calls == 2  # the first answer, and m=5 found the service down
    assert len(warnings_of(caplog)) == 2


def test_no_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNEHUB_SERVER", raising=False)
    tunehub_torch.reset(configuration=True)
    try:
        linear_calls(4)
        (message,) = warnings_of(caplog)
        assert "no tunehub server configured" in message
    finally:
        tunehub_torch.reset(configuration=True)


def test_unsupported_calls_are_said_once_and_counted(
    client: FakeArtifactClient, caplog: pytest.LogCaptureFixture
) -> None:
    x = torch.randn(4, 8)
    with torch.inference_mode():
        for _ in range(2):
            torch.testing.assert_close(tunehub_torch.softmax(x, dim=0), torch.softmax(x, 0))
            y64 = tunehub_torch.linear(x.double(), torch.randn(7, 8).double())
            assert y64.dtype == torch.float64
            tunehub_torch.conv2d(torch.randn(1, 4, 5, 5), torch.randn(4, 2, 3, 3), groups=2)
    ints = tunehub_torch.sum(torch.ones(3, 4, dtype=torch.int32))
    assert ints.dtype == torch.int64 and ints.tolist() == [4, 4, 4]
    w = torch.randn(7, 8, requires_grad=True)
    tunehub_torch.linear(x, w).sum().backward()  # autograd: torch's op, gradients flow
    assert w.grad is not None
    messages = warnings_of(caplog)
    assert len(messages) == 5, messages
    assert any("dim 0" in m for m in messages) and any("torch.float64" in m for m in messages)
    assert any("groups != 1" in m for m in messages) and any("autograd" in m for m in messages)
    counts = tunehub_torch.stats().ops
    assert counts["softmax"].reasons == {"unsupported": 2}
    assert counts["gemm"].reasons == {"unsupported": 3}
    assert client.best_calls == 0  # nobody was asked about calls tunehub has no kernel for


@pytest.mark.skipif(RMS_NORM_KNOWN, reason="this tunehub knows rms_norm")
def test_an_op_the_service_does_not_know(
    client: FakeArtifactClient, caplog: pytest.LogCaptureFixture
) -> None:
    x, w = torch.randn(4, 8), torch.rand(8)
    with torch.inference_mode():
        y = tunehub_torch.rms_norm(x, w, 1e-6)
    torch.testing.assert_close(y, tunehub_torch.rms_norm_reference(x, w, 1e-6))
    (message,) = warnings_of(caplog)
    assert "this tunehub cannot ask for it" in message


def test_record_writes_untuned_shapes_once(
    client: FakeArtifactClient, fixtures: Path, tmp_path: Path
) -> None:
    client.serve("gemm", "rcr", {"m": 4, "n": 7, "k": 8}, DEVICE,
                 build_fixture(fixtures, "GEMM_RCR"))  # fmt: skip
    path = tmp_path / "shapes.jsonl"
    linear_calls(5)  # untuned before the block: recorded when it starts
    with tunehub_torch.record(path) as recorder:
        linear_calls(4)  # tuned: not recorded
        linear_calls(6)
        linear_calls(6)
        with torch.inference_mode():
            tunehub_torch.softmax(torch.randn(3, 8), dim=0)  # unsupported: not recorded
    linear_calls(7)  # after the block: not recorded
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["problem"] for r in lines] == [{"m": 5, "n": 7, "k": 8}, {"m": 6, "n": 7, "k": 8}]
    assert lines[0] == {"op": "gemm", "dtype": "f32", "layout": "rcr",
                        "problem": {"m": 5, "n": 7, "k": 8}, "device": DEVICE}  # fmt: skip
    assert recorder.written == 2
    # a second recording into the same file adds only what it lacks
    tunehub_torch.reset()
    with tunehub_torch.record(path) as again:
        linear_calls(5)
        linear_calls(7)
    assert again.written == 1
    assert len(path.read_text().splitlines()) == 3


def test_record_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "env.jsonl"
    monkeypatch.setenv("TUNEHUB_RECORD", str(path))
    runtime = Runtime()
    assert runtime.config.load == "auto"  # the environment is read on first use
    (recorder,) = runtime.recorders
    assert isinstance(recorder, ShapeRecorder) and recorder.path == path
    stat = tunehub_torch.ShapeStat("softmax", "f32", "row", {"m": 2, "k": 3}, DEVICE, "")
    runtime.fell_back(stat, tunehub_torch.Fallback("not_tuned", "not tuned yet"))
    runtime.fell_back(stat, tunehub_torch.Fallback("not_tuned", "not tuned yet"))
    assert len(path.read_text().splitlines()) == 1
    monkeypatch.delenv("TUNEHUB_RECORD")
    runtime.reset(configuration=True)
    assert runtime.config is not None and runtime.recorders == []  # read again: off


def test_stats_format_names_sources_and_reasons(client: FakeArtifactClient, fixtures: Path) -> None:
    client.serve("gemm", "rcr", {"m": 4, "n": 7, "k": 8}, DEVICE,
                 build_fixture(fixtures, "GEMM_RCR"))  # fmt: skip
    linear_calls(4, times=2)
    linear_calls(5, times=1)
    text = tunehub_torch.stats().format()
    assert "gemm: 2 calls on tunehub kernels, 1 on torch (not_tuned 1)" in text
    assert "gemm f32 m=4,n=7,k=8 x2: artifact [gemm_fixture-gemm_rcr-" in text
    assert "gemm f32 m=5,n=7,k=8 x1: fallback: not tuned yet" in text


def test_operands_torch_refuses_raise_torchs_error(
    client: FakeArtifactClient, fixtures: Path
) -> None:
    """A served shape whose operands do not fit never reaches the kernel: torch raises."""
    client.serve("gemm", "rcr", {"m": 4, "n": 7, "k": 8}, DEVICE,
                 build_fixture(fixtures, "GEMM_RCR"))  # fmt: skip
    x = torch.randn(4, 8)
    with torch.inference_mode():
        with pytest.raises(RuntimeError):
            tunehub_torch.linear(x, torch.randn(7, 9))  # k differs
        with pytest.raises(RuntimeError):
            tunehub_torch.linear(x, torch.randn(7, 8), torch.randn(3))  # bias of 3 for n = 7
        with pytest.raises(RuntimeError):
            tunehub_torch.matmul(x, torch.randn(9, 7))
        with pytest.raises(RuntimeError):
            image = torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last)
            tunehub_torch.conv2d(image, torch.randn(4, 5, 3, 3))  # 5 filter channels for 3
        with pytest.raises(RuntimeError, match="same dtype"):
            tunehub_torch.linear(x, torch.randn(7, 8, dtype=torch.float64))
    assert client.best_calls == 0
    (shape,) = tunehub_torch.stats().shapes
    assert shape.fallback is not None and "different dtypes" in shape.fallback.message
