"""Over real HTTP: a live server (uvicorn on a free port in a thread, SQLite and PostgreSQL),
one real CPU reduce job tuned by the worker agent with g++, and the CLI against it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.agent import WorkerAgent
from service.cli import main
from service.cli.serve import create_token_in_db, ensure_admin_token
from service.client import TunehubClient
from service.schemas.configs import ConfigQuery
from service.schemas.jobs import JobCreate, JobOut
from service.schemas.worker import HeartbeatIn, HeartbeatOut
from service.settings import Settings
from tests.service.conftest import LiveService
from tuner.types import EngineConfig

PROBLEM = {"m": 64, "k": 4096, "kind": "sum"}
MAX_VARIANTS = 4


@dataclass
class LiveServer:
    url: str
    settings: Settings
    admin_token: str
    worker_token: str


@pytest.fixture
def live_server(settings: Settings) -> Iterator[LiveServer]:
    """The app behind uvicorn in a thread; an admin token in the data dir as serve writes it.
    Real workers upload real variants: the service verifies them as it does by default."""
    settings = settings.model_copy(update={"verify_variants": True})
    settings.ensure_dirs()
    token_file = ensure_admin_token(settings)
    worker_token = create_token_in_db(settings.database_url, "test-worker", ["worker"])
    service = LiveService(settings).start()
    try:
        yield LiveServer(service.url, settings, token_file.read_text().strip(), worker_token)
    finally:
        service.stop()


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by every test here: one variant compiles once for all of them."""
    return tmp_path_factory.mktemp("compile-cache")


def engine_config(cache: Path) -> EngineConfig:
    return EngineConfig(
        cache_dir=str(cache), compile_workers=2, bench_seconds=0.05, warmup_seconds=0.01
    )


def submit(user: TunehubClient, **job: Any) -> JobOut:
    return user.submit_job(JobCreate.model_validate({"device": {"backend": "cpu"}, **job}))


class ProgressWatchingClient(TunehubClient):
    """The worker's client; after each heartbeat it reads the job's progress as a user would."""

    def __init__(self, url: str, token: str, watcher: TunehubClient, job_id: str) -> None:
        super().__init__(url, token)
        self.watcher = watcher
        self.job_id = job_id
        self.seen: list[int] = []

    def heartbeat(self, lease_id: str, progress: HeartbeatIn) -> HeartbeatOut:
        reply = super().heartbeat(lease_id, progress)
        job = self.watcher.get_job(self.job_id)
        self.seen.append(job.progress.candidates_done)
        return reply


def test_cpu_reduce_job_end_to_end(live_server: LiveServer, compile_cache: Path) -> None:
    user = TunehubClient(live_server.url, live_server.admin_token)
    job = submit(
        user,
        op="reduce",
        dtype="f32",
        problems=[PROBLEM],
        device={"backend": "cpu"},
        budget={"max_variants": MAX_VARIANTS},
    )
    assert job.status == "queued"

    worker_client = ProgressWatchingClient(live_server.url, live_server.worker_token, user, job.id)
    agent = WorkerAgent(
        worker_client,
        engine_config(compile_cache),
        ("cpu",),
        name="e2e",
        progress_interval_s=0.0,
        heartbeat_interval_s=60.0,
        upload_batch=2,
    )
    assert agent.run_once() is True
    assert agent.run_once() is False  # the only task is done

    # progress rose candidate by candidate, as the heartbeats reported it
    assert worker_client.seen == [*range(MAX_VARIANTS + 1), MAX_VARIANTS]
    job = user.get_job(job.id)
    assert job.status == "done"
    assert job.progress.candidates_done == job.progress.candidates_total == MAX_VARIANTS
    assert job.progress.tasks_done == job.progress.tasks_total == 1
    winner = job.problems[0].winner
    assert winner is not None

    measurements = user.measurements(job_id=job.id)
    assert len(measurements) == MAX_VARIANTS
    assert len({m.variant_name for m in measurements}) == MAX_VARIANTS
    assert all(m.outcome for m in measurements)
    verified = [m for m in measurements if m.outcome == "ok"]
    assert verified, [(m.variant_name, m.outcome, m.log[-200:]) for m in measurements]
    assert winner.variant_name in {m.variant_name for m in verified}
    # the winner rule may pick a near-tie (tuner.winner): whatever measured faster than the
    # winner is in its tie set, the variants the rounds could not tell from the fastest
    faster = {m.variant_name for m in verified if m.median_us < winner.median_us}
    assert faster <= set(winner.tie_set), (faster, winner.tie_set)
    assert winner.tie_set[0] == winner.variant_name and winner.complete

    best = user.best_config(ConfigQuery(op="reduce", dtype="f32", problem=PROBLEM, backend="cpu"))
    assert best.exact is True
    assert best.variant_name == winner.variant_name
    assert best.device.backend == "cpu"
    assert best.median_us == pytest.approx(winner.median_us)


def test_cli_tune_then_best_with_a_worker_running(
    live_server: LiveServer, compile_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stop = threading.Event()
    agent = WorkerAgent(
        TunehubClient(live_server.url, live_server.worker_token),
        engine_config(compile_cache),
        ("cpu",),
        name="cli-e2e",
        poll_interval_s=0.05,
    )
    thread = threading.Thread(target=agent.run_forever, args=(stop,), daemon=True)
    thread.start()
    server = ["--server", live_server.url, "--token", live_server.admin_token]
    try:
        with pytest.raises(SystemExit) as tuned:
            main(["tune", "reduce", "--m", "64", "--k", "2048", "--max-variants", "2", *server])
    finally:
        stop.set()
        thread.join(timeout=30)
    out = capsys.readouterr().out
    assert tuned.value.code == 0, out
    assert "candidates" in out and "winner for" in out
    assert out.count("reduce_f32_") >= 3  # two rows plus the winner line

    with pytest.raises(SystemExit) as best:
        main(["best", "reduce", "--m", "64", "--k", "2048", "--device", "cpu", *server])
    out = capsys.readouterr().out
    assert best.value.code == 0
    assert "exact match" in out and "reduce_f32_" in out

    # a nearby shape is answered from the tuned one, with its distance
    with pytest.raises(SystemExit) as near:
        main(["best", "reduce", "--m", "128", "--k", "2048", *server])
    out = capsys.readouterr().out
    assert near.value.code == 0
    assert "nearest tuned shape" in out


def test_cli_against_a_live_server_without_tuning(
    live_server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ["--server", live_server.url, "--token", live_server.admin_token]
    with pytest.raises(SystemExit) as untuned:
        main(["best", "gemm", "--m", "64", "--n", "64", "--k", "64", *server])
    out = capsys.readouterr().out
    assert untuned.value.code == 1
    assert out.startswith("not tuned yet")

    user = TunehubClient(live_server.url, live_server.admin_token)
    job = submit(user, op="softmax", dtype="f32", problems=[{"m": 8, "k": 64}])
    with pytest.MonkeyPatch.context() as narrow:
        narrow.setenv("COLUMNS", "80")  # a terminal of 80 columns, or a pipe
        with pytest.raises(SystemExit) as listed:
            main(["jobs", *server])
    out = capsys.readouterr().out
    assert listed.value.code == 0
    assert job.id in out and "queued" in out
    # the job's row keeps its id whole and its date on the same line, within 80 columns
    (row,) = [line for line in out.splitlines() if job.id in line]
    assert job.created_at.strftime("%m-%d %H:%M") in row and "queued" in row
    assert max(len(line) for line in out.splitlines()) <= 80

    with pytest.raises(SystemExit) as cancelled:
        main(["jobs", "cancel", job.id, *server])
    assert cancelled.value.code == 0
    assert "cancelled" in capsys.readouterr().out
    assert user.get_job(job.id).status == "cancelled"

    # a worker token may not submit: the refusal is one line, exit 2
    with pytest.raises(SystemExit) as refused:
        main(
            [
                "tune",
                "reduce",
                "--m",
                "8",
                "--k",
                "8",
                "--server",
                live_server.url,
                "--token",
                live_server.worker_token,
            ]
        )
    err = capsys.readouterr().err
    assert refused.value.code == 2
    assert "HTTP 403" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("op", "dtype", "problem"),
    [
        ("gemm", "f32", {"m": 33, "n": 40, "k": 24}),
        ("softmax", "f16", {"m": 16, "k": 300}),
        ("rms_norm", "bf16", {"m": 16, "k": 1001}),
        (
            "conv2d",
            "f32",
            {
                "n": 1,
                "h": 9,
                "w": 9,
                "c": 8,
                "k": 8,
                "r": 3,
                "s": 3,
                "stride": 1,
                "pad": 1,
                "dilation": 1,
            },
        ),
    ],
)
def test_every_cpu_op_tunes_through_the_api(
    live_server: LiveServer, compile_cache: Path, op: str, dtype: str, problem: dict[str, int]
) -> None:
    user = TunehubClient(live_server.url, live_server.admin_token)
    job = submit(
        user,
        op=op,
        dtype=dtype,
        problems=[problem],
        device={"backend": "cpu"},
        budget={"max_variants": 2},
    )
    agent = WorkerAgent(
        TunehubClient(live_server.url, live_server.worker_token),
        engine_config(compile_cache),
        ("cpu",),
        name=f"e2e-{op}",
    )
    assert agent.run_once() is True
    job = user.get_job(job.id)
    assert job.status == "done", job
    winner = job.problems[0].winner
    assert winner is not None and winner.variant_name.startswith(f"{op}_{dtype}_")
    measurements = user.measurements(job_id=job.id)
    assert len(measurements) == 2 and any(m.outcome == "ok" for m in measurements)
    best = user.best_config(ConfigQuery(op=op, dtype=dtype, problem=problem, backend="cpu"))
    assert best.exact is True and best.variant_name == winner.variant_name
