"""The lookups' read model (service.store.read_model): the full path's bytes and ETags, from
memory, fresh after every write (or within TUNEHUB_LOOKUP_STALENESS_MS), on both databases;
and the revisions migration 0010's triggers stamp."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select, text, update

from service.api.app import create_app
from service.api.fastpath import CachedLookupMiddleware, parse_lookup
from service.settings import Settings
from service.store.db import downgrade, make_engine, upgrade
from service.store.models import BestConfig, Device
from service.store.tokens import create_token
from tests.service.store.test_lookup_index import CPU, H100, H200, NEW_TC, OLD_TC, _store

SHAPES = [(256, 256, 256), (512, 1024, 64), (4096, 128, 4096), (16, 4096, 4096)]
QUERIES = [
    {"op": "gemm", "dtype": "f16", "m": m, "n": n, "k": k}
    for m, n, k in [*SHAPES, (300, 256, 256), (1, 1, 1), (5000, 100, 3000), (17, 4000, 4100)]
]


def _middleware(app: Any) -> CachedLookupMiddleware:
    layer: Any = app.middleware_stack
    while not isinstance(layer, CachedLookupMiddleware):
        layer = layer.app
    return layer


@contextmanager
def _statements(app: Any) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(args[2])

    event.listen(app.state.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(app.state.engine, "before_cursor_execute", count)


def _seed(maker: Any, median: float = 5.0, name: str = "a") -> None:
    with maker() as session:
        for m, n, k in SHAPES:
            _store(session, "gemm", {"m": m, "n": n, "k": k}, median, H200, NEW_TC, name)
        _store(session, "gemm", {"m": 256, "n": 256, "k": 256}, 9.0, H100, OLD_TC, "h100")
        _store(session, "reduce", {"m": 64, "k": 1024, "kind": "sum"}, 3.0, CPU, NEW_TC, "r")
        relu = {"m": 256, "n": 512, "k": 256, "epilogue": "bias_relu"}
        _store(session, "gemm", relu, 4.0, H200, NEW_TC, "fused")
        session.commit()


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def _route_answer(client: TestClient, params: dict[str, Any], monkeypatch: Any, **kw: Any) -> Any:
    """The FastAPI route's own answer (the read model and the kept answers bypassed)."""
    middleware = _middleware(client.app)
    with monkeypatch.context() as patch:
        patch.setattr(middleware.model, "answer", lambda query: None)
        middleware.answers.entries.clear()
        return client.get("/v1/configs/best", params=params, **kw)


def test_answers_are_the_full_paths_bytes_exact_and_nearest(
    client: TestClient, monkeypatch: Any
) -> None:
    _seed(client.app.state.sessionmaker)  # type: ignore[attr-defined]
    extra: list[dict[str, Any]] = [
        {"device": "H100"},
        {"device": "cuda:NVIDIA H200:sm_90:132"},
        {"backend": "cuda"},
        {"toolchain": "nvcc 12.8"},
        {},
    ]
    reduce = {"op": "reduce", "dtype": "f32", "m": 60, "k": 1000, "kind": "sum"}
    model = client.app.state.read_model  # type: ignore[attr-defined]
    fused = {**QUERIES[0], "n": 500, "epilogue": "bias_relu"}
    checked = [*({**q, **e} for q in QUERIES for e in extra), reduce, {**reduce, "m": 64}]
    for params in [*checked, fused, {**fused, "n": 512}, {**fused, "epilogue": "bias_gelu"}]:
        query = parse_lookup("&".join(f"{k}={v}" for k, v in params.items()).encode())
        assert query is not None, params
        model.check()
        from_model = model.answer(query)
        routed = _route_answer(client, params, monkeypatch)
        if routed.status_code != 200:
            assert from_model is None, params  # a 404 with its explanation is the route's
            continue
        assert from_model == routed.content, params
        served = client.get("/v1/configs/best", params=params)
        assert served.content == routed.content
        assert list(served.headers.multi_items()) == list(routed.headers.multi_items())
        etag = served.headers["etag"]
        again = client.get("/v1/configs/best", params=params, headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.headers["etag"] == etag
    assert client.get("/v1/configs/best", params={**QUERIES[4]}).json()["exact"] is False


def test_answers_come_from_memory_without_a_statement(client: TestClient) -> None:
    _seed(client.app.state.sessionmaker)  # type: ignore[attr-defined]
    assert client.get("/v1/configs/best", params=QUERIES[0]).status_code == 200  # loads
    with _statements(client.app) as seen:
        for params in QUERIES:
            client.get("/v1/configs/best", params={**params, "m": params["m"] + 7})
    assert seen == []


def test_a_processs_first_lookup_is_answered_from_memory(
    client: TestClient, monkeypatch: Any
) -> None:
    """The fast path finds the lookup route (for the metrics' label) among the routers the
    app includes, so even a new process's first lookup skips the route."""
    _seed(client.app.state.sessionmaker)  # type: ignore[attr-defined]
    model = _middleware(client.app).model
    answered: list[bytes | None] = []
    real = model.answer

    def counted(query: Any) -> bytes | None:
        answered.append(real(query))
        return answered[-1]

    monkeypatch.setattr(model, "answer", counted)
    response = client.get("/v1/configs/best", params=QUERIES[0])
    assert response.status_code == 200
    assert answered == [response.content]


def test_a_write_is_seen_by_the_next_lookup(client: TestClient, settings: Settings) -> None:
    maker = client.app.state.sessionmaker  # type: ignore[attr-defined]
    _seed(maker)
    exact = {**QUERIES[0], "device": "H200"}
    nearest = {**exact, "m": 250}
    assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "a"
    assert client.get("/v1/configs/best", params=nearest).json()["variant_name"] == "a"
    # another connection (as another process would) replaces the winner and adds a shape
    engine = make_engine(settings.database_url)
    try:
        from sqlalchemy.orm import Session

        with Session(engine) as session:
            _store(session, "gemm", {"m": 256, "n": 256, "k": 256}, 1.0, H200, NEW_TC, "b")
            _store(session, "gemm", {"m": 250, "n": 256, "k": 256}, 2.0, H200, NEW_TC, "c")
            session.commit()
    finally:
        engine.dispose()
    assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "b"
    answer = client.get("/v1/configs/best", params=nearest).json()
    assert (answer["variant_name"], answer["exact"]) == ("c", True)
    near = client.get("/v1/configs/best", params={**exact, "m": 249}).json()
    assert near["tuned_problem"] == {"m": 250, "n": 256, "k": 256}


def _import_record(problem: dict[str, int], median: float, name: str) -> dict[str, Any]:
    return {
        "op": "gemm",
        "dtype": "f16",
        "layout": "rcr",
        "problem": problem,
        "device": H200,
        "toolchain": NEW_TC,
        "variant": {"id": f"sha-{name}", "name": name, "params": {"name": name}},
        "measurement": {"outcome": "ok", "median_us": median, "p20_us": median * 0.99,
                        "p80_us": median * 1.01, "created_at": "2026-12-01T10:00:00+00:00"},
    }  # fmt: skip


def test_an_imports_rows_are_seen_by_the_next_lookup(client: TestClient) -> None:
    """New keys of an import are written in bulk (on PostgreSQL COPY and INSERT ... SELECT
    FROM unnest): the revision triggers stamp them and the change signal moves, as for a
    line written on its own (a key stored already)."""
    maker = client.app.state.sessionmaker  # type: ignore[attr-defined]
    _seed(maker)
    with maker() as session:
        token = create_token(session, "importer", ["admin"])
        session.commit()
    exact = {**QUERIES[0], "device": "H200"}
    new = {**exact, "m": 250, "n": 250}
    assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "a"  # loaded
    assert client.get("/v1/configs/best", params=new).json()["exact"] is False
    lines = [
        _import_record({"m": 250, "n": 250, "k": 256}, 2.0, "imported-new"),
        _import_record({"m": 1, "n": 2, "k": 3}, 2.0, "imported-other"),
        _import_record({"m": 256, "n": 256, "k": 256}, 1.0, "imported-faster"),
    ]
    answer = client.post(
        "/v1/import",
        content="\n".join(json.dumps(line) for line in lines),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    ).json()
    assert (answer["inserted"], answer["replaced"]) == (2, 1), answer
    found = client.get("/v1/configs/best", params=new).json()
    assert (found["variant_name"], found["exact"]) == ("imported-new", True)
    assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "imported-faster"
    other = client.get("/v1/configs/best", params={**exact, "m": 1, "n": 2, "k": 3}).json()
    assert (other["variant_name"], other["exact"]) == ("imported-other", True)


def test_staleness_lets_a_lookup_answer_from_memory_for_that_long(settings: Settings) -> None:
    stale = settings.model_copy(update={"lookup_staleness_ms": 60_000})
    app = create_app(stale)
    with TestClient(app) as client:
        _seed(app.state.sessionmaker)
        model = app.state.read_model
        model._checked_at = float("-inf")  # the seed came after the start: check once now
        exact = {**QUERIES[0], "device": "H200"}
        assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "a"
        with app.state.sessionmaker() as session:
            _store(session, "gemm", {"m": 256, "n": 256, "k": 256}, 1.0, H200, NEW_TC, "b")
            session.commit()
        with _statements(app) as seen:
            answer = client.get("/v1/configs/best", params=exact).json()
        assert answer["variant_name"] == "a" and seen == []  # within the staleness: memory
        model._checked_at = float("-inf")  # the staleness has passed
        assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "b"


def test_a_token_is_still_required_where_reads_need_one(client: TestClient) -> None:
    _seed(client.app.state.sessionmaker)  # type: ignore[attr-defined]
    app: Any = client.app
    app.state.settings = app.state.settings.model_copy(update={"read_token_required": True})
    assert client.get("/v1/configs/best", params=QUERIES[5]).status_code == 401
    bad = {"Authorization": "Bearer th_nope"}
    assert client.get("/v1/configs/best", params=QUERIES[5], headers=bad).status_code == 401


def test_odd_queries_go_to_the_route(client: TestClient) -> None:
    for raw in (
        b"op=gemm&dtype=f16&m=1&n=1&k=1&m=2",
        b"op=gemm&dtype=f16&m=1&n=1",
        b"op=gemm&dtype=f16&m=1&n=1&k=1&device=%00",
        b"op=gemm&dtype=f16&m=1&n=1&k=1&layout=",
        b"op=gemm&dtype=f64&m=1&n=1&k=1",
        b"op=gemm&dtype=f16&m=-1&n=1&k=1",
    ):
        assert parse_lookup(raw) is None, raw
    assert parse_lookup(b"op=gemm&dtype=f16&m=1&n=1&k=1") is not None


def _revisions(url: str) -> dict[int, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return dict(connection.execute(select(BestConfig.id, BestConfig.revision)).all())
    finally:
        engine.dispose()


def test_migration_0010_stamps_revisions_and_downgrades(database_url: str) -> None:
    from sqlalchemy.orm import Session

    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            _store(session, "gemm", {"m": 8, "n": 8, "k": 8}, 5.0, H200, NEW_TC, "a")
            _store(session, "gemm", {"m": 16, "n": 8, "k": 8}, 5.0, H200, NEW_TC, "a")
            session.commit()
        first = _revisions(database_url)
        assert len(first) == 2 and all(r is not None for r in first.values())
        with Session(engine) as session:  # a new winner for one key: only that row moves on
            _store(session, "gemm", {"m": 8, "n": 8, "k": 8}, 1.0, H200, NEW_TC, "b")
            session.commit()
        second = _revisions(database_url)
        moved = [i for i in first if second[i] != first[i]]
        assert len(moved) == 1 and second[moved[0]] > max(first.values())
        with Session(engine) as session:  # a device's new driver changes its answers
            session.execute(update(Device).values(driver="999.1"))
            session.commit()
        third = _revisions(database_url)
        assert all(third[i] > second[i] for i in third)
    finally:
        engine.dispose()
    downgrade(database_url, "0009")
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            columns = connection.execute(select(BestConfig.__table__.c.id)).all()
            assert len(columns) == 2
            with pytest.raises(Exception, match="revision"):
                connection.execute(text("SELECT revision FROM best_configs"))
    finally:
        engine.dispose()
    upgrade(database_url)
    assert all(r is not None for r in _revisions(database_url).values())


def test_rows_added_after_a_kd_tree_was_built_are_still_found(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    from sqlalchemy.orm import Session

    from service.store import best_index
    from service.store.lookup import find_best, log_distance
    from tuner.problems import problem_from_dict

    monkeypatch.setattr(best_index, "KDTREE_MIN_ROWS", 1)
    monkeypatch.setattr(best_index, "TREE_TAIL_ROWS", 10_000)  # never rebuilt here
    rng = random.Random(24)
    stored: list[dict[str, int]] = []
    engine = make_engine(database_url)

    def shape() -> dict[str, int]:
        return {d: int(2 ** rng.uniform(0, 12)) for d in ("m", "n", "k")}

    try:
        for part in range(2):
            with Session(engine) as session:
                for _ in range(40):
                    problem = shape()
                    if problem not in stored:
                        stored.append(problem)
                        _store(session, "gemm", problem, 5.0, H200, NEW_TC, f"v{len(stored)}")
                session.commit()
            with Session(engine) as session:
                for _ in range(60):
                    wanted = shape()
                    got = find_best(
                        session,
                        op="gemm",
                        dtype="f16",
                        layout="rcr",
                        problem=problem_from_dict("gemm", wanted),
                    )
                    dims = ("m", "n", "k")
                    best = min(log_distance(wanted, s, dims) or 0.0 for s in stored)
                    assert got.distance == round(best, 6), (part, wanted)
            index = best_index.best_index_for(engine)
            trees = index._snapshot.trees
            assert trees and all(covered <= len(stored) for _, covered in trees.values())
        assert any(covered < len(stored) for _, covered in trees.values())  # a tail was scanned
    finally:
        engine.dispose()


def test_a_commit_is_answered_while_another_writer_is_in_flight(
    client: TestClient, settings: Settings
) -> None:
    if settings.is_sqlite:
        pytest.skip("SQLite has one writer at a time: nothing commits while one is in flight")
    from sqlalchemy.orm import Session

    maker = client.app.state.sessionmaker  # type: ignore[attr-defined]
    _seed(maker)
    exact = {**QUERIES[0], "device": "H200"}
    other = {**QUERIES[1], "device": "H200"}
    assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "a"
    engine = make_engine(settings.database_url)
    try:
        in_flight = Session(engine)
        _store(in_flight, "gemm", {"m": 256, "n": 256, "k": 256}, 1.0, H200, NEW_TC, "slow")
        in_flight.flush()  # stamped and holding the signal's lock, not committed
        with Session(engine) as session:
            _store(session, "gemm", {"m": 512, "n": 1024, "k": 64}, 1.0, H200, NEW_TC, "b")
            session.commit()
        assert client.get("/v1/configs/best", params=other).json()["variant_name"] == "b"
        assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "a"
        in_flight.commit()
        in_flight.close()
        assert client.get("/v1/configs/best", params=exact).json()["variant_name"] == "slow"
        assert client.get("/v1/configs/best", params=other).json()["variant_name"] == "b"
    finally:
        engine.dispose()


def test_a_row_stored_after_its_devices_driver_changed_answers_with_the_new_driver(
    client: TestClient, settings: Settings, monkeypatch: Any
) -> None:
    """The read model builds each device's part of the answers once; a new driver report
    (the same device key) must not leave a row stored after it with the old driver."""
    maker = client.app.state.sessionmaker  # type: ignore[attr-defined]
    _seed(maker)
    exact = {**QUERIES[0], "device": "H200"}
    before = client.get("/v1/configs/best", params=exact).json()["device"]["driver"]
    updated = {**H200, "driver": before + "-updated"}
    engine = make_engine(settings.database_url)
    try:
        from sqlalchemy.orm import Session

        with Session(engine) as session:
            _store(session, "gemm", {"m": 250, "n": 256, "k": 256}, 2.0, updated, NEW_TC, "c")
            session.commit()
    finally:
        engine.dispose()
    new = {**exact, "m": 250}
    answer = client.get("/v1/configs/best", params=new)
    assert (answer.json()["variant_name"], answer.json()["device"]["driver"]) == (
        "c",
        before + "-updated",
    )
    assert answer.content == _route_answer(client, new, monkeypatch).content
