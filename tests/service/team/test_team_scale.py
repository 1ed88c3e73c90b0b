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

import threading
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.cli.serve import create_token_in_db
from service.store.best import decide_winner, replaces_stored
from service.store.db import make_engine
from service.store.models import (
    BestConfig,
    Device,
    Job,
    Lease,
    Measurement,
    Task,
    Toolchain,
    Variant,
)
from service.store.tokens import create_token
from tests.service.team.conftest import (
    MAX_VARIANTS,
    TEAM_PROBLEMS,
    Processes,
    Team,
    psycopg_url,
    until,
    wait_healthy,
)

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
        wait_healthy(first, url_1)
        wait_healthy(second, url_2)
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

    with psycopg.connect(psycopg_url(team.database_url), autocommit=False) as blocker:
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
            with psycopg.connect(psycopg_url(team.database_url), autocommit=True) as probe:
                waiting = probe.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE NOT l.granted AND a.datname = current_database()"
                ).fetchone()
            return bool(waiting and waiting[0])

        until(
            "the upload to wait inside its transaction", upload_waits_on_the_lock, 30, [team.api_b]
        )
        team.api_b.kill9()
        sender.join(timeout=30)
        assert "error" in outcome, outcome  # the client saw the server die mid-request
        blocker.rollback()

    def task_unlocked() -> bool:
        # B's backend rolls its transaction back once it finds its client gone
        with psycopg.connect(psycopg_url(team.database_url), autocommit=True) as probe:
            try:
                with probe.transaction():
                    probe.execute("SELECT id FROM tasks WHERE id = %s FOR UPDATE NOWAIT", [task_id])
                return True
            except psycopg.errors.LockNotAvailable:
                return False

    until("API B's transaction to roll back", task_unlocked, 30, [])
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
