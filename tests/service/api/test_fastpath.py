"""The cached lookup path (service.api.fastpath): the same bytes as the FastAPI route, errors
and tokens left to the route, and a write from any process seen by the next lookup."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, update

from service.api.fastpath import CachedLookupMiddleware
from service.store.models import ApiToken, BestConfig
from tests.service.store.test_lookup_index import H200, NEW_TC, _store

REPO = Path(__file__).resolve().parents[3]
EXACT = {"op": "gemm", "dtype": "f16", "m": 256, "n": 256, "k": 256}
NEAREST = {"op": "gemm", "dtype": "f16", "m": 300, "n": 256, "k": 256}


def _middleware(api: Any) -> CachedLookupMiddleware:
    layer: Any = api.client.app.middleware_stack
    while not isinstance(layer, CachedLookupMiddleware):
        layer = layer.app
    return layer


@contextmanager
def _statements(api: Any) -> Iterator[list[str]]:
    """The SQL statements the app's engine runs inside the block (none on a cache hit)."""
    engine = api.harness.client.app.state.engine
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(args[2])

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


def _seed(api: Any, median: float = 5.0, name: str = "a") -> None:
    with api.harness.sessionmaker() as session:
        _store(session, "gemm", {"m": 256, "n": 256, "k": 256}, median, H200, NEW_TC, name)
        session.commit()


def _touch(api: Any) -> None:
    with api.harness.sessionmaker() as session:
        session.execute(update(BestConfig).values(confirmed=BestConfig.confirmed))
        session.commit()


def _same(first: Any, second: Any) -> None:
    assert first.status_code == second.status_code
    assert first.content == second.content
    assert list(first.headers.multi_items()) == list(second.headers.multi_items())


def test_a_cached_answer_is_the_routes_answer_byte_for_byte(api: Any, monkeypatch: Any) -> None:
    # the read model off (it answers these from memory: test_read_model.py), so every miss
    # goes to the route and its answer is kept
    monkeypatch.setattr(_middleware(api).model, "answer", lambda query: None)
    _seed(api)
    for params in (EXACT, NEAREST):
        with _statements(api) as routed:
            first = api.best(**params)  # a miss: the FastAPI route answers
        with _statements(api) as cached:
            second = api.best(**params)  # a hit: replayed, no statement
        assert first.status_code == 200 and routed
        assert not cached
        assert first.json()["exact"] is (params is EXACT)
        _same(first, second)
    etag = api.best(**EXACT).headers["etag"]
    for tag in (etag, f'"other", W/{etag}', "*", '"x"'):
        _touch(api)  # a write to the answer's rows that changes nothing: the cache starts over
        headers = {"If-None-Match": tag}
        with _statements(api) as routed:
            first = api.client.get("/v1/configs/best", params=EXACT, headers=headers)
        if first.status_code == 304:  # a 304 is not kept: keep the 200, then ask again
            api.best(**EXACT)
        with _statements(api) as cached:
            second = api.client.get("/v1/configs/best", params=EXACT, headers=headers)
        assert routed and not cached
        assert first.status_code == (200 if tag == '"x"' else 304)
        _same(first, second)


def test_the_same_query_in_another_parameter_order_is_the_same_answer(api: Any) -> None:
    _seed(api)
    first = api.client.get("/v1/configs/best?op=gemm&dtype=f16&m=256&n=256&k=256")
    with _statements(api) as cached:
        second = api.client.get("/v1/configs/best?k=256&n=256&m=256&dtype=f16&op=gemm")
    assert first.status_code == 200 and not cached
    _same(first, second)
    repeated = api.client.get("/v1/configs/best?op=gemm&dtype=f16&m=256&n=256&k=256&m=256")
    assert repeated.status_code == 422  # a repeated dim is the route's error, never kept


def test_errors_and_not_found_are_the_routes_and_never_kept(api: Any) -> None:
    _seed(api)
    bad = [
        {"dtype": "f16", "m": 1, "n": 1, "k": 1},  # op missing
        {**EXACT, "op": "matmul"},
        {**EXACT, "dtype": "f64"},
        {**EXACT, "layout": "xyz"},
        {**EXACT, "backend": "tpu"},
        {**EXACT, "m": "many"},
        {**EXACT, "m": 0},
        {"op": "gemm", "dtype": "f16", "m": 1, "n": 1},  # k missing
        {"op": "gemm", "dtype": "bf16", "m": 1, "n": 1, "k": 1},  # not tuned: 404
    ]
    for params in bad:
        first = api.best(**params)
        with _statements(api) as routed:
            second = api.best(**params)
        assert first.status_code in (404, 422), first.text
        _same(first, second)
        assert routed or first.status_code == 422  # answered by the route again, not kept
    assert not _middleware(api).answers.entries
    fields = {tuple(d["loc"]) for p in bad[:5] for d in api.best(**p).json()["detail"]}
    assert {("query", "op"), ("query", "dtype"), ("query", "layout")} <= fields
    assert ("query", "backend") in fields


def test_tokens_are_checked_by_the_route_even_when_an_answer_is_kept(api: Any) -> None:
    _seed(api)
    assert api.best(**EXACT).status_code == 200
    assert api.best(**EXACT).status_code == 200  # kept
    bad = {"Authorization": "Bearer th_not-a-token"}
    assert api.client.get("/v1/configs/best", params=EXACT, headers=bad).status_code == 401
    app = api.client.app
    app.state.settings = app.state.settings.model_copy(update={"read_token_required": True})
    assert api.best(**EXACT).status_code == 401
    read = api.client.get("/v1/configs/best", params=EXACT, headers=api.harness.read)
    assert read.status_code == 200 and read.json()["variant_name"] == "a"
    with _statements(api) as cached:  # the route accepted this token: now a kept answer
        again = api.client.get("/v1/configs/best", params=EXACT, headers=api.harness.read)
    _same(read, again)
    assert not cached
    for other in ({"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer"}, bad):
        refused = api.client.get("/v1/configs/best", params=EXACT, headers=other)
        assert refused.status_code == 401, other
    with api.harness.sessionmaker() as session:  # revoked: a commit, so the route decides
        session.execute(update(ApiToken).values(revoked=True))
        session.commit()
    revoked = api.client.get("/v1/configs/best", params=EXACT, headers=api.harness.read)
    assert revoked.status_code == 401


def test_a_write_from_another_process_is_seen_by_the_next_lookup(api: Any) -> None:
    _seed(api)
    assert api.best(**EXACT).json()["variant_name"] == "a"
    assert api.best(**EXACT).json()["variant_name"] == "a"  # now kept
    url = api.client.app.state.settings.database_url
    script = textwrap.dedent(
        f"""
        from sqlalchemy.orm import Session
        from service.store.db import make_engine
        from tests.service.store.test_lookup_index import H200, NEW_TC, _store
        with Session(make_engine({url!r})) as session:
            _store(session, "gemm", {{"m": 256, "n": 256, "k": 256}}, 1.0, H200, NEW_TC, "b")
            session.commit()
        """
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True, timeout=120)
    answer = api.best(**EXACT)
    assert answer.status_code == 200 and answer.json()["variant_name"] == "b"


def test_metrics_count_cached_answers_under_the_route(api: Any) -> None:
    _seed(api)
    for _ in range(3):
        assert api.best(**EXACT).status_code == 200
    text = api.client.get("/metrics").text
    assert (
        'tunehub_http_requests_total{method="GET",route="/v1/configs/best",status="200"} 3.0'
        in text
    )
