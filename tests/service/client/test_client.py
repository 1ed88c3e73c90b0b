"""The client for build machines: the on-disk cache against a real server that is stopped and
started again, ETag revalidation, retries with backoff, submit + wait."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.cli.serve import create_token_in_db
from service.client import (
    SERVICE_DOWN_S,
    ApiError,
    ConnectionFailed,
    RetryPolicy,
    ServiceDown,
    TunehubClient,
    WaitTimeout,
)
from service.schemas.configs import ConfigQuery
from service.schemas.jobs import JobCreate, JobOut
from service.schemas.worker import DeviceIn, LeaseRequest, ResultsIn, WorkerRegister
from service.settings import Settings

TUNED = {"m": 1024, "k": 4096, "kind": "sum"}
UNTUNED_MAX = {"m": 1024, "k": 4096, "kind": "max"}


@pytest.fixture
def sqlite_settings(tmp_path: Path, _sqlite_template: Path) -> Settings:
    path = tmp_path / "tunehub.db"
    shutil.copyfile(_sqlite_template, path)
    return Settings(
        database_url=f"sqlite:///{path}",
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        local_worker=False,
        verify_variants=False,  # seed_best_config uploads a synthetic variant
    )


def seed_best_config(url: str, settings: Settings, median_us: float = 10.0) -> None:
    """Tune TUNED through the real API as a submitter and a worker would."""
    submit = create_token_in_db(settings.database_url, "submit", ["submit"])
    worker = create_token_in_db(settings.database_url, "worker", ["worker"])
    device = {"backend": "cpu", "name": "Test CPU", "arch": "x86_64", "sm_count": 4}
    with TunehubClient(url, submit) as user, TunehubClient(url, worker) as agent:
        job = JobCreate.model_validate(
            {"op": "reduce", "dtype": "f32", "problems": [TUNED], "device": {"backend": "cpu"}}
        )
        user.submit(job)
        worker_id = agent.register_worker(
            WorkerRegister(name="w", devices=[DeviceIn.model_validate(device)])
        ).id
        lease = agent.lease(LeaseRequest(worker_id=worker_id))
        assert lease is not None
        measurement = {
            "variant_id": "sha-p4",
            "variant_name": "reduce_f32_p4",
            "params": {"pack": 4},
            "outcome": "ok",
            "median_us": median_us,
        }
        results = ResultsIn.model_validate(
            {
                "device": device,
                "toolchain": {"compiler": "g++ 12", "template_version": "t1"},
                "measurements": [measurement],
                "final": True,
            }
        )
        agent.upload_results(lease.lease_id, results)


def query(problem: dict[str, Any]) -> ConfigQuery:
    return ConfigQuery(op="reduce", dtype="f32", problem=problem, backend="cpu")


def test_best_answers_stale_from_the_cache_while_the_service_is_down_and_fresh_when_back(
    sqlite_settings: Settings, live_service: Callable[[Settings], Any], tmp_path: Path
) -> None:
    service = live_service(sqlite_settings)
    seed_best_config(service.url, sqlite_settings)
    fast = RetryPolicy(attempts=2, backoff_s=0.01)
    # down_s=0: no "service down" hold, so best() asks again as soon as it is back
    with TunehubClient(service.url, cache_dir=tmp_path / "client", retry=fast, down_s=0) as client:
        fresh = client.best(query(TUNED))
        assert not fresh.stale and fresh.value.variant_name == "reduce_f32_p4"
        # the cache alone, no request: what best() stored (the PyTorch ops read it first)
        cached = client.best_from_cache(query(TUNED))
        assert cached is not None and cached.value == fresh.value and not cached.stale
        assert client.best_from_cache(query(UNTUNED_MAX)) is None
        assert TunehubClient(service.url).best_from_cache(query(TUNED)) is None  # no cache_dir

        service.stop()
        offline = client.best(query(TUNED))
        assert offline.stale
        assert offline.value == fresh.value
        assert offline.confirmed_at == fresh.confirmed_at
        with pytest.raises(ConnectionFailed):  # nothing cached for this one
            client.best(query(UNTUNED_MAX))

        service.start()
        back = client.best(query(TUNED))
        assert not back.stale
        assert back.confirmed_at > fresh.confirmed_at
        with pytest.raises(ApiError) as not_tuned:
            client.best(query(UNTUNED_MAX))
        assert not_tuned.value.status == 404


def test_query_caches_each_answer_for_offline_batches(
    sqlite_settings: Settings, live_service: Callable[[Settings], Any], tmp_path: Path
) -> None:
    service = live_service(sqlite_settings)
    seed_best_config(service.url, sqlite_settings)
    fast = RetryPolicy(attempts=1)
    with TunehubClient(service.url, cache_dir=tmp_path / "client", retry=fast) as client:
        online = client.query([query(TUNED), query(UNTUNED_MAX)])
        assert [a.config is not None for a in online] == [True, False]
        assert online[1].error is not None and "not tuned" in online[1].error
        assert not online[0].stale

        service.stop()
        offline = client.query([query(TUNED), query(UNTUNED_MAX)])
        assert offline[0].stale and offline[0].config == online[0].config
        assert offline[1].config is None
        assert offline[1].error is not None and "no cached answer" in offline[1].error
        # best() reads what query() cached
        assert client.best(query(TUNED)).stale


class RecordingTransport(httpx.HTTPTransport):
    """A real HTTP transport that notes each answer's (path, status)."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.answers.append((request.url.path, response.status_code))
        return response


def test_best_after_a_batch_query_revalidates_with_the_batch_etag(
    sqlite_settings: Settings, live_service: Callable[[Settings], Any], tmp_path: Path
) -> None:
    service = live_service(sqlite_settings)
    seed_best_config(service.url, sqlite_settings)
    transport = RecordingTransport()
    with TunehubClient(service.url, cache_dir=tmp_path / "client", transport=transport) as client:
        (batch,) = client.query([query(TUNED)])
        answer = client.best(query(TUNED))
    assert answer.value == batch.config
    assert transport.answers[-1] == ("/v1/configs/best", 304)  # not refetched in full


def test_after_a_failed_connection_lookups_answer_from_the_cache_without_waiting(
    sqlite_settings: Settings, live_service: Callable[[Settings], Any], tmp_path: Path
) -> None:
    service = live_service(sqlite_settings)
    seed_best_config(service.url, sqlite_settings)
    waits: list[float] = []
    transport = RecordingTransport()
    now = [0.0]
    with TunehubClient(
        service.url, cache_dir=tmp_path / "client", transport=transport, sleep=waits.append
    ) as client:
        client.service_down = ServiceDown(SERVICE_DOWN_S, clock=lambda: now[0])
        fresh = client.best(query(TUNED))
        service.stop()
        assert client.best(query(TUNED)).stale and waits  # the first lookup pays the retries
        waits.clear()
        sent = len(transport.answers)
        for _ in range(5):  # then, while the service is down: at once, nothing sent
            assert client.best(query(TUNED)).stale
            (batch,) = client.query([query(TUNED)])
            assert batch.stale and batch.config == fresh.value
        with pytest.raises(ConnectionFailed, match="not asked again"):
            client.best(query(UNTUNED_MAX))  # nothing cached: fails at once too
        assert waits == [] and len(transport.answers) == sent

        service.start()
        now[0] += SERVICE_DOWN_S  # the hold is over: asked again, and fresh
        assert not client.best(query(TUNED)).stale
        assert not client.service_down.active


def _best_body(name: str) -> dict[str, Any]:
    return {
        "op": "reduce",
        "dtype": "f32",
        "layout": "row",
        "problem": TUNED,
        "tuned_problem": TUNED,
        "exact": True,
        "distance": 0.0,
        "variant_id": f"sha-{name}",
        "variant_name": name,
        "params": {},
        "median_us": 1.0,
        "p20_us": None,
        "p80_us": None,
        "throughput": None,
        "throughput_unit": "",
        "device": {"backend": "cpu"},
        "toolchain": {},
        "measured_at": "2026-12-03T00:00:00Z",
    }


class EtagServer:
    """Test double of the service's ETag handling (the real routes gain ETags with issue 8):
    /v1/configs/best with an ETag, and 304 when If-None-Match names the current one, as the
    HTTP standard says."""

    def __init__(self) -> None:
        self.name = "first"
        self.seen: list[str | None] = []
        self.not_modified = 0
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/configs/best"
        etag = f'"{self.name}"'
        self.seen.append(request.headers.get("if-none-match"))
        if request.headers.get("if-none-match") == etag:
            self.not_modified += 1
            return httpx.Response(304, headers={"ETag": etag})
        return httpx.Response(200, json=_best_body(self.name), headers={"ETag": etag})


def test_revalidates_with_if_none_match_and_takes_a_changed_answer(tmp_path: Path) -> None:
    server = EtagServer()
    with TunehubClient(
        "http://etag.test", transport=server.transport, cache_dir=tmp_path / "client"
    ) as client:
        first = client.best(query(TUNED))
        second = client.best(query(TUNED))
        assert server.seen == [None, '"first"']
        assert server.not_modified == 1
        assert second.value == first.value and not second.stale
        server.name = "second"
        third = client.best(query(TUNED))
        assert third.value.variant_name == "second"
        assert server.seen[-1] == '"first"'
        client.best(query(TUNED))
        assert server.seen[-1] == '"second"' and server.not_modified == 2


class FlakyTransport:
    """Test double: fails the first ``failures`` requests with ``error`` (an exception or a
    status), then answers ``answer``; records every request."""

    def __init__(self, failures: int, error: Exception | int, answer: httpx.Response) -> None:
        self.failures = failures
        self.error = error
        self.answer = answer
        self.requests: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if len(self.requests) <= self.failures:
            if isinstance(self.error, int):
                return httpx.Response(self.error, headers={"Retry-After": "30"}, json={})
            raise self.error
        return self.answer


def _client(flaky: FlakyTransport, sleeps: list[float], attempts: int = 3) -> TunehubClient:
    return TunehubClient(
        "http://flaky.test",
        transport=flaky.transport,
        retry=RetryPolicy(attempts=attempts, backoff_s=0.1, max_backoff_s=1.0),
        sleep=sleeps.append,
    )


def test_reads_are_retried_with_exponential_backoff() -> None:
    refused = httpx.ConnectError("connection refused")
    flaky = FlakyTransport(2, refused, httpx.Response(200, json=_best_body("ok")))
    sleeps: list[float] = []
    answer = _client(flaky, sleeps).best(query(TUNED))
    assert answer.value.variant_name == "ok"
    assert len(flaky.requests) == 3
    assert sleeps == [0.1, 0.2]


def test_a_503_is_retried_honouring_retry_after_within_the_cap() -> None:
    flaky = FlakyTransport(1, 503, httpx.Response(200, json=_best_body("ok")))
    sleeps: list[float] = []
    assert _client(flaky, sleeps).best(query(TUNED)).value.variant_name == "ok"
    assert sleeps == [1.0]  # Retry-After 30 s, capped at max_backoff_s


def test_reads_give_up_after_the_last_attempt() -> None:
    flaky = FlakyTransport(9, httpx.ReadTimeout("slow"), httpx.Response(200))
    sleeps: list[float] = []
    with pytest.raises(ConnectionFailed, match="timed out"):
        _client(flaky, sleeps).best(query(TUNED))
    assert len(flaky.requests) == 3 and len(sleeps) == 2


def _job(status: str, done: int) -> dict[str, Any]:
    return {
        "id": "j1",
        "status": status,
        "op": "reduce",
        "dtype": "f32",
        "layout": "row",
        "device": {"backend": "cpu"},
        "strategy": "exhaustive",
        "budget": {},
        "objective": "time",
        "seed": 0,
        "created_at": "2026-12-03T00:00:00Z",
        "updated_at": "2026-12-03T00:00:00Z",
        "total_tasks": 1,
        "progress": {
            "tasks_done": int(status == "done"),
            "tasks_total": 1,
            "candidates_done": done,
            "candidates_total": 4,
        },
        "problems": [],
    }


def _job_create() -> JobCreate:
    return JobCreate.model_validate(
        {"op": "reduce", "dtype": "f32", "problems": [TUNED], "device": {"backend": "cpu"}}
    )


def test_a_submit_whose_answer_timed_out_is_not_sent_twice() -> None:
    flaky = FlakyTransport(
        1, httpx.ReadTimeout("slow"), httpx.Response(202, json=_job("queued", 0))
    )
    with pytest.raises(ConnectionFailed):
        _client(flaky, []).submit(_job_create())
    assert len(flaky.requests) == 1


def test_a_submit_that_never_connected_is_sent_again() -> None:
    refused = httpx.ConnectError("connection refused")
    flaky = FlakyTransport(1, refused, httpx.Response(202, json=_job("queued", 0)))
    assert _client(flaky, []).submit(_job_create()).status == "queued"
    assert len(flaky.requests) == 2


class JobSequence:
    """Test double of GET /v1/jobs/j1 answering the given states in turn (the last repeats)."""

    def __init__(self, states: list[tuple[str, int]]) -> None:
        self.states = states
        self.calls = 0
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        status, done = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        return httpx.Response(200, json=_job(status, done))


def test_wait_reports_each_change_of_progress_and_returns_the_finished_job() -> None:
    jobs = JobSequence([("queued", 0), ("running", 1), ("running", 1), ("running", 3), ("done", 4)])
    seen: list[JobOut] = []
    sleeps: list[float] = []
    client = TunehubClient("http://jobs.test", transport=jobs.transport, sleep=sleeps.append)
    final = client.wait("j1", progress=seen.append, poll_s=0.5)
    assert final.status == "done"
    assert [(j.status, j.progress.candidates_done) for j in seen] == [
        ("queued", 0),
        ("running", 1),
        ("running", 3),
        ("done", 4),
    ]
    assert sleeps == [0.5] * 4


def test_wait_gives_up_after_its_timeout() -> None:
    jobs = JobSequence([("running", 1)])
    client = TunehubClient("http://jobs.test", transport=jobs.transport, sleep=lambda s: None)
    with pytest.raises(WaitTimeout) as timeout:
        client.wait("j1", poll_s=0.0, timeout_s=0.0)
    assert timeout.value.job.status == "running"
