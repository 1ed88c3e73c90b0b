"""Fixtures of the team-scale tests (test_team_scale.py): the processes (API servers and
``tunehub worker`` processes on a free port each), a fresh PostgreSQL database per module, and
the team: a reference run by one worker, then the same job by three workers through two API
processes, one worker killed mid-task."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

from service.cli.serve import create_token_in_db, free_port
from service.store.db import make_engine, upgrade
from service.store.models import (
    Task,
    Worker,
)
from tests.conftest import PG_ADMIN_URL, REPO_ROOT, pg_admin_connect, spawn_cli

log = logging.getLogger(__name__)
#: short leases, so that a killed worker's task is queued again within seconds
LEASE_SECONDS = 3
START_TIMEOUT_S = 60.0
JOB_TIMEOUT_S = 120.0
MAX_VARIANTS = 3
#: timing per candidate: these tests check bookkeeping, not which variant is fastest
BENCH_SECONDS = 0.05
#: small row sums: every variant of the CPU space is valid for them, so each task measures
#: the same MAX_VARIANTS candidates (the exhaustive order is deterministic)
REFERENCE_PROBLEMS = [{"m": 64, "k": 1024, "kind": "sum"}, {"m": 128, "k": 512, "kind": "sum"}]
TEAM_PROBLEMS = REFERENCE_PROBLEMS + [
    {"m": 256, "k": 256, "kind": "sum"},
    {"m": 64, "k": 512, "kind": "max"},
    {"m": 128, "k": 256, "kind": "mean"},
    {"m": 256, "k": 512, "kind": "sum"},
]


# -- processes ------------------------------------------------------------------------------


def team_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEHUB_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
    )
    env.update({f"TUNEHUB_{k.upper()}": v for k, v in values.items()})
    return env


@dataclass
class Proc:
    """One child process of this test, with its log; killed only by its own pid."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop_signal(self) -> int:
        return signal.SIGINT if self.name.startswith("api") else signal.SIGTERM

    def stop(self) -> None:
        """SIGINT (uvicorn) / SIGTERM (worker) first; SIGKILL when it does not end."""
        if not self.alive():
            return
        self.popen.send_signal(self.stop_signal())
        self.wait_or_kill()

    def wait_or_kill(self) -> None:
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill9()

    def tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-25:])
        except OSError:
            return ""


@dataclass
class Processes:
    tmp: Path
    started: list[Proc] = field(default_factory=list)

    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        log = self.tmp / f"{name}.log"
        popen = spawn_cli(args, env, log)
        proc = Proc(name, popen, log)
        self.started.append(proc)
        return proc

    def api(self, name: str, database_url: str) -> tuple[Proc, str]:
        """``tunehub serve`` on a free port, without a local worker; waits for /healthz."""
        port = free_port()
        env = team_env(
            database_url=database_url,
            data_dir=str(self.tmp / name),
            lease_seconds=str(LEASE_SECONDS),
        )
        args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--no-local-worker"]
        return self.spawn(name, args, env), f"http://127.0.0.1:{port}"

    def worker(self, name: str, url: str, token: str) -> Proc:
        env = team_env(
            cache_dir=str(self.tmp / "kernel-cache"),  # one compile serves every worker
            data_dir=str(self.tmp / name),
            bench_seconds=str(BENCH_SECONDS),
        )
        args = ["worker", "--server", url, "--token", token, "--name", name]
        return self.spawn(name, args, env)

    def stop_all(self) -> None:
        """Signal every process first, then wait for each (they shut down in parallel)."""
        for proc in self.started:
            if proc.alive():
                proc.popen.send_signal(proc.stop_signal())
        for proc in self.started:
            proc.wait_or_kill()


def wait_healthy(proc: Proc, url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{proc.name} did not answer /healthz:\n{proc.tail()}")


def until(what: str, condition: Callable[[], Any], timeout_s: float, procs: list[Proc]) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    logs = "\n".join(f"--- {p.name}\n{p.tail()}" for p in procs)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


# -- databases ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A private, migrated PostgreSQL database for this module's processes."""
    name = f"tunehub_team_{uuid.uuid4().hex[:12]}"
    with pg_admin_connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        with pg_admin_connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def psycopg_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


# -- the team -------------------------------------------------------------------------------


@dataclass
class Team:
    database_url: str
    engine: Engine
    procs: Processes
    api_a: Proc
    url_a: str
    api_b: Proc
    url_b: str
    admin: str
    reference_job: str = ""
    team_job: str = ""
    killed_task: str = ""
    killed_lease: str = ""

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.admin}"}

    def worker_token(self, host: str) -> str:
        """One token per host, as a team issues them."""
        return create_token_in_db(self.database_url, host, ["worker"])

    def submit(self, url: str, problems: list[dict[str, Any]], **extra: Any) -> str:
        body = {
            "op": "reduce",
            "dtype": "f32",
            "problems": problems,
            "device": {"backend": "cpu"},
            "strategy": "exhaustive",
            "budget": {"max_variants": MAX_VARIANTS},
            **extra,
        }
        response = httpx.post(f"{url}/v1/jobs", json=body, headers=self.headers(), timeout=30)
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url_a}/v1/jobs/{job_id}", timeout=30)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def wait_job(self, job_id: str, procs: list[Proc]) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in ("done", "failed", "cancelled") else None

        job: dict[str, Any] = until(f"job {job_id} to finish", finished, JOB_TIMEOUT_S, procs)
        return job

    def session(self) -> Session:
        return Session(self.engine)


def worker_id(session: Session, name: str) -> str | None:
    return session.scalar(select(Worker.id).where(Worker.name == name))


@pytest.fixture(scope="module")
def team(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    """Two API processes on one PostgreSQL; a single-worker reference job, then the team job
    with three workers, one of them SIGKILLed while it holds a lease."""
    procs = Processes(tmp_path_factory.mktemp("team"))
    engine = make_engine(pg_url)
    try:
        api_a, url_a = procs.api("api-a", pg_url)
        api_b, url_b = procs.api("api-b", pg_url)
        admin = create_token_in_db(pg_url, "team-admin", ["admin"])
        team = Team(pg_url, engine, procs, api_a, url_a, api_b, url_b, admin)
        # the single-worker run (it also warms the shared compile cache); the worker starts
        # with the APIs and registers once A answers
        solo = procs.worker("solo", url_a, team.worker_token("solo-host"))
        wait_healthy(api_a, url_a)
        wait_healthy(api_b, url_b)
        log.info("two API processes up at %s and %s", url_a, url_b)
        team.reference_job = team.submit(url_a, REFERENCE_PROBLEMS)
        assert team.wait_job(team.reference_job, [solo, api_a])["status"] == "done"
        solo.stop()
        log.info("single-worker job %s done", team.reference_job)

        workers = {
            "w1": procs.worker("w1", url_a, team.worker_token("gpu-host-1")),
            "w2": procs.worker("w2", url_b, team.worker_token("gpu-host-2")),
            "w3": procs.worker("w3", url_a, team.worker_token("gpu-host-3")),
        }
        everyone = [*workers.values(), api_a, api_b]

        def registered() -> bool:
            with team.session() as session:
                return all(worker_id(session, name) for name in workers)

        until("three workers to register", registered, START_TIMEOUT_S, everyone)
        team.team_job = team.submit(url_b, TEAM_PROBLEMS)

        def a_worker_holds_a_task() -> tuple[str, str, str] | None:
            with team.session() as session:
                row = session.execute(
                    select(Task.id, Task.lease_id, Worker.name)
                    .join(Worker, Worker.id == Task.lease_owner)
                    .where(
                        Task.job_id == team.team_job,
                        Task.status == "running",
                        Task.progress_total > 0,  # tuning: it reported its candidate count
                        Worker.name.in_([n for n, p in workers.items() if p.alive()]),
                    )
                    .order_by(Worker.name)  # w1 when it holds one
                ).first()
            return (row[0], str(row[1]), row[2]) if row else None

        def still_unfinished(task_id: str) -> bool:
            with team.session() as session:
                task = session.get(Task, task_id)
                return task is not None and task.status in ("running", "queued")

        # the victim may have sent its final upload just before the kill; then kill another
        for _attempt in range(2):
            team.killed_task, team.killed_lease, victim = until(
                "a worker to lease a task", a_worker_holds_a_task, 60, everyone
            )
            workers[victim].kill9()
            log.info(
                "%s SIGKILLed holding lease %s of %s", victim, team.killed_lease, team.killed_task
            )
            time.sleep(1.0)  # an upload the victim sent before dying has landed by now
            if still_unfinished(team.killed_task):
                break
        else:
            pytest.fail("no worker could be killed mid-task")
        assert team.wait_job(team.team_job, everyone)["status"] == "done"
        log.info("team job %s done", team.team_job)
        for worker in workers.values():
            worker.stop()
        yield team
    finally:
        procs.stop_all()
        engine.dispose()
