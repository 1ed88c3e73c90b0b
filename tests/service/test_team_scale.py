"""Team scale as real processes on the real PostgreSQL (and SQLite where it means something).

Two API processes (``python -m service.cli serve``, no local worker) share one PostgreSQL
database; three ``tunehub worker`` processes tune a real CPU job through them. The tests kill a
worker mid-task (SIGKILL), kill an API process inside an upload's transaction, race many
lease requests for one task across both processes, and retry uploads.

What "the best config equals a single-worker run's" can honestly mean with noisy CPU timing:
the team job measures exactly the candidates a single worker measured (one row per variant,
none lost to the kill, none twice), each task's winner is the store's winner rule applied to
that task's stored rows, and the best config of every problem is what the store's upsert rule
gives over the single-worker winner and the team winner (kept within the tie band, replaced
only by a clearly faster one). Which variant is fastest on a shared 2-core machine is noise.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

from service.cli.serve import create_token_in_db, free_port
from service.store.best import decide_winner, replaces_stored
from service.store.db import make_engine, upgrade
from service.store.models import (
    BestConfig,
    Device,
    Job,
    Lease,
    Measurement,
    Task,
    Toolchain,
    Variant,
    Worker,
)
from service.store.tokens import create_token
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


def _env(**values: str) -> dict[str, str]:
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
        env = _env(
            database_url=database_url,
            data_dir=str(self.tmp / name),
            lease_seconds=str(LEASE_SECONDS),
        )
        args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--no-local-worker"]
        return self.spawn(name, args, env), f"http://127.0.0.1:{port}"

    def worker(self, name: str, url: str, token: str) -> Proc:
        env = _env(
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


def _wait_healthy(proc: Proc, url: str) -> None:
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


def _until(what: str, condition: Callable[[], Any], timeout_s: float, procs: list[Proc]) -> Any:
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


def _psycopg_url(url: str) -> str:
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

        job: dict[str, Any] = _until(f"job {job_id} to finish", finished, JOB_TIMEOUT_S, procs)
        return job

    def session(self) -> Session:
        return Session(self.engine)


def _worker_id(session: Session, name: str) -> str | None:
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
        _wait_healthy(api_a, url_a)
        _wait_healthy(api_b, url_b)
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
                return all(_worker_id(session, name) for name in workers)

        _until("three workers to register", registered, START_TIMEOUT_S, everyone)
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
            team.killed_task, team.killed_lease, victim = _until(
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


# -- a worker is SIGKILLed mid-task ---------------------------------------------------------


def test_the_job_finishes_after_a_worker_is_killed_mid_task(team: Team) -> None:
    job = team.job(team.team_job)
    assert job["status"] == "done"
    assert [p["status"] for p in job["problems"]] == ["done"] * len(TEAM_PROBLEMS)
    assert all(p["winner"] for p in job["problems"])
    with team.session() as session:
        killed = session.get(Task, team.killed_task)
        assert killed is not None and killed.status == "done"
        assert killed.attempts >= 1  # its lease expired once and it was queued again
        assert killed.lease_id != team.killed_lease  # another worker finished it
        leases = session.scalar(select(func.count()).where(Lease.task_id == team.killed_task))
        assert leases is not None and leases >= 2


def _variants_by_problem(session: Session, job_id: str) -> dict[str, list[str]]:
    rows = session.execute(
        select(Measurement.problem_key, Measurement.variant_id).where(Measurement.job_id == job_id)
    ).all()
    found: dict[str, list[str]] = {}
    for key, variant in rows:
        found.setdefault(key, []).append(variant)
    return found


def test_no_measurement_is_lost_or_duplicated(team: Team) -> None:
    with team.session() as session:
        reference = _variants_by_problem(session, team.reference_job)
        measured = _variants_by_problem(session, team.team_job)
        tasks = list(session.scalars(select(Task).where(Task.job_id == team.team_job)))
    candidates = {tuple(sorted(v)) for v in reference.values()}
    assert len(candidates) == 1, "the single worker measured one candidate set per problem"
    (expected,) = candidates
    assert len(expected) == MAX_VARIANTS
    assert len(measured) == len(TEAM_PROBLEMS) == len(tasks)
    for key, variants in measured.items():
        assert sorted(variants) == list(expected), key  # each candidate once, none missing


def test_each_winner_follows_the_store_rule_like_a_single_worker(team: Team) -> None:
    with team.session() as session:
        names = dict(session.execute(select(Variant.id, Variant.name)).all())
        # the team job's leases named the reference job's winners as incumbents, which the
        # rule prefers inside a tie (tuner.winner); the reference job had none
        reference_winners: dict[str, str] = {}
        for job_id in (team.reference_job, team.team_job):
            for task in session.scalars(select(Task).where(Task.job_id == job_id)):
                rows = list(
                    session.scalars(select(Measurement).where(Measurement.task_id == task.id))
                )
                incumbent = reference_winners.get(task.problem_key)
                decision = decide_winner(rows, names, incumbents=[incumbent] if incumbent else [])
                winner = decision.winner
                assert winner is not None and task.winner_measurement_id == winner.id
                if job_id == team.reference_job:
                    reference_winners[task.problem_key] = names[winner.variant_id]


def _expected_best(session: Session, incumbent: Measurement, candidate: Measurement) -> Measurement:
    """The best config the store's one replacement rule keeps (service.store.results)."""
    return candidate if replaces_stored(session, incumbent, candidate) else incumbent


def test_best_configs_follow_the_upsert_rule_over_both_runs(team: Team) -> None:
    with team.session() as session:
        for problem_key in {
            t.problem_key
            for t in session.scalars(select(Task).where(Task.job_id == team.reference_job))
        }:
            winners = [
                session.get(Measurement, task.winner_measurement_id)
                for job_id in (team.reference_job, team.team_job)
                for task in session.scalars(
                    select(Task).where(Task.job_id == job_id, Task.problem_key == problem_key)
                )
            ]
            solo, teamed = winners
            assert solo is not None and teamed is not None
            best = session.scalars(
                select(BestConfig).where(BestConfig.problem_key == problem_key)
            ).one()
            assert solo.median_us is not None and teamed.median_us is not None
            assert best.measurement_id == _expected_best(session, solo, teamed).id


# -- two workers race for one task ----------------------------------------------------------

RACERS = 8
ROUNDS = 3
RACE_DEVICE = {
    "backend": "cpu",
    "name": "Race CPU",
    "arch": "x86_64-race",
    "sm_count": 4,
    "driver": "",
    "runtime": "",
    "memory_bytes": 0,
}


def _race(urls: list[str], database_url: str, admin: str) -> None:
    """RACERS workers, each with its own token, ask both API processes for one task at once;
    exactly one lease is granted per round."""
    racers: list[tuple[str, str]] = []
    engine = make_engine(database_url)
    try:
        with Session(engine) as session, session.begin():
            tokens = [create_token(session, f"race-host-{i}", ["worker"]) for i in range(RACERS)]
    finally:
        engine.dispose()
    for index, token in enumerate(tokens):
        response = httpx.post(
            f"{urls[index % len(urls)]}/v1/workers",
            json={"name": f"racer-{index}", "devices": [RACE_DEVICE]},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code == 201, response.text
        racers.append((token, response.json()["id"]))
    for _round in range(ROUNDS):
        _race_once(urls, racers, admin)


def _race_once(urls: list[str], racers: list[tuple[str, str]], admin: str) -> None:
    body = {
        "op": "reduce",
        "dtype": "f32",
        "problems": [{"m": 64, "k": 64, "kind": "sum"}],
        "device": {"backend": "cpu", "name": "Race CPU"},
        "budget": {"max_variants": 1},
    }
    auth = {"Authorization": f"Bearer {admin}"}
    created = httpx.post(f"{urls[0]}/v1/jobs", json=body, headers=auth, timeout=30)
    assert created.status_code == 202, created.text
    barrier = threading.Barrier(len(racers))
    answers: list[tuple[int, str]] = []

    def lease(index: int) -> None:
        token, worker_id = racers[index]
        with httpx.Client(timeout=60) as http:
            barrier.wait()
            response = http.post(
                f"{urls[index % len(urls)]}/v1/leases",
                json={"worker_id": worker_id, "backends": ["cpu"]},
                headers={"Authorization": f"Bearer {token}"},
            )
        answers.append((response.status_code, response.text))

    threads = [threading.Thread(target=lease, args=(i,)) for i in range(len(racers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] + [204] * (len(racers) - 1), answers
    cancelled = httpx.delete(f"{urls[0]}/v1/jobs/{created.json()['id']}", headers=auth)
    assert cancelled.status_code == 200, cancelled.text


def test_racing_lease_requests_on_postgresql_get_one_winner(team: Team) -> None:
    _race([team.url_a, team.url_b], team.database_url, team.admin)
    with team.session() as session:
        racing = select(Task).join(Job).where(Job.device["name"].as_string() == "Race CPU")
        assert all(t.lease_id for t in session.scalars(racing))


def test_racing_lease_requests_on_sqlite_get_one_winner(
    tmp_path: Path, _sqlite_template: Path
) -> None:
    path = tmp_path / "tunehub.db"
    path.write_bytes(_sqlite_template.read_bytes())
    url = f"sqlite:///{path}"
    procs = Processes(tmp_path)
    try:
        first, url_1 = procs.api("api-1", url)
        second, url_2 = procs.api("api-2", url)
        _wait_healthy(first, url_1)
        _wait_healthy(second, url_2)
        _race([url_1, url_2], url, create_token_in_db(url, "admin", ["admin"]))
    finally:
        procs.stop_all()


# -- an API process is killed during an upload; the upload is retried ----------------------


def test_api_killed_inside_an_upload_loses_nothing_and_a_retry_adds_no_rows(team: Team) -> None:
    """Hold the best-config row locked so that API B's upload transaction waits inside its
    upsert (its measurements written, not committed); SIGKILL B there; then the worker retries
    the same upload through API A."""
    with team.session() as session:
        reference = session.scalars(
            select(Task).where(Task.job_id == team.reference_job).order_by(Task.position)
        ).first()
        assert reference is not None
        rows = list(session.scalars(select(Measurement).where(Measurement.task_id == reference.id)))
        device = session.get(Device, rows[0].device_id)
        toolchain = session.get(Toolchain, rows[0].toolchain_id)
        variants = {v.id: v for v in session.scalars(select(Variant))}
        best_before = session.scalars(
            select(BestConfig).where(BestConfig.problem_key == reference.problem_key)
        ).one()
        assert device is not None and toolchain is not None
    device_body = {
        "backend": device.backend,
        "name": device.name,
        "arch": device.arch,
        "sm_count": device.sm_count,
        "driver": device.driver,
        "runtime": device.runtime,
        "memory_bytes": device.memory_bytes,
    }
    token = team.worker_token("upload-host")
    headers = team.headers(token)
    registered = httpx.post(
        f"{team.url_b}/v1/workers",
        json={"name": "uploader", "devices": [device_body]},
        headers=headers,
        timeout=30,
    )
    assert registered.status_code == 201, registered.text
    job_id = team.submit(team.url_b, [reference.problem])
    leased = httpx.post(
        f"{team.url_b}/v1/leases",
        json={"worker_id": registered.json()["id"], "backends": ["cpu"]},
        headers=headers,
        timeout=30,
    )
    assert leased.status_code == 200, leased.text
    lease_id = leased.json()["lease_id"]
    task_id = leased.json()["task"]["task_id"]
    # the same candidates, scaled so that the fastest runs at half the stored best config's
    # median (which may be the team run's winner, faster than this task's): the upsert must
    # replace it
    fastest = min(m.median_us for m in rows if m.median_us)
    with team.session() as session:
        incumbent = session.get(Measurement, best_before.measurement_id)
        assert incumbent is not None and incumbent.median_us is not None
        scale = 0.5 * incumbent.median_us / fastest
    upload = {
        "device": device_body,
        "toolchain": {
            "compiler": toolchain.compiler,
            "template_version": toolchain.template_version,
            "libraries": toolchain.libraries,
        },
        "measurements": [
            {
                "variant_id": m.variant_id,
                "variant_name": variants[m.variant_id].name,
                "params": variants[m.variant_id].params,
                "outcome": m.outcome,
                "median_us": (m.median_us or fastest) * scale,
                "p20_us": (m.median_us or fastest) * scale * 0.99,
                "p80_us": (m.median_us or fastest) * scale * 1.01,
                "min_us": (m.median_us or fastest) * scale * 0.98,
                "reps": 10,
            }
            for m in rows
        ],
        "final": True,
    }

    with psycopg.connect(_psycopg_url(team.database_url), autocommit=False) as blocker:
        blocker.execute("SELECT id FROM best_configs WHERE id = %s FOR UPDATE", [best_before.id])
        outcome: dict[str, Any] = {}

        def send() -> None:
            try:
                outcome["response"] = httpx.post(
                    f"{team.url_b}/v1/leases/{lease_id}/results",
                    json=upload,
                    headers=headers,
                    timeout=60,
                )
            except httpx.HTTPError as exc:
                outcome["error"] = exc

        sender = threading.Thread(target=send)
        sender.start()

        def upload_waits_on_the_lock() -> bool:
            with psycopg.connect(_psycopg_url(team.database_url), autocommit=True) as probe:
                waiting = probe.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE NOT l.granted AND a.datname = current_database()"
                ).fetchone()
            return bool(waiting and waiting[0])

        _until(
            "the upload to wait inside its transaction", upload_waits_on_the_lock, 30, [team.api_b]
        )
        team.api_b.kill9()
        sender.join(timeout=30)
        assert "error" in outcome, outcome  # the client saw the server die mid-request
        blocker.rollback()

    def task_unlocked() -> bool:
        # B's backend rolls its transaction back once it finds its client gone
        with psycopg.connect(_psycopg_url(team.database_url), autocommit=True) as probe:
            try:
                with probe.transaction():
                    probe.execute("SELECT id FROM tasks WHERE id = %s FOR UPDATE NOWAIT", [task_id])
                return True
            except psycopg.errors.LockNotAvailable:
                return False

    _until("API B's transaction to roll back", task_unlocked, 30, [])
    with team.session() as session:
        assert session.scalar(select(func.count()).where(Measurement.task_id == task_id)) == 0
        task = session.get(Task, task_id)
        assert task is not None and task.status == "running" and task.lease_id == lease_id
        best = session.get(BestConfig, best_before.id)
        assert best is not None and best.measurement_id == best_before.measurement_id
        _assert_consistent(session)

    # the worker retries the whole upload through API A: stored once, and the best config
    # follows the replacement rule
    retried = httpx.post(
        f"{team.url_a}/v1/leases/{lease_id}/results", json=upload, headers=headers, timeout=60
    )
    assert retried.status_code == 200, retried.text
    assert retried.json()["stored"] == len(rows)
    again = httpx.post(
        f"{team.url_a}/v1/leases/{lease_id}/results", json=upload, headers=headers, timeout=60
    )
    # refused as final already (409), or the first answer replayed: nothing more is written
    assert again.status_code in (200, 409), again.text
    with team.session() as session:
        assert session.scalar(select(func.count()).where(Measurement.task_id == task_id)) == len(
            rows
        )
        task = session.get(Task, task_id)
        assert task is not None and task.status == "done"
        best = session.get(BestConfig, best_before.id)
        incumbent = session.get(Measurement, best_before.measurement_id)
        candidate = session.get(Measurement, task.winner_measurement_id)
        assert best is not None and incumbent is not None and candidate is not None
        assert best.measurement_id == _expected_best(session, incumbent, candidate).id
        _assert_consistent(session)
    assert team.job(job_id)["status"] == "done"


def _assert_consistent(session: Session) -> None:
    """Every best config names an existing verified measurement of its own key, and every
    finished task's winner is one of its own measurements."""
    for best in session.scalars(select(BestConfig)):
        measurement = session.get(Measurement, best.measurement_id)
        assert measurement is not None, best.id
        assert measurement.outcome == "ok"
        assert (measurement.op, measurement.problem_key, measurement.device_id) == (
            best.op,
            best.problem_key,
            best.device_id,
        )
        assert measurement.toolchain_id == best.toolchain_id
    for task in session.scalars(select(Task).where(Task.winner_measurement_id.is_not(None))):
        winner = session.get(Measurement, task.winner_measurement_id)
        assert winner is not None and winner.task_id == task.id


def _measured(api: Any, job_id: str) -> list[str]:
    answer = api.client.get("/v1/measurements", params={"job_id": job_id})
    assert answer.status_code == 200, answer.text
    return sorted(m["variant_name"] for m in answer.json()["measurements"])


def _retry_final(api: Any, lease_id: str, measurements: list[dict[str, Any]]) -> None:
    """A final upload sent again: refused as final already (409) or answered as the first
    one was (an idempotent replay); either way nothing is written."""
    body = {
        "device": api.CPU_DEVICE,
        "toolchain": api.TOOLCHAIN,
        "measurements": measurements,
        "final": True,
    }
    response = api.client.post(
        f"/v1/leases/{lease_id}/results", json=body, headers=api.harness.worker
    )
    assert response.status_code in (200, 409), response.text


def test_a_retried_batch_adds_no_rows_on_both_databases(api: Any) -> None:
    job = api.submit()
    leased = api.lease(api.register())
    batch = [api.measurement("a", 10.0), api.measurement("b", 12.0)]
    api.upload(leased["lease_id"], batch, final=False)
    api.upload(leased["lease_id"], batch, final=False)
    assert _measured(api, job["id"]) == ["a", "b"]
    last = [api.measurement("b", 12.0), api.measurement("c", 9.0)]
    api.upload(leased["lease_id"], last)
    _retry_final(api, leased["lease_id"], last)
    assert _measured(api, job["id"]) == ["a", "b", "c"]
    finished = api.get_job(job["id"])
    assert finished["status"] == "done"
    assert finished["problems"][0]["winner"]["variant_name"] == "c"


def test_a_requeued_task_keeps_one_row_per_variant(api: Any) -> None:
    """The first lease uploaded part of its work and died; the next lease measures every
    candidate again: the task keeps the first rows and adds only the new variants."""
    job = api.submit()
    first = api.lease(api.register(name="first"))
    api.upload(first["lease_id"], [api.measurement("a", 10.0)], final=False)
    with api.harness.sessionmaker() as session:
        task = session.get(Task, first["task"]["task_id"])
        task.lease_expires_at = task.lease_expires_at.replace(year=2000)
        session.commit()
    second = api.lease(api.register(name="second"))
    assert second["task"]["task_id"] == first["task"]["task_id"]
    api.upload(second["lease_id"], [api.measurement("a", 11.0), api.measurement("b", 12.0)])
    assert _measured(api, job["id"]) == ["a", "b"]
    assert api.get_job(job["id"])["problems"][0]["winner"]["variant_name"] == "a"
