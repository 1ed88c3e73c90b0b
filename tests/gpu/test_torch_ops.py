"""The PyTorch ops on the GPU, f16 and bf16, with answers a real server and CUDA worker tuned in
this module (a tiny budget): each op (linear also fused with silu and gated_silu) against
torch, eagerly, under CUDA graph capture and under torch.compile(fullgraph=True); the source
load policy rebuilds a winner with nvcc.

Run on the H200 host (the server and its local CUDA worker are started here, on SQLite):

    TUNEHUB_GPU_TEST_MAX_VARIANTS=2 python -m pytest -m gpu --noconftest -x -q \
        tests/gpu/test_torch_ops.py

``TUNEHUB_GPU_TEST_CACHE=/path`` reuses a compile cache between runs (default: a temporary
one); ``TUNEHUB_GPU_TEST_MAX_VARIANTS`` is the budget per shape (default 2).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.gpu.gpu_helpers import GPU_MARKS

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import service.integrations.torch as tunehub_torch  # noqa: E402
from tuner.problems import OPS  # noqa: E402

pytestmark = [
    *GPU_MARKS,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"),
]

REPO = Path(__file__).resolve().parents[2]
DTYPES = (torch.float16, torch.bfloat16)
TOLERANCE = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 3e-2)}
EPS = 1e-6
RMS_NORM_KNOWN = "rms_norm" in OPS
START_TIMEOUT_S = 120.0
TUNE_TIMEOUT_S = float(os.environ.get("TUNEHUB_GPU_TEST_TUNE_TIMEOUT", "480"))


@dataclass
class Server:
    url: str
    token: str
    data_dir: Path
    tune_output: str


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def inputs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The tensors of every test: the shapes tuned below."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        values = torch.rand(*shape, generator=g, device="cuda", dtype=torch.float32)
        return ((values * 2 - 1) * scale).to(dtype)

    return {
        "x": rand(2, 8, 1024),  # linear: m = 16
        "w": rand(2048, 1024, scale=0.03),
        "b": rand(2048),
        "a": rand(64, 512),  # matmul rrr
        "bm": rand(512, 256, scale=0.05),
        "rows": rand(64, 1024, scale=4.0),  # softmax, sum
        "h": rand(16, 1024),  # rms_norm
        "g": rand(1024) + 1.0,
        "image": rand(1, 64, 14, 14).contiguous(memory_format=torch.channels_last),
        "filter": rand(64, 64, 3, 3, scale=0.05).contiguous(memory_format=torch.channels_last),
    }


def run_all(t: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every op once (the rrr matmul and the conv2d in f16 only: their shapes are tuned so)."""
    out = [
        tunehub_torch.linear(t["x"], t["w"], t["b"]),
        tunehub_torch.linear(t["x"], t["w"], t["b"], activation="silu"),  # fused epilogues
        tunehub_torch.linear(t["x"], t["w"], t["b"], activation="gated_silu"),
        tunehub_torch.softmax(t["rows"]),
        tunehub_torch.sum(t["rows"]),
        tunehub_torch.rms_norm(t["h"], t["g"], EPS),
    ]
    if t["x"].dtype == torch.float16:
        out.append(tunehub_torch.matmul(t["a"], t["bm"]))
        out.append(tunehub_torch.conv2d(t["image"], t["filter"], padding=1))
    return out


def reference(t: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    gate, up = F.linear(t["x"], t["w"], t["b"]).float().chunk(2, dim=-1)
    out = [
        F.linear(t["x"], t["w"], t["b"]),
        F.silu(F.linear(t["x"], t["w"], t["b"]).float()).to(t["x"].dtype),
        (F.silu(gate) * up).to(t["x"].dtype),
        torch.softmax(t["rows"].float(), -1).to(t["rows"].dtype),
        t["rows"].float().sum(-1).to(t["rows"].dtype),
        tunehub_torch.rms_norm_reference(t["h"], t["g"], EPS),
    ]
    if t["x"].dtype == torch.float16:
        out.append(t["a"] @ t["bm"])
        out.append(F.conv2d(t["image"], t["filter"], padding=1))
    return out


def assert_close(got: list[torch.Tensor], want: list[torch.Tensor], dtype: torch.dtype) -> None:
    rtol, atol = TOLERANCE[dtype]
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        scale = max(1.0, float(b.float().abs().max()))
        torch.testing.assert_close(
            a.float(), b.float(), rtol=rtol, atol=atol * scale, msg=lambda m, i=index: f"{i}: {m}"
        )


def serve_and_tune(root: Path, record: Callable[[], None], min_shapes: int) -> Iterator[Server]:
    """Body of a module's ``server`` fixture: ``tunehub serve`` with its local CUDA worker;
    ``record()`` runs the ops with no server configured (every shape falls back and is
    recorded; at least ``min_shapes``), and ``tunehub tune --from-file`` tunes them."""
    data = root / "data"
    cache = Path(os.environ.get("TUNEHUB_GPU_TEST_CACHE", str(root / "cache")))
    port = _free_port()
    env = {
        **os.environ,
        # the repo first, then whatever else the host needs (the GPU host's carried wheels)
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "TUNEHUB_DATABASE_URL": f"sqlite:///{data}/tunehub.db",
        "TUNEHUB_DATA_DIR": str(data),
        "TUNEHUB_CACHE_DIR": str(cache),
        "TUNEHUB_BENCH_SECONDS": "0.05",
    }
    log = (root / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--migrate",
         "--local-worker", "--backend", "cuda"],
        env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tunehub serve did not start: {(root / 'serve.log').read_text()}")
            time.sleep(0.5)
        token = (data / "admin-token").read_text().strip()

        shapes = root / "shapes.jsonl"
        os.environ.pop("TUNEHUB_SERVER", None)  # no server: every shape falls back, recorded
        tunehub_torch.reset(configuration=True)
        tunehub_torch.configure(cache_dir=root / "unused")
        with torch.inference_mode(), tunehub_torch.record(shapes) as recorder:
            record()
        assert recorder.written >= min_shapes, shapes.read_text()
        budget = os.environ.get("TUNEHUB_GPU_TEST_MAX_VARIANTS", "2")
        done = subprocess.run(
            [sys.executable, "-m", "service.cli", "tune", "--from-file", str(shapes),
             "--max-variants", budget, "--server", url, "--token", token],
            env={**env, "COLUMNS": "100"}, cwd=REPO, capture_output=True, text=True,
            timeout=TUNE_TIMEOUT_S, check=False,
        )  # fmt: skip
        print(done.stdout[-6000:], done.stderr[-3000:])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        yield Server(url, token, data, done.stdout)
    finally:
        tunehub_torch.reset(configuration=True)
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The ops' shapes, recorded and tuned by a live server's local CUDA worker."""

    def record() -> None:
        for dtype in DTYPES:
            run_all(inputs(dtype))

    yield from serve_and_tune(tmp_path_factory.mktemp("torch-gpu"), record, min_shapes=8)


@pytest.fixture
def configured(server: Server, tmp_path: Path) -> Iterator[Callable[..., None]]:
    def configure(**options: object) -> None:
        tunehub_torch.configure(
            server=server.url, token=server.token, cache_dir=tmp_path / "client", **options
        )

    configure(load="artifact")
    yield configure
    tunehub_torch.reset(configuration=True)


def tunehub_ran(dtype: torch.dtype) -> None:
    """Every shape of ``dtype`` ran a tunehub kernel (rms_norm: once this tunehub knows it)."""
    name = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    stats = tunehub_torch.stats()
    for shape in stats.shapes:
        if shape.dtype != name or (shape.op == "rms_norm" and not RMS_NORM_KNOWN):
            continue
        assert shape.fallback is None and shape.tunehub_calls > 0, stats.format()


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_ops_match_torch(configured: Callable[..., None], dtype: torch.dtype) -> None:
    t = inputs(dtype)
    with torch.inference_mode():
        got = run_all(t)
        assert_close(got, reference(t), dtype)
        again = run_all(t)
    torch.cuda.synchronize()
    for a, b in zip(got, again, strict=True):
        assert torch.equal(a, b)
    tunehub_ran(dtype)
    assert {s.source for s in tunehub_torch.stats().shapes if s.fallback is None} == {"artifact"}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_ops_under_cuda_graph_capture(configured: Callable[..., None], dtype: torch.dtype) -> None:
    t = inputs(dtype)
    with torch.inference_mode():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up: resolves and loads every shape's kernel
            run_all(t)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = run_all(t)
        fresh = inputs(dtype)
        for name, value in fresh.items():
            t[name].copy_(value * 0.5)  # new values in the captured inputs
        graph.replay()
        torch.cuda.synchronize()
        assert_close(captured, reference(t), dtype)
    tunehub_ran(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_ops_under_torch_compile(configured: Callable[..., None], dtype: torch.dtype) -> None:
    torch._dynamo.reset()
    t = inputs(dtype)
    compiled = torch.compile(run_all, fullgraph=True)
    with torch.inference_mode():
        got = compiled(t)
    assert_close(got, reference(t), dtype)
    tunehub_ran(dtype)


def test_source_policy_rebuilds_with_nvcc(configured: Callable[..., None]) -> None:
    """A careful team compiles the winners here instead of loading downloaded code."""
    configured(load="source")
    t = inputs(torch.float16)
    with torch.inference_mode():
        got = [tunehub_torch.softmax(t["rows"]), tunehub_torch.sum(t["rows"])]
    assert_close(got, reference(t)[3:5], torch.float16)
    shapes = tunehub_torch.stats().shapes
    assert [s.source for s in shapes] == ["source build"] * 2, tunehub_torch.stats().format()


def test_every_recorded_shape_was_tuned(server: Server) -> None:
    summary = [line for line in server.tune_output.splitlines() if line.startswith("summary:")]
    assert summary and summary[0].endswith("failed 0"), server.tune_output
