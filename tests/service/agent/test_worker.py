"""The worker agent against a scripted client and a fake backend (no compiler, no server).

The real-server, real-CPU path is in test_end_to_end.py; here each rule of the agent is
checked on its own: batching, final upload, failures, cancellation, lost leases.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from service.agent import WorkerAgent
from service.agent.wire import measurement_in, request_from_task
from service.client import ConnectionFailed, LeaseLost
from service.schemas.worker import (
    HeartbeatIn,
    HeartbeatOut,
    LeaseOut,
    LeaseRequest,
    LeaseTask,
    ResultsIn,
    ResultsOut,
    WorkerOut,
    WorkerRegister,
)
from tuner.backends.base import Backend
from tuner.errors import DeviceError
from tuner.problems import ReduceProblem
from tuner.types import (
    BenchResult,
    CompileResult,
    DeviceInfo,
    EngineConfig,
    Outcome,
    Timing,
    Toolchain,
    Trial,
    Variant,
)

DEVICE = DeviceInfo(backend="cpu", name="Fake CPU", arch="x86_64-fake", sm_count=4)
LATER = datetime(2100, 1, 1, tzinfo=UTC)


def reduce_task(m: int = 64, k: int = 256, **overrides: Any) -> dict[str, Any]:
    task = {
        "task_id": "t1",
        "job_id": "j1",
        "op": "reduce",
        "dtype": "f32",
        "layout": "row",
        "problem": {"m": m, "k": k, "kind": "sum"},
        "device": {"backend": "cpu"},
        "strategy": "exhaustive",
        "budget": {"max_variants": 6, "max_seconds": None},
        "objective": "time",
        "seed": 0,
    }
    task.update(overrides)
    return task


class FakeBackend(Backend):
    """Builds nothing; a variant's time is a function of its params, so the winner is known."""

    name = "cpu"

    def __init__(self, config: EngineConfig, before_run: Any = None, fail_run: bool = False):
        super().__init__(config)
        self.before_run = before_run
        self.fail_run = fail_run
        self.runs = 0
        self.closed = False

    def device(self) -> DeviceInfo:
        return DEVICE

    def toolchain(self, space: Any) -> Toolchain:
        return Toolchain(compiler="fake-cc 1.0", template_version="tpl123")

    def base_flags(self, arch: str) -> tuple[str, ...]:
        return ()

    def compiler_identity(self) -> str:
        return "fake-cc 1.0"

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        return {v.id: CompileResult(v.id, True, "/dev/null", 0.01, False) for v in variants}

    def measure(self, trial: Trial) -> BenchResult:
        variant = trial.variant
        self.runs += 1
        if self.before_run:
            self.before_run(self.runs)
        if self.fail_run:
            raise RuntimeError("harness exploded")
        p = variant.params
        us = 100.0 / (p["pack"] * p["acc"]) + p["unroll"]
        return BenchResult(
            variant.id,
            variant.name,
            variant.params,
            Outcome.OK,
            Timing(us, us * 0.99, us * 1.01, us * 0.98, 10),
            throughput=1.0,
            throughput_unit="GB/s",
        )

    def close(self) -> None:
        self.closed = True


class ScriptedClient:
    """Plays the server: hands out the scripted leases and records every call (as the JSON
    the real client would send)."""

    def __init__(
        self,
        leases: Sequence[dict[str, Any] | None] = (),
        cancel_from_beat: int | None = None,
        lose_from_beat: int | None = None,
        lose_on_upload: bool = False,
    ) -> None:
        self.leases = list(leases)
        self.cancel_from_beat = cancel_from_beat
        self.lose_from_beat = lose_from_beat
        self.lose_on_upload = lose_on_upload
        self.registered: list[tuple[str, list[dict[str, Any]]]] = []
        self.uploads: list[dict[str, Any]] = []
        self.heartbeats: list[tuple[Any, int, int]] = []
        self.lock = threading.Lock()

    def register_worker(self, worker: WorkerRegister) -> WorkerOut:
        sent = worker.model_dump(mode="json")
        self.registered.append((sent["name"], sent["devices"]))
        return WorkerOut(id="w1", name=worker.name, devices=[])

    def lease(self, request: LeaseRequest) -> LeaseOut | None:
        assert request.worker_id == "w1" and list(request.backends) == ["cpu"]
        return LeaseOut.model_validate(self.leases.pop(0)) if self.leases else None

    def heartbeat(self, lease_id: str, progress: HeartbeatIn) -> HeartbeatOut:
        done, total = progress.done, progress.total
        with self.lock:
            self.heartbeats.append((lease_id, done, total))
            beat = len(self.heartbeats)
        if self.lose_from_beat is not None and beat >= self.lose_from_beat:
            raise LeaseLost(409, "lease expired", "POST", f"/v1/leases/{lease_id}/heartbeat")
        cancelled = self.cancel_from_beat is not None and beat >= self.cancel_from_beat
        return HeartbeatOut(expires_at=LATER, cancelled=cancelled)

    def upload_results(self, lease_id: str, results: ResultsIn) -> ResultsOut:
        if self.lose_on_upload:
            raise LeaseLost(409, "lease expired", "POST", f"/v1/leases/{lease_id}/results")
        self.uploads.append({"lease_id": lease_id, **results.model_dump(mode="json")})
        return ResultsOut(stored=len(results.measurements))


def make_agent(
    client: ScriptedClient, backend: FakeBackend | None = None, **kwargs: Any
) -> tuple[WorkerAgent, FakeBackend]:
    config = EngineConfig(cache_dir="/nonexistent", compile_workers=2)
    backend = backend or FakeBackend(config)
    agent = WorkerAgent(
        client,
        config,
        ("cpu",),
        name="test-worker",  # type: ignore[arg-type]
        backend_factory=lambda name, cfg: backend,
        **kwargs,
    )
    return agent, backend


def lease(lease_id: str = "L1", **task: Any) -> dict[str, Any]:
    return {"lease_id": lease_id, "expires_at": LATER, "task": reduce_task(**task)}


def test_no_work_returns_false_and_registers_the_device() -> None:
    client = ScriptedClient()
    agent, _ = make_agent(client)
    assert agent.run_once() is False
    assert client.registered == [
        (
            "test-worker",
            [
                {
                    "backend": "cpu",
                    "name": "Fake CPU",
                    "arch": "x86_64-fake",
                    "sm_count": 4,
                    "driver": "",
                    "runtime": "",
                    "memory_bytes": 0,
                }
            ],
        )
    ]


def test_task_uploads_batches_then_a_final_with_every_candidate() -> None:
    client = ScriptedClient([lease()])
    agent, backend = make_agent(client, upload_batch=4)
    assert agent.run_once() is True
    assert backend.runs == 6
    assert [u["final"] for u in client.uploads] == [False, True]
    measured = [m for u in client.uploads for m in u["measurements"]]
    assert len(measured) == 6
    assert {m["outcome"] for m in measured} == {"ok"}
    assert len({m["variant_id"] for m in measured}) == 6
    final = client.uploads[-1]
    assert final["device"]["name"] == "Fake CPU"
    assert final["toolchain"] == {
        "compiler": "fake-cc 1.0",
        "template_version": "tpl123",
        "libraries": {},
    }
    assert final.get("error") is None


def test_tuner_error_fails_the_task_and_the_worker_goes_on() -> None:
    client = ScriptedClient([lease("bad", m=0), lease("good")])
    agent, _ = make_agent(client)
    assert agent.run_once() is True
    failed = client.uploads[-1]
    assert failed["lease_id"] == "bad" and failed["final"] is True
    assert "m" in failed["error"] and ">= 1" in failed["error"]
    assert agent.run_once() is True
    assert client.uploads[-1]["lease_id"] == "good" and client.uploads[-1].get("error") is None


def test_unexpected_exception_fails_the_task_with_its_text() -> None:
    client = ScriptedClient([lease()])
    config = EngineConfig(cache_dir="/nonexistent", compile_workers=2)
    agent, _ = make_agent(client, FakeBackend(config, fail_run=True))
    assert agent.run_once() is True
    final = client.uploads[-1]
    assert final["final"] is True
    assert "RuntimeError: harness exploded" in final["error"]


def test_task_heartbeats_its_progress_after_each_result() -> None:
    client = ScriptedClient([lease()])
    agent, _ = make_agent(client, progress_interval_s=0.0, heartbeat_interval_s=60.0)
    assert agent.run_once() is True
    # on start, after each result, and once more before the final upload
    assert client.heartbeats == [("L1", done, 6) for done in [*range(7), 6]]


def test_cancel_flag_from_heartbeat_stops_the_tune_early() -> None:
    # beats: on start (1), after candidate 1 (2), after candidate 2 (3: cancelled)
    client = ScriptedClient([lease()], cancel_from_beat=3)
    config = EngineConfig(cache_dir="/nonexistent", compile_workers=1)
    agent, backend = make_agent(
        client, FakeBackend(config), progress_interval_s=0.0, heartbeat_interval_s=60.0
    )
    assert agent.run_once() is True
    measured = [m for u in client.uploads for m in u["measurements"]]
    assert backend.runs == 2 and len(measured) == 2
    assert client.uploads[-1]["final"] is True and client.uploads[-1].get("error") is None


def test_lease_lost_on_heartbeat_stops_without_a_final_upload() -> None:
    client = ScriptedClient([lease()], lose_from_beat=2)
    config = EngineConfig(cache_dir="/nonexistent", compile_workers=1)
    agent, backend = make_agent(
        client, FakeBackend(config), progress_interval_s=0.0, heartbeat_interval_s=60.0
    )
    assert agent.run_once() is True
    assert backend.runs == 1
    assert client.uploads == []


def test_keepalive_thread_beats_while_the_engine_is_busy() -> None:
    client = ScriptedClient([lease()])
    beaten = threading.Event()

    def wait_for_keepalive(run: int) -> None:
        # the first run blocks until the thread (not the observer) has beaten once more
        if run == 1:
            for _ in range(1000):
                with client.lock:
                    if len(client.heartbeats) >= 2:
                        beaten.set()
                        return
                threading.Event().wait(0.005)

    config = EngineConfig(cache_dir="/nonexistent", compile_workers=1)
    agent, _ = make_agent(
        client,
        FakeBackend(config, before_run=wait_for_keepalive),
        progress_interval_s=60.0,
        heartbeat_interval_s=0.02,
    )
    assert agent.run_once() is True
    assert beaten.is_set()
    assert client.heartbeats[1] == ("L1", 0, 6)


def test_lost_lease_abandons_the_task_without_a_final_upload() -> None:
    client = ScriptedClient([lease()], lose_on_upload=True)
    agent, backend = make_agent(client, upload_batch=1)
    assert agent.run_once() is True
    assert backend.runs == 1  # the first batch upload answered 409: nothing more was measured
    assert client.uploads == []


def test_run_forever_retries_an_unreachable_server_and_stops_on_the_event() -> None:
    stop = threading.Event()

    class DownClient(ScriptedClient):
        calls = 0

        def register_worker(self, worker: WorkerRegister) -> WorkerOut:
            DownClient.calls += 1
            if DownClient.calls >= 3:
                stop.set()
            raise ConnectionFailed("http://127.0.0.1:1", "refused")

    agent, backend = make_agent(DownClient(), poll_interval_s=0.001)
    agent.run_forever(stop)
    assert DownClient.calls == 3
    assert backend.closed


def test_unusable_backend_is_skipped_when_another_works() -> None:
    config = EngineConfig(cache_dir="/nonexistent")
    good = FakeBackend(config)

    def factory(name: str, cfg: EngineConfig) -> Backend:
        if name == "cuda":
            raise DeviceError("no GPU here")
        return good

    client = ScriptedClient()
    agent = WorkerAgent(
        client,
        config,
        ("cpu", "cuda"),
        name="w",  # type: ignore[arg-type]
        backend_factory=factory,
    )
    assert agent.run_once() is False
    assert [d["backend"] for d in client.registered[0][1]] == ["cpu"]


def test_request_from_task_maps_every_field_of_the_lease() -> None:
    task = LeaseTask.model_validate(
        reduce_task(problem={"m": 8, "k": 16, "kind": "max"}, budget={}, strategy="random", seed=7)
    )
    request = request_from_task(task)
    assert request.layout == "row"
    assert request.problem == ReduceProblem(m=8, k=16, kind="max")
    assert request.strategy == "random" and request.seed == 7
    assert request.budget.max_variants is None


def test_measurement_in_drops_non_finite_values() -> None:
    result = BenchResult(
        "v",
        "name",
        {"x": 1},
        Outcome.RUNTIME_ERROR,
        None,
        throughput=math.nan,
        provenance={"temp": math.inf, "ok": 1.5},
    )
    record = measurement_in(result).model_dump(mode="json")
    assert record["throughput"] is None
    assert record["provenance"] == {"temp": None, "ok": 1.5}
    assert record["median_us"] is None and record["outcome"] == "runtime_error"


@pytest.mark.parametrize("outcome", [Outcome.OK, Outcome.ABORTED_SLOW])
def test_measurement_in_keeps_timings(outcome: Outcome) -> None:
    result = BenchResult("v", "name", {}, outcome, Timing(2.0, 1.5, 2.5, 1.0, 7))
    record = measurement_in(result).model_dump(mode="json")
    assert (record["median_us"], record["p20_us"], record["reps"]) == (2.0, 1.5, 7)
    assert record["outcome"] == outcome.value
