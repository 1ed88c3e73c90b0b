"""The whole PyTorch loop on the CPU, over real HTTP, on both databases: a live server and a
real CPU worker (g++); a small model of linear, rms_norm, softmax and sum layers on f32 CPU
tensors records its untuned shapes; ``tunehub tune --from-file`` tunes them (the worker
uploads each winner's artifact); the model runs again on the downloaded artifacts
(sha256-checked, loaded once) and matches torch; the stats say which shapes ran tunehub's
kernels, from where, and which fell back. A tampered artifact in the service's store is
refused before loading; a second client cache downloads again (no compile); the source policy
builds the winners here instead; with the service down, the caches answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("service.schemas.artifacts")  # the artifacts branch: answers name one

from torch import nn  # noqa: E402

import service.integrations.torch as tunehub_torch  # noqa: E402
from service.agent import WorkerAgent  # noqa: E402
from service.cli import main  # noqa: E402
from service.cli.serve import create_token_in_db, ensure_admin_token  # noqa: E402
from service.client import TunehubClient  # noqa: E402
from service.integrations._torch_device import cpu_device_key  # noqa: E402
from service.schemas.configs import ConfigQuery  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.service.conftest import LiveService  # noqa: E402
from tests.service.e2e.test_end_to_end import compile_cache, engine_config  # noqa: E402, F401
from tests.service.integrations.torch_helpers import RMS_NORM_KNOWN  # noqa: E402

EPS = 1e-5


@dataclass
class Loop:
    service: LiveService
    settings: Settings
    admin_token: str
    read_token: str


@pytest.fixture
def loop(settings: Settings, compile_cache: Path) -> Iterator[Loop]:  # noqa: F811
    """A live server (verifying uploaded variants) and a CPU worker agent polling it."""
    settings = settings.model_copy(update={"verify_variants": True})
    settings.ensure_dirs()
    admin = ensure_admin_token(settings).read_text().strip()
    worker_token = create_token_in_db(settings.database_url, "torch-worker", ["worker"])
    read_token = create_token_in_db(settings.database_url, "torch-reader", ["read"])
    service = LiveService(settings).start()
    stop = threading.Event()
    agent = WorkerAgent(
        TunehubClient(service.url, worker_token),
        engine_config(compile_cache),
        ("cpu",),
        name="torch-e2e",
        poll_interval_s=0.05,
    )
    thread = threading.Thread(target=agent.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        yield Loop(service, settings, admin, read_token)
    finally:
        stop.set()
        thread.join(timeout=60)
        service.stop()
        tunehub_torch.reset(configuration=True)


class SmallModel(nn.Module):
    """A decoder-ish block: rms_norm -> linear -> softmax -> linear, and a row sum."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(32, eps=EPS)
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32, bias=False)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.down(self.softmax(self.up(self.norm(x))))
        return y, tunehub_torch.sum(y, dim=-1)


def check(model: SmallModel, x: torch.Tensor) -> list[tunehub_torch.ShapeStat]:
    """Run the patched model, compare with torch's own modules; this run's shapes."""
    with torch.inference_mode():
        got = model(x)
        tunehub_torch.unpatch(model)
        y = model.down(torch.softmax(model.up(tunehub_torch.rms_norm_reference(
            x, model.norm.weight, EPS)), dim=-1))  # fmt: skip
        tunehub_torch.patch(model)
    torch.testing.assert_close(got[0], y, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1], y.sum(-1), rtol=1e-4, atol=1e-4)
    return tunehub_torch.stats().shapes


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    code = exited.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().out


def tuned_ops() -> set[str]:
    return {"gemm", "softmax", "reduce", *(("rms_norm",) if RMS_NORM_KNOWN else ())}


def test_record_tune_then_run_on_artifacts(
    loop: Loop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(0)
    model = tunehub_torch.patch(SmallModel())
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 4, 32)  # m = 8 rows everywhere
    first_cache = tmp_path / "client-1"
    tunehub_torch.configure(
        server=loop.service.url, token=loop.read_token, cache_dir=first_cache, load="artifact"
    )

    # 1. nothing tuned: every shape runs torch's op, and is recorded
    shapes_file = tmp_path / "shapes.jsonl"
    with tunehub_torch.record(shapes_file) as recorder:
        shapes = check(model, x)
    assert {s.fallback.reason for s in shapes if s.fallback} <= {"not_tuned", "service_error"}
    assert recorder.written == len(tuned_ops()) + 1  # two gemm shapes

    # 2. the offline flow: tune what was recorded
    server = ["--server", loop.service.url, "--token", loop.admin_token]
    code, out = run_cli(["tune", "--from-file", str(shapes_file), "--max-variants", "2",
                         *server], capsys)  # fmt: skip
    assert code == 0, out
    assert f"tuned now {recorder.written}, already tuned 0, failed 0" in out

    # 3. a tampered artifact in the service's store is refused before loading
    client = TunehubClient(loop.service.url, loop.read_token)
    records = [json.loads(line) for line in shapes_file.read_text().splitlines()]
    answers = client.query([ConfigQuery.model_validate(r) for r in records])
    assert all(a.config and a.config.artifact for a in answers)  # tune waited for them
    ref = client.best_config(_query("softmax", {"m": 8, "k": 64})).artifact
    assert ref is not None and ref.backend == "cpu"
    stored = loop.settings.artifact_root / ref.sha256[:2] / ref.sha256
    original = stored.read_bytes()
    stored.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))
    tunehub_torch.reset()  # the next run of the model, as a new process would see it
    shapes = {s.op: s for s in check(model, x)}
    refused = shapes["softmax"]
    assert refused.fallback is not None and refused.fallback.reason == "no_library"
    assert "refused" in refused.fallback.message
    kept = [p for p in (first_cache / "artifacts").rglob("*") if p.is_file()]
    assert not [p for p in kept if ref.sha256 in p.name]  # nothing of it kept, or loaded

    # 4. the honest bytes: every tuned shape runs its artifact (softmax's downloaded now; the
    # others' answers and libraries are on this cache's disk since step 3)
    stored.write_bytes(original)
    tunehub_torch.reset()
    for shape in check(model, x):
        if shape.op in tuned_ops():
            expected = "artifact" if shape.op == "softmax" else "on-disk cache"
            assert shape.source == expected and shape.exact, tunehub_torch.stats().format()
            assert shape.tunehub_calls == 1 and shape.fallback_calls == 0
    assert len(list((first_cache / "artifacts").glob("*/*.so"))) >= len(tuned_ops())

    # 5. other batch sizes: a near one runs the nearest tuned shape's variant, a far one
    # falls back and says so
    tunehub_torch.reset()
    check(model, torch.randn(3, 32))
    check(model, torch.randn(512, 32))
    by_rows = {}
    for shape in tunehub_torch.stats().shapes:
        if shape.op == "softmax":
            by_rows[shape.problem["m"]] = shape
    assert by_rows[3].fallback is None and by_rows[3].exact is False
    assert by_rows[512].fallback is not None and by_rows[512].fallback.reason == "too_far"
    text = tunehub_torch.stats().format()
    assert "softmax f32 m=512,k=64 x1: fallback: the nearest tuned shape" in text

    # 6. a second process on another client cache: downloads, compiles nothing
    second_cache = tmp_path / "client-2"
    tunehub_torch.configure(cache_dir=second_cache)
    shapes = check(model, x)
    assert {s.source for s in shapes if s.op in tuned_ops()} == {"artifact"}
    assert not (second_cache / "builds").exists()

    # 7. a team that compiles instead: the variants' sources, built here with g++
    tunehub_torch.configure(cache_dir=tmp_path / "client-3", load="source")
    shapes = check(model, x)
    assert {s.source for s in shapes if s.op in tuned_ops()} == {"source build"}
    assert not (tmp_path / "client-3" / "artifacts").exists()

    # 8. the service down: the answer cache and the artifacts on disk serve
    loop.service.stop()
    tunehub_torch.reset()
    shapes = check(model, x)
    assert {s.source for s in shapes if s.op in tuned_ops()} == {"on-disk cache"}


def _query(op: str, problem: dict[str, int]) -> ConfigQuery:
    layout = "rcr" if op == "gemm" else "row"
    return ConfigQuery(op=op, dtype="f32", layout=layout, problem=problem,  # type: ignore[arg-type]
                       device=cpu_device_key())  # fmt: skip
