"""A rehearsal of the compose deployment outside docker (issue 24), on the real PostgreSQL.

No container engine runs here, so this runs what the containers run, for real: the server
image's entry (deploy/serve.sh: migrate a fresh database, then serve), the health check compose
runs in the api container (deploy/healthcheck.py), the token step of docs/deploy.md, and the
worker image's entry (deploy/worker.sh) against that URL and token, which registers under its
TUNEHUB_WORKER_NAME and tunes a small CPU job. Each process gets the environment its container
would have: the Dockerfile stage's ENV, then the env example, then what only differs outside
docker (the database on the test server instead of host ``db``, temp dirs instead of ``/data``,
a free port on 127.0.0.1, the CPU backend instead of CUDA). ``tunehub`` on PATH runs this
checkout, as the image's does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from service.cli.common import ADMIN_TOKEN_FILE
from service.cli.serve import free_port
from service.store.db import head_revision
from tests.conftest import PG_ADMIN_URL, REPO_ROOT, pg_admin_connect
from tests.deploy_files import DEPLOY, env_file_values, image_env

START_TIMEOUT_S = 90.0
JOB_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
#: the worker's name in deploy/worker.env.example
EXAMPLE_WORKER_NAME = env_file_values(DEPLOY / "worker.env.example")["TUNEHUB_WORKER_NAME"]


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """An empty PostgreSQL database, as the `db` container starts with: serve.sh migrates it."""
    name = f"tunehub_deploy_{uuid.uuid4().hex[:12]}"
    with pg_admin_connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    try:
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with pg_admin_connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def _base_env(tmp_path: Path) -> dict[str, str]:
    """This machine's environment without TUNEHUB_/POSTGRES_ variables, with a ``tunehub``
    command on PATH that runs this checkout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "tunehub"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m service.cli "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNEHUB_", "POSTGRES_"))}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
    )
    return env


def container_env(tmp_path: Path, stage: str, example: str, **outside: str) -> dict[str, str]:
    """A container's environment: the image's ENV, the env file (its example), then ``outside``
    (``TUNEHUB_`` prefixed), what differs outside docker."""
    env = _base_env(tmp_path)
    env.update(image_env(stage))
    env.update(env_file_values(DEPLOY / example))
    env.update({f"TUNEHUB_{k.upper()}": v for k, v in outside.items()})
    return env


def _start(script: str, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(DEPLOY / script), *args],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEPLOY / "healthcheck.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def _until(what: str, condition: Callable[[], Any], timeout_s: float, logs: list[Path]) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs)
    raise AssertionError(f"timed out waiting for {what}\n{tails}")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM, as `docker compose stop` sends; the exit status (SIGKILL after a while)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
        return -signal.SIGKILL


def test_the_compose_first_steps_work_in_order(fresh_pg_url: str, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data = tmp_path / "api-data"
    server_env = container_env(
        tmp_path,
        "server",
        "server.env.example",
        database_url=fresh_pg_url,
        host="127.0.0.1",
        port=str(port),
        data_dir=str(data),
        cache_dir=str(data / "cache"),
    )
    logs = [tmp_path / "api.log", tmp_path / "worker.log"]
    # the health check fails while nothing answers (compose keeps the api "starting")
    down = _healthcheck(server_env)
    assert down.returncode == 1 and "unhealthy" in down.stderr

    # docker compose --profile server up -d: the api container's entry
    api = _start("serve.sh", [], server_env, logs[0])
    worker: subprocess.Popen[bytes] | None = None
    try:

        def healthy() -> bool:
            assert api.poll() is None, logs[0].read_text(errors="replace")
            return _healthcheck(server_env).returncode == 0

        _until("the api's health check to pass", healthy, START_TIMEOUT_S, logs)
        assert httpx.get(f"{url}/healthz").json()["revision"] == head_revision()

        # docker compose --profile server exec api tunehub token create ... (docs/deploy.md)
        created = subprocess.run(
            ["tunehub", "token", "create", "--name", "gpu-host-1", "--scope", "worker"],
            env=server_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        token = created.stdout.strip()
        assert token and "\n" not in token

        # a GPU host: docker compose --profile worker up -d, with that URL and token in
        # deploy/worker.env (the image passes --backend cuda; no GPU here)
        worker_data = tmp_path / "worker-data"
        worker_env = container_env(
            tmp_path,
            "worker",
            "worker.env.example",
            server=url,
            token=token,
            data_dir=str(worker_data),
            cache_dir=str(worker_data / "cache"),
            bench_seconds="0.05",
        )
        worker = _start("worker.sh", ["--backend", "cpu"], worker_env, logs[1])

        admin = {"Authorization": f"Bearer {(data / ADMIN_TOKEN_FILE).read_text().strip()}"}

        def registered() -> list[dict[str, Any]]:
            assert worker is not None and worker.poll() is None
            workers = httpx.get(f"{url}/v1/workers", headers=admin).json()["workers"]
            return [w for w in workers if w["name"] == EXAMPLE_WORKER_NAME]

        (seen,) = _until("the worker to register", registered, START_TIMEOUT_S, logs)
        assert seen["token_name"] == "gpu-host-1"

        job = {
            "op": "reduce",
            "dtype": "f32",
            "problems": [{"m": 64, "k": 256, "kind": "sum"}],
            "device": {"backend": "cpu"},
            "budget": {"max_variants": 1},
        }
        submitted = httpx.post(f"{url}/v1/jobs", json=job, headers=admin, timeout=30)
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]

        def finished() -> dict[str, Any] | None:
            body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=30).json()
            return body if body["status"] in ("done", "failed", "cancelled") else None

        assert _until("the job to finish", finished, JOB_TIMEOUT_S, logs)["status"] == "done"
        best = httpx.get(
            f"{url}/v1/configs/best",
            params={"op": "reduce", "dtype": "f32", "device": "cpu", "m": 64, "k": 256},
            timeout=30,
        )
        assert best.status_code == 200 and best.json()["exact"] is True, best.text
    finally:
        # docker compose stop: both end cleanly on SIGTERM
        worker_status = _stop(worker) if worker is not None else 0
        api_status = _stop(api)
    tails = [p.read_text(errors="replace")[-2000:] for p in logs]
    assert worker_status == 0, tails
    # uvicorn shuts down, then (0.29 and later) raises the signal again: docker shows 143
    assert api_status in (0, -signal.SIGTERM), tails
    assert "Finished server process" in tails[0], tails


def test_the_worker_says_what_is_missing_instead_of_starting(tmp_path: Path) -> None:
    env = _base_env(tmp_path)
    nothing = subprocess.run(
        [str(DEPLOY / "worker.sh"), "--backend", "cpu"], env=env, capture_output=True, text=True
    )
    assert nothing.returncode == 2
    assert "TUNEHUB_SERVER" in nothing.stderr and "TUNEHUB_TOKEN" in nothing.stderr
    assert "deploy/worker.env" in nothing.stderr
    # the example copied as it is: the server is named, the token is empty
    example = {**env, **env_file_values(DEPLOY / "worker.env.example")}
    no_token = subprocess.run(
        [str(DEPLOY / "worker.sh")], env=example, capture_output=True, text=True
    )
    assert no_token.returncode == 2
    assert "TUNEHUB_TOKEN" in no_token.stderr and "TUNEHUB_SERVER" not in no_token.stderr


def test_the_server_says_what_is_missing_instead_of_starting(tmp_path: Path) -> None:
    started = subprocess.run(
        [str(DEPLOY / "serve.sh")], env=_base_env(tmp_path), capture_output=True, text=True
    )
    assert started.returncode == 2
    assert "TUNEHUB_DATABASE_URL" in started.stderr and "deploy/server.env" in started.stderr
