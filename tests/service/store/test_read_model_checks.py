"""How the lookups' read model checks the database (service.store.read_model): one check shared
by the lookups that arrived before it was sent, never by one that arrived after; and on
PostgreSQL, a writer in flight costs no query per lookup while every commit finished before a
lookup is still answered."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from service.api.app import create_app
from service.settings import Settings
from service.store.db import make_engine
from service.store.freshness import ChangeSignal, Unsettled
from service.store.read_model import ReadModel
from tests.service.store.test_lookup_index import H200, NEW_TC, _store
from tests.service.store.test_read_model import QUERIES, _seed, _statements

POSTGRESQL_ONLY = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
EXACT = {**QUERIES[0], "device": "H200"}
OTHER = {**QUERIES[1], "device": "H200"}


class _HeldSignal:
    """A PostgreSQL-like signal whose reads wait until the test lets them answer."""

    is_sqlite = False

    def __init__(self) -> None:
        self.sent: list[asyncio.Event] = []  # one per read, set by the test to answer it
        self.value = 0

    def current(self, floor: int = -1) -> object:
        return self.value

    async def current_async(self, floor: int = -1) -> object:
        answer = asyncio.Event()
        self.sent.append(answer)
        value = self.value  # what the database said when the query arrived
        await answer.wait()
        return value


@pytest.fixture
def engine(database_url: str) -> Iterator[Any]:
    engine = make_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@POSTGRESQL_ONLY
def test_a_lookup_never_takes_a_check_sent_before_it_arrived(engine: Any) -> None:
    signal = _HeldSignal()
    model = ReadModel(engine, signal)  # type: ignore[arg-type]

    async def run() -> None:
        first = asyncio.ensure_future(model.check_async())
        together = asyncio.ensure_future(model.check_async())  # arrives before it is sent
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(signal.sent) == 1  # one check sent, for both
        signal.value = 1  # a commit finishes, then another lookup arrives
        late = asyncio.ensure_future(model.check_async())
        again = asyncio.ensure_future(model.check_async())
        await asyncio.sleep(0)
        signal.sent[0].set()
        assert (await first, await together) == (0, 0)
        await asyncio.sleep(0)
        assert len(signal.sent) == 2 and not late.done()  # the first check is not theirs
        signal.sent[1].set()
        assert (await late, await again) == (1, 1)
        assert model.checks == 2

    asyncio.run(run())


@POSTGRESQL_ONLY
def test_a_failed_check_fails_its_lookups_and_the_next_check_runs(engine: Any) -> None:
    signal = _HeldSignal()
    model = ReadModel(engine, signal)  # type: ignore[arg-type]

    async def broken(floor: int = -1) -> object:
        raise OSError("the server went away")

    async def run() -> None:
        with pytest.raises(OSError):
            await model.check_async()
        assert model._checking is False
        signal.value = 3
        del model._signal.current_async  # type: ignore[attr-defined]
        task = asyncio.ensure_future(model.check_async())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        signal.sent[0].set()
        assert await task == 3

    signal.current_async = broken  # type: ignore[method-assign]
    asyncio.run(run())


def test_concurrent_lookups_share_checks_and_see_every_commit(settings: Settings) -> None:
    app = create_app(settings)
    model: ReadModel = app.state.read_model
    reads: list[str] = []
    signal: ChangeSignal = model._signal
    sync_read, async_read = signal.current, signal.current_async

    def counted(floor: int = -1) -> object:
        reads.append("sync")
        return sync_read(floor)

    async def counted_async(floor: int = -1) -> object:
        reads.append("async")
        return await async_read(floor)

    signal.current, signal.current_async = counted, counted_async  # type: ignore[method-assign]
    _seed(app.state.sessionmaker)

    async def lookups(params: dict[str, Any]) -> list[str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answers = await asyncio.gather(
                *(client.get("/v1/configs/best", params=params) for _ in range(16))
            )
        return [a.json()["variant_name"] for a in answers]

    def shared() -> bool:
        if settings.is_sqlite:  # a PRAGMA of the file per lookup: nothing to share
            return reads == ["sync"] * 16
        return 1 <= len(reads) < 16 and "sync" not in reads  # before: one read per lookup

    try:
        assert asyncio.run(lookups(EXACT)) == ["a"] * 16
        assert shared()
        with app.state.sessionmaker() as session:
            _store(session, "gemm", {"m": 256, "n": 256, "k": 256}, 1.0, H200, NEW_TC, "b")
            session.commit()
        reads.clear()
        assert asyncio.run(lookups(EXACT)) == ["b"] * 16  # committed before they arrived
        assert shared()
    finally:
        signal.close()
        app.state.engine.dispose()


@POSTGRESQL_ONLY
def test_a_writer_in_flight_costs_no_query_per_lookup(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        app: Any = client.app
        _seed(app.state.sessionmaker)
        assert client.get("/v1/configs/best", params=EXACT).json()["variant_name"] == "a"
        engine = make_engine(settings.database_url)
        try:
            in_flight = Session(engine)
            _store(in_flight, "gemm", {"m": 256, "n": 256, "k": 256}, 1.0, H200, NEW_TC, "slow")
            in_flight.flush()  # stamped and holding the signal's lock, not committed
            with _statements(app) as seen:
                for _ in range(5):
                    answer = client.get("/v1/configs/best", params=EXACT).json()
                    assert answer["variant_name"] == "a"
            assert seen == []  # before: the rows above the known revision, on every lookup
            with Session(engine) as session:  # commits while the other is still in flight
                _store(session, "gemm", {"m": 512, "n": 1024, "k": 64}, 1.0, H200, NEW_TC, "b")
                session.commit()
            with _statements(app) as seen:
                assert client.get("/v1/configs/best", params=OTHER).json()["variant_name"] == "b"
            assert seen  # a revision not loaded yet was visible: loaded
            with _statements(app) as seen:
                for _ in range(5):
                    assert (
                        client.get("/v1/configs/best", params=OTHER).json()["variant_name"] == "b"
                    )
            assert seen == []
            in_flight.commit()
            in_flight.close()
            assert client.get("/v1/configs/best", params=EXACT).json()["variant_name"] == "slow"
        finally:
            engine.dispose()


@POSTGRESQL_ONLY
def test_an_unsettled_token_names_the_revisions_visible_above_the_floor(
    database_url: str, engine: Any
) -> None:
    _seed(lambda: Session(engine))  # the keys both writers share, committed first
    signal = ChangeSignal(database_url)
    try:
        floor = signal.current()
        assert isinstance(floor, int)
        in_flight = Session(engine)
        _store(in_flight, "gemm", {"m": 256, "n": 256, "k": 256}, 1.0, H200, NEW_TC, "slow")
        in_flight.flush()
        with Session(engine) as session:
            _store(session, "gemm", {"m": 512, "n": 1024, "k": 64}, 1.0, H200, NEW_TC, "b")
            session.commit()
            committed = session.execute(text("SELECT max(revision) FROM best_configs")).scalar_one()
        token = signal.current(floor)
        assert isinstance(token, Unsettled) and token.visible == {committed}
        later = asyncio.run(signal.current_async(floor))  # the event loop's read: the same
        assert isinstance(later, Unsettled) and later.visible == {committed}
        assert isinstance(signal.current(committed), Unsettled)
        assert signal.current(committed).visible == frozenset()  # type: ignore[attr-defined]
        in_flight.commit()
        in_flight.close()
        settled = asyncio.run(signal.current_async(floor))
        assert isinstance(settled, int) and settled >= committed
    finally:
        signal.close()
