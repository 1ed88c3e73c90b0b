"""The lookup path: the in-memory best-config index against a brute-force reference, its
freshness across sessions and processes, the batch's statement count, ETags and /metrics."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.orm import Session

from service.errors import NotFound
from service.schemas.configs import BestConfigOut
from service.store import best_index
from service.store.best import upsert_best
from service.store.db import make_engine
from service.store.keys import device_row, ensure_variants, toolchain_row
from service.store.lookup import LookupQuery, find_best, find_best_many, log_distance
from service.store.models import BestConfig, Device, Measurement, Task, Toolchain, Worker, utcnow
from tuner.problems import problem_from_dict

REPO = Path(__file__).resolve().parents[3]
H200 = {"backend": "cuda", "name": "NVIDIA H200", "arch": "sm_90", "sm_count": 132}
H100 = {"backend": "cuda", "name": "NVIDIA H100", "arch": "sm_90", "sm_count": 132}
CPU = {"backend": "cpu", "name": "Test CPU", "arch": "x86_64", "sm_count": 8}
OLD_TC = {"compiler": "nvcc 12.8", "template_version": "t1", "libraries": {}}
NEW_TC = {"compiler": "nvcc 13.0", "template_version": "t2", "libraries": {}}


def _store(
    session: Session,
    op: str,
    problem: dict[str, Any],
    median: float,
    device: dict[str, Any],
    toolchain: dict[str, Any],
    name: str,
    dtype: str = "f16",
) -> None:
    """One verified measurement, made the best config of its key by the store's own rule."""
    parsed = problem_from_dict(op, problem)
    dev = device_row(session, **device)
    tc = toolchain_row(session, **toolchain)
    ensure_variants(session, op, [(f"sha-{name}", name, {"name": name})])
    layout = {"gemm": "rcr", "reduce": "row"}[op]
    measurement = Measurement(
        variant_id=f"sha-{name}",
        op=op,
        dtype=dtype,
        layout=layout,
        problem=parsed.dims(),
        problem_key=parsed.key(),
        device_id=dev.id,
        toolchain_id=tc.id,
        outcome="ok",
        median_us=median,
    )
    session.add(measurement)
    session.flush()
    upsert_best(session, measurement)


def _reference(session: Session, query: LookupQuery) -> tuple[str, dict[str, Any], bool, float]:
    """The lookup rule, by brute force over every row (what service/store/lookup.py did)."""
    devices = list(session.scalars(select(Device).order_by(Device.id)))
    if query.backend:
        devices = [d for d in devices if d.backend == query.backend]
    if query.device:
        exact = [d for d in devices if d.key() == query.device]
        devices = exact or [d for d in devices if query.device.lower() in d.name.lower()]
    wanted, key = query.problem.dims(), query.problem.key()
    candidates = []
    for dev in devices:
        rows = session.execute(
            select(BestConfig, Toolchain, Measurement)
            .join(Toolchain, Toolchain.id == BestConfig.toolchain_id)
            .join(Measurement, Measurement.id == BestConfig.measurement_id)
            .where(
                BestConfig.op == query.op,
                BestConfig.dtype == query.dtype,
                BestConfig.layout == query.layout,
                BestConfig.device_id == dev.id,
            )
        ).all()
        if query.toolchain is not None:
            rows = [
                r
                for r in rows
                if query.toolchain in (r[1].key, r[1].compiler, r[1].template_version)
            ]
        elif rows:
            newest = max((r[1] for r in rows), key=lambda t: (t.created_at, t.id))
            rows = [r for r in rows if r[1].id == newest.id]
        for best, _tc, measurement in rows:
            if best.problem_key == key:
                distance: float | None = 0.0
            else:
                distance = log_distance(wanted, best.problem, query.problem.dim_names)
            if distance is not None:
                candidates.append((distance, best, measurement))
    if not candidates:
        raise NotFound("nothing")
    candidates.sort(key=lambda c: (c[0], -c[1].updated_at.timestamp(), c[1].id))
    distance, best, measurement = candidates[0]
    return measurement.variant_id, best.problem, best.problem_key == key, distance


def _seed_random(session: Session, rng: random.Random) -> None:
    for i in range(160):
        dims = {d: 2 ** rng.randint(4, 12) for d in ("m", "n", "k")}
        device = rng.choice([H200, H200, H100, CPU])
        toolchain = rng.choice([OLD_TC, NEW_TC, NEW_TC])
        _store(session, "gemm", dims, rng.uniform(1, 100), device, toolchain, f"g{i}")
    for i in range(40):
        dims = {"m": 2 ** rng.randint(4, 12), "k": 2 ** rng.randint(4, 12)}
        dims["kind"] = rng.choice(["sum", "max"])
        _store(session, "reduce", dims, rng.uniform(1, 100), H200, NEW_TC, f"r{i}", dtype="f32")
    # equidistant neighbours of 64^3 on one device: the most recently updated must answer
    for m in (32, 128):
        _store(session, "gemm", {"m": m, "n": 64, "k": 64}, 5.0, H200, NEW_TC, f"tie{m}")
    session.commit()


def _random_queries(rng: random.Random, count: int) -> list[LookupQuery]:
    queries = [
        LookupQuery("gemm", "f16", "rcr", problem_from_dict("gemm", {"m": 64, "n": 64, "k": 64}))
    ]
    for _ in range(count):
        if rng.random() < 0.8:
            dims: dict[str, Any] = {d: 2 ** rng.randint(3, 13) for d in ("m", "n", "k")}
            op, dtype, layout = "gemm", "f16", "rcr"
        else:
            dims = {"m": 2 ** rng.randint(3, 13), "k": 2 ** rng.randint(3, 13)}
            dims["kind"] = rng.choice(["sum", "max", "mean"])
            op, dtype, layout = "reduce", "f32", "row"
        device = rng.choice([None, None, "H200", "h100", "cuda:NVIDIA H200:sm_90:132", "A100"])
        backend = rng.choice([None, None, None, "cuda", "cpu"])
        toolchain = rng.choice([None, None, None, "nvcc 12.8", "t2"])
        queries.append(
            LookupQuery(op, dtype, layout, problem_from_dict(op, dims), device, backend, toolchain)
        )
    return queries


def _outcome(session: Session, query: LookupQuery) -> tuple[Any, ...] | None:
    try:
        return _reference(session, query)
    except NotFound:
        return None


def _summary(answer: BestConfigOut) -> tuple[Any, ...]:
    return answer.variant_id, answer.tuned_problem, answer.exact, answer.distance


@pytest.mark.parametrize("tree_rows", [best_index.KDTREE_MIN_ROWS, 1], ids=["scan", "kdtree"])
def test_exact_and_nearest_match_a_brute_force_reference(
    database_url: str, tree_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(best_index, "KDTREE_MIN_ROWS", tree_rows)
    rng = random.Random(8)
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            _seed_random(session, rng)
        queries = _random_queries(rng, 300)
        with Session(engine) as session:
            expected = [_outcome(session, q) for q in queries]
            batch = find_best_many(session, queries)
            answered = 0
            for query, want, many in zip(queries, expected, batch, strict=True):
                try:
                    got = find_best(
                        session,
                        op=query.op,
                        dtype=query.dtype,
                        layout=query.layout,
                        problem=query.problem,
                        device=query.device,
                        backend=query.backend,
                        toolchain=query.toolchain,
                    )
                except NotFound:
                    assert want is None, query
                    assert isinstance(many, NotFound), query
                    continue
                assert want is not None, query
                variant, tuned, exact, distance = want
                assert _summary(got)[:3] == (variant, tuned, exact), query
                assert math.isclose(got.distance, round(distance, 6)), query
                assert not isinstance(many, NotFound) and _summary(many) == _summary(got)
                answered += 1
        assert answered > 150  # the draw exercises answers, not only misses
        tie = find_best_many(Session(engine), queries[:1])[0]
        assert not isinstance(tie, NotFound) and tie.variant_name == "tie128"
    finally:
        engine.dispose()


def test_a_write_from_another_session_is_seen_at_once(database_url: str) -> None:
    reader_engine, writer_engine = make_engine(database_url), make_engine(database_url)
    problem = problem_from_dict("gemm", {"m": 256, "n": 256, "k": 256})
    query: dict[str, Any] = {"op": "gemm", "dtype": "f16", "layout": "rcr", "problem": problem}
    try:
        with Session(writer_engine) as writer:
            _store(writer, "gemm", {"m": 64, "n": 64, "k": 64}, 9.0, H200, NEW_TC, "far")
            writer.commit()
        with Session(reader_engine) as reader:
            assert find_best(reader, **query).variant_name == "far"
        with Session(writer_engine) as writer:  # another engine: another process's index
            _store(writer, "gemm", {"m": 256, "n": 256, "k": 128}, 9.0, H200, NEW_TC, "near")
            writer.commit()
        with Session(reader_engine) as reader:
            assert find_best(reader, **query).variant_name == "near"
        with Session(writer_engine) as writer:  # replaced in place: same row, new winner
            _store(writer, "gemm", {"m": 256, "n": 256, "k": 128}, 1.0, H200, NEW_TC, "faster")
            writer.commit()
        with Session(reader_engine) as reader:
            assert find_best(reader, **query).variant_name == "faster"
    finally:
        reader_engine.dispose()
        writer_engine.dispose()


def test_a_write_from_another_process_is_seen_at_once(database_url: str) -> None:
    engine = make_engine(database_url)
    problem = problem_from_dict("gemm", {"m": 512, "n": 512, "k": 512})
    query: dict[str, Any] = {"op": "gemm", "dtype": "f16", "layout": "rcr", "problem": problem}
    script = textwrap.dedent(
        f"""
        from sqlalchemy.orm import Session
        from service.store.db import make_engine
        from tests.service.store.test_lookup_index import H200, NEW_TC, _store
        with Session(make_engine({database_url!r})) as session:
            _store(session, "gemm", {{"m": 512, "n": 512, "k": 512}}, 3.0, H200, NEW_TC, "other")
            session.commit()
        """
    )
    try:
        with Session(engine) as session:
            _store(session, "gemm", {"m": 16, "n": 16, "k": 16}, 9.0, H200, NEW_TC, "mine")
            session.commit()
            assert find_best(session, **query).exact is False
        subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True, timeout=120)
        with Session(engine) as session:
            answer = find_best(session, **query)
        assert answer.exact is True and answer.variant_name == "other"
    finally:
        engine.dispose()


def test_rows_committed_below_the_newest_id_are_found_by_the_recount(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL can commit a smaller id after a larger one; the count check catches it."""
    engine = make_engine(database_url)
    problem = problem_from_dict("gemm", {"m": 1024, "n": 1024, "k": 1024})
    query: dict[str, Any] = {"op": "gemm", "dtype": "f16", "layout": "rcr", "problem": problem}
    monkeypatch.setattr(best_index, "RECOUNT_SECONDS", 3600.0)
    try:
        with Session(engine) as session:
            _store(session, "gemm", {"m": 16, "n": 16, "k": 16}, 9.0, H200, NEW_TC, "far")
            session.commit()
            first_id = session.scalars(select(BestConfig.id)).one()
            # move the only row far up: the next row will sit below the newest id
            session.execute(update(BestConfig).values(id=first_id + 1000))
            session.commit()
            assert find_best(session, **query).variant_name == "far"
        with Session(engine) as session:
            _store(session, "gemm", {"m": 1024, "n": 1024, "k": 512}, 9.0, H200, NEW_TC, "late")
            late = BestConfig.problem_key == "m=1024,n=1024,k=512"
            session.execute(update(BestConfig).where(late).values(id=first_id + 500))
            session.commit()
        with Session(engine) as session:  # max(id) is unchanged: not seen until the recount
            assert find_best(session, **query).variant_name == "far"
        monkeypatch.setattr(best_index, "RECOUNT_SECONDS", 0.0)
        with Session(engine) as session:
            assert find_best(session, **query).variant_name == "late"
    finally:
        engine.dispose()


def test_batch_costs_a_constant_number_of_statements(api: Any) -> None:
    engine = api.harness.client.app.state.engine
    with api.harness.sessionmaker() as session:
        for i in range(30):
            _store(
                session, "gemm", {"m": 16 * (i + 1), "n": 64, "k": 64}, 5.0, H200, NEW_TC, f"v{i}"
            )
        session.commit()

    def statements(count: int) -> int:
        queries = []
        for i in range(count):
            m = 16 * (i % 40 + 1) + (i % 3)  # exact, nearest and (i % 40 >= 30) far ones
            queries.append({"op": "gemm", "dtype": "f16", "problem": {"m": m, "n": 64, "k": 64}})
        queries.append({"op": "reduce", "dtype": "f32", "problem": {"m": 8, "k": 8, "kind": "sum"}})
        seen: list[str] = []

        def count_statement(*args: Any) -> None:
            seen.append(args[2])

        event.listen(engine, "before_cursor_execute", count_statement)
        try:
            response = api.client.post("/v1/configs/query", json={"queries": queries})
        finally:
            event.remove(engine, "before_cursor_execute", count_statement)
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert sum(r["result"] is not None and r["result"]["exact"] for r in results) > 0
        assert sum(r["result"] is not None and not r["result"]["exact"] for r in results) > 0
        assert results[-1]["result"] is None and "not tuned yet" in results[-1]["error"]
        return len(seen)

    statements(5)  # the index is loaded once, outside the counts
    small, large = statements(10), statements(1000)
    assert small == large <= 3


def test_best_carries_an_etag_and_answers_304_while_unchanged(api: Any) -> None:
    with api.harness.sessionmaker() as session:
        _store(session, "gemm", {"m": 128, "n": 128, "k": 128}, 5.0, api.H200, NEW_TC, "a")
        session.commit()
    params = {"op": "gemm", "dtype": "f16", "m": 128, "n": 128, "k": 128}
    first = api.best(**params)
    assert first.status_code == 200
    etag = first.headers["etag"]
    assert etag.startswith('"') and first.headers["cache-control"] == "no-cache"
    again = api.client.get("/v1/configs/best", params=params, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    listed = api.client.get(
        "/v1/configs/best", params=params, headers={"If-None-Match": f'"other", W/{etag}'}
    )
    assert listed.status_code == 304
    other = api.client.get("/v1/configs/best", params=params, headers={"If-None-Match": '"x"'})
    assert other.status_code == 200 and other.json() == first.json()
    with api.harness.sessionmaker() as session:  # a faster winner changes the answer
        _store(session, "gemm", {"m": 128, "n": 128, "k": 128}, 1.0, api.H200, NEW_TC, "b")
        session.commit()
    changed = api.client.get("/v1/configs/best", params=params, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.json()["variant_name"] == "b"
    assert changed.headers["etag"] != etag
    assert "etag" not in api.best(op="gemm", dtype="bf16", m=1, n=1, k=1).headers  # 404


def test_metrics_count_requests_per_route_template_and_read_the_store(api: Any) -> None:
    api.tune([api.measurement("a", 2.0), api.measurement("b", None, outcome="timeout")])
    job = api.submit()
    api.lease(api.register(name="slow"))
    with api.harness.sessionmaker() as session:  # the lease runs out; the next claim requeues
        session.execute(
            update(Task)
            .where(Task.job_id == job["id"])
            .values(lease_expires_at=utcnow() - timedelta(seconds=5))
        )
        session.commit()
    api.lease(api.register(name="fast"))
    api.get_job(job["id"])
    assert api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").status_code == 200
    assert api.client.get("/v1/no/such/path/zq-unrouted").status_code == 404
    response = api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert (
        'tunehub_http_requests_total{method="GET",route="/v1/configs/best",status="200"} 1.0'
        in text
    )
    assert (
        'tunehub_http_requests_total{method="GET",route="/v1/jobs/{job_id}",status="200"}' in text
    )
    assert 'route="unmatched",status="404"' in text and "zq-unrouted" not in text
    assert (
        'tunehub_http_request_duration_seconds_bucket{le="0.025",method="GET",'
        'route="/v1/configs/best"}' in text
    )
    assert 'tunehub_jobs{status="done"} 1.0' in text
    assert 'tunehub_tasks{status="running"} 1.0' in text
    assert 'tunehub_variant_outcomes_total{outcome="ok"} 1.0' in text
    assert 'tunehub_variant_outcomes_total{outcome="timeout"} 1.0' in text
    assert "tunehub_lease_expiries_total 1.0" in text
    assert "tunehub_best_configs 1.0" in text
    # the fast worker holds the requeued task; the slow one is seen but busy with nothing
    fast = _worker_line(text, "tunehub_worker_slots_busy", "fast")
    assert fast == 1.0 and _worker_line(text, "tunehub_worker_slots_busy", "slow") == 0.0
    assert _worker_line(text, "tunehub_worker_connected", "fast") == 1.0
    assert 0.0 <= _worker_line(text, "tunehub_worker_last_seen_age_seconds", "fast") < 3600
    with api.harness.sessionmaker() as session:  # the slow worker goes quiet for an hour
        session.execute(
            update(Worker)
            .where(Worker.name == "slow")
            .values(last_seen_at=utcnow() - timedelta(hours=1))
        )
        session.commit()
    text = api.client.get("/metrics").text
    assert _worker_line(text, "tunehub_worker_connected", "slow") == 0.0
    assert _worker_line(text, "tunehub_worker_last_seen_age_seconds", "slow") >= 3600
    # static files count under their mount, not as "unmatched"
    assert api.client.get("/ui/static/style.css").status_code == 200
    text = api.client.get("/metrics").text
    assert 'route="/ui/static/{path}",status="200"' in text and "style.css" not in text


def _worker_line(text: str, metric: str, name: str) -> float:
    (value,) = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(metric + "{") and f'name="{name}"' in line
    ]
    return value


def test_best_checks_a_read_token_only_when_required_or_sent(api: Any) -> None:
    app = api.client.app
    params = {"op": "gemm", "dtype": "f16", "m": 8, "n": 8, "k": 8}
    bad = {"Authorization": "Bearer th_not-a-token"}
    assert api.client.get("/v1/configs/best", params=params).status_code == 404
    assert api.client.get("/v1/configs/best", params=params, headers=bad).status_code == 401
    app.state.settings = app.state.settings.model_copy(update={"read_token_required": True})
    assert api.client.get("/v1/configs/best", params=params).status_code == 401
    read = api.harness.read
    assert api.client.get("/v1/configs/best", params=params, headers=read).status_code == 404
