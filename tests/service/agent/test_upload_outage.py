"""A short outage of the service costs a worker nothing: its uploads are sent again, the same
body each time, and the service answers a copy it stored as ``replayed`` (service.agent.uploads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from service.agent import WorkerAgent
from service.agent.uploads import upload_until
from service.client import ConnectionFailed, TunehubClient
from service.client._retry import RetryPolicy
from service.schemas.worker import ResultsIn, ResultsOut
from service.settings import Settings
from service.store.db import make_engine, make_sessionmaker
from service.store.models import Measurement
from service.store.tokens import create_token
from tests.service.conftest import LiveService
from tests.tuner.stand_ins import StandInBackend
from tuner.types import EngineConfig


class OutageClient(TunehubClient):
    """The real client, whose first final upload finds the service stopped: ``outage`` stops
    it, and restarts it on the same port after ``seconds`` (a test double of a restart)."""

    def __init__(self, *args: Any, outage: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outage: Callable[[], None] | None = outage
        self.bodies: list[str] = []

    def upload_results(self, lease_id: str, results: ResultsIn) -> ResultsOut:
        if results.final:
            self.bodies.append(results.model_dump_json())
            if self.outage is not None:
                self.outage, outage = None, self.outage
                outage()
        return super().upload_results(lease_id, results)


def _tokens(settings: Settings) -> dict[str, str]:
    engine = make_engine(settings.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            tokens = {scope: create_token(session, f"outage-{scope}", [scope]) for scope in
                      ("submit", "worker")}  # fmt: skip
            session.commit()
        return tokens
    finally:
        engine.dispose()


def _count(settings: Settings) -> int:
    engine = make_engine(settings.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            return int(session.scalar(select(func.count()).select_from(Measurement)) or 0)
    finally:
        engine.dispose()


def test_the_final_upload_outlives_a_restart_of_the_service(
    settings: Settings, live_service: Callable[[Settings], LiveService], tmp_path: Path
) -> None:
    service = live_service(settings)
    tokens = _tokens(settings)
    job = httpx.post(
        f"{service.url}/v1/jobs",
        json={
            "op": "reduce",
            "dtype": "f32",
            "problems": [{"m": 1024, "k": 4096, "kind": "sum"}],
            "device": {"backend": "cpu"},
            "budget": {"max_variants": 4},
        },
        headers={"Authorization": f"Bearer {tokens['submit']}"},
    ).json()
    restarted: list[LiveService] = []
    timers: list[threading.Timer] = []
    back = threading.Event()

    def outage() -> None:
        service.stop()

        def restart() -> None:
            restarted.append(LiveService(settings, port=service.port).start())
            back.set()

        timers.append(threading.Timer(1.5, restart))
        timers[-1].start()

    client = OutageClient(
        service.url, tokens["worker"], retry=RetryPolicy(attempts=1), outage=outage
    )
    agent = WorkerAgent(
        client,
        EngineConfig(cache_dir=str(tmp_path / "cache"), compile_workers=1),
        ("cpu",),
        backend_factory=lambda name, config: StandInBackend(config),
        upload_batch=1000,
        upload_interval_s=1e9,
        upload_retry_s=60.0,
    )
    try:
        assert agent.run_once() is True  # before: ConnectionFailed, the task left to expire
        assert back.is_set()
        shown = httpx.get(f"{restarted[0].url}/v1/jobs/{job['id']}").json()
        assert shown["status"] == "done", shown
        assert shown["problems"][0]["winner"] is not None
        # the final upload was sent again as it was: one body, several tries, one row each
        assert len(client.bodies) >= 2 and len(set(client.bodies)) == 1
        assert _count(settings) == 4
    finally:
        client.close()
        for timer in timers:  # a failed run must not restart the service after the test
            timer.cancel()
            timer.join()
        for started in restarted:
            started.stop()


class FlakyUploads:
    """A client double: upload_results fails ``failures`` times as if the service were down,
    then answers; every body it was sent is kept."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.bodies: list[str] = []

    def upload_results(self, lease_id: str, results: ResultsIn) -> ResultsOut:
        self.bodies.append(results.model_dump_json())
        if self.failures:
            self.failures -= 1
            raise ConnectionFailed("http://tunehub", "connection refused")
        return ResultsOut(stored=len(results.measurements))


def test_a_final_upload_is_sent_again_the_same_until_it_gets_through() -> None:
    body = ResultsIn(final=True, error="boom")
    client = FlakyUploads(failures=3)
    waits: list[float] = []
    answer = upload_until(client, "L1", body, 60.0, waits.append)  # type: ignore[arg-type]
    assert answer.stored == 0
    assert len(client.bodies) == 4 and len(set(client.bodies)) == 1
    assert waits == [0.5, 1.0, 2.0]


def test_past_the_window_the_outage_is_the_caller_s() -> None:
    client = FlakyUploads(failures=5)
    with pytest.raises(ConnectionFailed):
        upload_until(client, "L1", ResultsIn(final=True), 0.0, lambda _: None)  # type: ignore[arg-type]
    assert len(client.bodies) == 1


def test_a_batch_the_service_cannot_take_goes_with_the_next_upload() -> None:
    from types import SimpleNamespace

    from service.agent.uploads import TaskState, UploadingObserver
    from service.schemas.common import DeviceReport
    from service.schemas.worker import MeasurementIn, ToolchainReport

    client = FlakyUploads(failures=1)
    agent = SimpleNamespace(client=client, upload_retry_s=60.0, sleep=lambda _: None)
    state = TaskState(lease_id="L1")
    observer = UploadingObserver(
        agent,  # type: ignore[arg-type]
        state,
        DeviceReport(backend="cpu", name="c", arch="x", sm_count=1),
        ToolchainReport(compiler="cc", template_version="t"),
    )

    def item(name: str) -> MeasurementIn:
        return MeasurementIn(
            variant_id=name, variant_name=name, params={}, outcome="ok", median_us=1.0
        )

    state.pending = [item("a"), item("b")]
    assert observer.flush(final=False) is None  # the service is down: kept, tuning goes on
    assert [m.variant_id for m in state.pending] == ["a", "b"]
    state.pending.append(item("c"))
    assert observer.flush(final=True) is not None
    sent = [ResultsIn.model_validate_json(body) for body in client.bodies]
    assert [m.variant_id for m in sent[-1].measurements] == ["a", "b", "c"]
