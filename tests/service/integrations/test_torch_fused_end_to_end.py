"""The whole loop for fused linear ops on the CPU, over real HTTP: a Llama-style MLP block
(merged gate_up projection with gated_silu, then a projection with bias + silu) on f32 CPU
tensors records its fused shapes (``epilogue`` in the problem); ``tunehub tune --from-file``
posts them and a real CPU worker (g++) tunes the CPU backend's fused gemm variants and uploads
their artifacts; the block runs again on the downloaded artifacts (the bias the kernel's third
input, gated_silu's output n/2 columns) and matches torch's unfused pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("service.schemas.artifacts")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import service.integrations.torch as tunehub_torch  # noqa: E402
from tests.service.e2e.test_end_to_end import compile_cache, engine_config  # noqa: E402, F401
from tests.service.integrations.test_torch_end_to_end import Loop, loop, run_cli  # noqa: E402, F401

HIDDEN, INTERMEDIATE = 32, 48


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_up = nn.Linear(HIDDEN, 2 * INTERMEDIATE)  # torch.cat([w_gate, w_up])
        self.down = nn.Linear(INTERMEDIATE, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = tunehub_torch.linear(x, self.gate_up.weight, self.gate_up.bias,
                                 activation="gated_silu")  # fmt: skip
        return tunehub_torch.linear(h, self.down.weight, self.down.bias, activation="silu")

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return F.silu(self.down(F.silu(gate) * up))


def test_record_tune_then_run_fused_linears(
    loop: Loop,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    torch.manual_seed(0)
    model = Mlp()
    x = torch.randn(2, 4, HIDDEN)  # m = 8
    tunehub_torch.configure(
        server=loop.service.url, token=loop.read_token, cache_dir=tmp_path / "client",
        load="artifact",
    )  # fmt: skip

    # 1. nothing tuned: torch's unfused pairs run; both fused shapes are recorded
    shapes_file = tmp_path / "shapes.jsonl"
    with tunehub_torch.record(shapes_file) as recorder, torch.inference_mode():
        torch.testing.assert_close(model(x), model.reference(x))
    assert recorder.written == 2
    problems = [json.loads(line)["problem"] for line in shapes_file.read_text().splitlines()]
    assert problems == [
        {"m": 8, "n": 2 * INTERMEDIATE, "k": HIDDEN, "epilogue": "gated_silu"},
        {"m": 8, "n": HIDDEN, "k": INTERMEDIATE, "epilogue": "bias_silu"},
    ]

    # 2. the workers tune the fused problems and share their artifacts
    server = ["--server", loop.service.url, "--token", loop.admin_token]
    code, out = run_cli(["tune", "--from-file", str(shapes_file), "--max-variants", "2",
                         *server], capsys)  # fmt: skip
    assert code == 0, out
    assert "tuned now 2, already tuned 0, failed 0" in out

    # 3. the next run: both fused kernels from their downloaded artifacts, matching torch
    tunehub_torch.reset()
    with torch.inference_mode():
        got = model(x)
        again = model(x)
    want = model.reference(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert torch.equal(got, again)
    shapes = tunehub_torch.stats().shapes
    assert [s.problem["epilogue"] for s in shapes] == ["gated_silu", "bias_silu"]
    for shape in shapes:
        assert shape.fallback is None, tunehub_torch.stats().format()
        assert (shape.source, shape.exact, shape.tunehub_calls) == ("artifact", True, 2)
        assert shape.variant is not None and shape.variant.endswith(shape.problem["epilogue"])
    # the plain product of the same dims is another shape: not tuned, it falls back
    with torch.inference_mode():
        plain = tunehub_torch.linear(x, model.gate_up.weight, model.gate_up.bias)
    torch.testing.assert_close(plain, model.gate_up(x))
    last = tunehub_torch.stats().shapes[-1]
    assert last.fallback is not None and last.fallback.reason == "not_tuned"
