"""One worker with several benchmarking slots (service/agent/slots.py), on the CPU backend.

Real server over HTTP (SQLite and PostgreSQL), real g++ compiles and runs: the slots lease and
tune at the same time, every task is leased once, a variant compiles once for all slots, and a
slot that crashes does not stop the others. ``--devices``/``--slots`` mistakes exit 2.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from service.agent import slots as slots_module
from service.agent.slots import SlotBackend, SlotPool, SlotSpec, default_slot_backend, plan_slots
from service.cli import main
from service.cli.serve import create_token_in_db, ensure_admin_token
from service.client import TunehubClient
from service.schemas.jobs import JobCreate, JobOut
from service.schemas.worker import LeaseOut, LeaseRequest
from service.settings import Settings
from service.store.db import make_engine, make_sessionmaker
from service.store.models import Lease, Measurement, Task
from tests.service.conftest import LiveService
from tuner.backends.base import Backend
from tuner.backends.cuda_devices import (
    CudaDeviceEntry,
    choose_devices,
    parse_device_list,
    parse_nvidia_smi,
)
from tuner.errors import InvalidRequestError
from tuner.types import BenchResult, EngineConfig, TuneRequest, Variant

JOB_TIMEOUT_S = 240.0
#: six shapes of one op: every slot wants the same variants (one compile serves every shape)
PROBLEMS = [{"m": m, "k": k, "kind": "sum"} for m in (64, 128, 256) for k in (2048, 4096)]
MAX_VARIANTS = 3


@dataclass
class Live:
    url: str
    settings: Settings
    admin_token: str
    worker_token: str


@pytest.fixture
def live(settings: Settings) -> Iterator[Live]:
    settings.ensure_dirs()
    admin = ensure_admin_token(settings).read_text().strip()
    worker = create_token_in_db(settings.database_url, "slots-worker", ["worker"])
    service = LiveService(settings).start()
    try:
        yield Live(service.url, settings, admin, worker)
    finally:
        service.stop()


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slots-cache")


def engine_config(cache: Path) -> EngineConfig:
    return EngineConfig(
        cache_dir=str(cache), compile_workers=2, bench_seconds=0.05, warmup_seconds=0.01
    )


def submit(live: Live) -> JobOut:
    with TunehubClient(live.url, live.admin_token) as user:
        return user.submit_job(
            JobCreate.model_validate(
                {
                    "op": "reduce",
                    "dtype": "f32",
                    "problems": PROBLEMS,
                    "device": {"backend": "cpu"},
                    "budget": {"max_variants": MAX_VARIANTS},
                }
            )
        )


def run_until_finished(pool: SlotPool, live: Live, job_id: str) -> JobOut:
    """Run the pool in a thread until the job has no unfinished task; then stop it."""
    stop = threading.Event()
    thread = threading.Thread(target=pool.run_forever, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        with TunehubClient(live.url, live.admin_token) as user:
            while True:
                job = user.get_job(job_id)
                if job.status in ("done", "failed", "cancelled"):
                    return job
                assert time.monotonic() < deadline, f"job still {job.status}: {job.progress}"
                assert thread.is_alive(), "the pool stopped before the job finished"
                time.sleep(0.2)
    finally:
        stop.set()
        thread.join(timeout=60)


def make_pool(live: Live, cache: Path, count: int = 2, **options: Any) -> SlotPool:
    # no pinning here: the test must pass on a one-core runner too (plan_slots pins)
    slots = [SlotSpec("cpu", n) for n in range(count)]
    options.setdefault("poll_interval_s", 0.05)
    return SlotPool(
        lambda: TunehubClient(live.url, live.worker_token),
        engine_config(cache),
        slots,
        name="slots-test",
        **options,
    )


def stored(live: Live) -> tuple[dict[str, int], list[Measurement], dict[str, str]]:
    """(leases per task id, every measurement, task id -> status) read from the database."""
    engine = make_engine(live.settings.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            leases = dict(
                session.execute(select(Lease.task_id, func.count()).group_by(Lease.task_id)).all()
            )
            measurements = list(session.scalars(select(Measurement)))
            session.expunge_all()
            tasks = dict(session.execute(select(Task.id, Task.status)).all())
            return leases, measurements, tasks
    finally:
        engine.dispose()


def overlapping_slots(pool: SlotPool) -> list[tuple[str, str]]:
    """Pairs of tasks that two different slots were running at the same moment."""
    pairs = []
    for a in pool.records:
        for b in pool.records:
            if a.slot < b.slot and a.started < b.ended and b.started < a.ended:
                pairs.append((a.task_id, b.task_id))
    return pairs


# -- the slots tune together ------------------------------------------------------------------


def test_two_cpu_slots_lease_and_run_tasks_at_the_same_time(live: Live, tmp_path: Path) -> None:
    job = submit(live)
    pool = make_pool(live, tmp_path / "cache")  # empty: the slots' first tasks compile
    finished = run_until_finished(pool, live, job.id)

    assert finished.status == "done"
    assert finished.progress.tasks_done == finished.progress.tasks_total == len(PROBLEMS)
    # one worker, one registration, both slots leasing for its (one) device key
    assert len({a.worker_id for a in pool.agents}) == 1
    assert all(a.lease_device is not None for a in pool.agents)

    # each task leased once and done once
    leases, measurements, tasks = stored(live)
    assert set(tasks.values()) == {"done"}
    assert leases == {task_id: 1 for task_id in tasks}
    assert Counter(r.task_id for r in pool.records) == {task_id: 1 for task_id in tasks}

    # both slots worked, and at the same time (their task intervals overlap)
    assert {r.slot for r in pool.records} == {"cpu:0", "cpu:1"}
    assert overlapping_slots(pool), [(r.slot, r.started, r.ended) for r in pool.records]
    assert {m.provenance.get("slot") for m in measurements} == {"cpu:0", "cpu:1"}

    # one compile per variant for all slots: every other use was a cache hit (0 s)
    compiled_here = Counter(m.variant_id for m in measurements if (m.compile_seconds or 0) > 0)
    assert all(count <= 1 for count in compiled_here.values()), compiled_here
    assert pool.builds.compiled and set(pool.builds.compiled.values()) <= {1}
    assert len(measurements) == len(PROBLEMS) * MAX_VARIANTS


class CrashOnceClient(TunehubClient):
    """A slot's client whose first lease call blows up (a bug in the slot's loop)."""

    crashed = False

    def lease(self, request: LeaseRequest) -> LeaseOut | None:
        if not CrashOnceClient.crashed:
            CrashOnceClient.crashed = True
            raise RuntimeError("slot loop crashed")
        return super().lease(request)


class CrashingRunBackend(SlotBackend):
    """The first variant this backend runs raises (a bug in the run path): that task fails."""

    raised = False

    def run(
        self,
        variant: Variant,
        artifact: str,
        request: TuneRequest,
        abort_above_us: float | None = None,
    ) -> BenchResult:
        if not CrashingRunBackend.raised:
            CrashingRunBackend.raised = True
            raise RuntimeError("benchmark process crashed the slot's task")
        return self.inner.run(variant, artifact, request, abort_above_us)


def test_a_crashing_slot_does_not_stop_the_others(
    live: Live, compile_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit(live)
    clients = iter([TunehubClient, CrashOnceClient])
    CrashOnceClient.crashed = CrashingRunBackend.raised = False

    def slot_backend(slot: SlotSpec, config: EngineConfig) -> Backend:
        inner = default_slot_backend(slot, config)
        if slot.index == 1:
            return CrashingRunBackend(inner, slot, slots_module.BuildCoordinator())
        return inner

    pool = SlotPool(
        lambda: next(clients)(live.url, live.worker_token),
        engine_config(compile_cache),
        [SlotSpec("cpu", 0), SlotSpec("cpu", 1)],
        name="slots-crash",
        slot_backend_factory=slot_backend,
        restart_pause_s=0.1,
        poll_interval_s=0.05,
    )
    finished = run_until_finished(pool, live, job.id)

    # the loop of slot 1 died once and was started again; slot 0 never stopped
    assert pool.restarts == {"cpu:1": 1}
    _, _, tasks = stored(live)
    statuses = Counter(tasks.values())
    assert statuses == {"done": len(PROBLEMS) - 1, "failed": 1}, statuses
    assert finished.status == "done"  # a job with any done task is done
    failed = [p for p in finished.problems if p.status == "failed"]
    assert len(failed) == 1 and "crashed the slot's task" in (failed[0].error or "")
    # after its crashes slot 1 went on tuning: it also finished tasks of its own
    by_slot = Counter(r.slot for r in pool.records)
    assert by_slot["cpu:0"] >= 1 and by_slot["cpu:1"] >= 2, by_slot


def test_lease_for_a_device_the_worker_did_not_register_is_a_422(api: Any) -> None:
    worker_id = api.register(api.CPU_DEVICE)
    other = {**api.CPU_DEVICE, "name": "Another CPU"}
    response = api.client.post(
        "/v1/leases",
        json={"worker_id": worker_id, "backends": ["cpu"], "device": other},
        headers=api.harness.worker,
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "device"]
    # its own device key leases as before; an old agent without the field too
    api.submit()
    leased = api.client.post(
        "/v1/leases",
        json={"worker_id": worker_id, "backends": ["cpu"], "device": api.CPU_DEVICE},
        headers=api.harness.worker,
    )
    assert leased.status_code == 200, leased.text
    api.submit()
    assert api.lease(worker_id) is not None


def test_a_slot_leases_only_for_its_own_device(api: Any) -> None:
    worker_id = api.register(api.CPU_DEVICE, api.H200)
    api.submit(device={"backend": "cuda", "name": "H200"})
    a100 = {**api.H200, "name": "NVIDIA A100", "arch": "sm_80", "sm_count": 108}
    other = api.register(api.CPU_DEVICE, a100)

    def lease(worker: str, device: dict[str, Any]) -> int:
        return api.client.post(
            "/v1/leases",
            json={"worker_id": worker, "backends": ["cuda"], "device": device},
            headers=api.harness.worker,
        ).status_code

    assert lease(other, a100) == 204  # the A100 slot does not take the H200 job
    assert lease(worker_id, api.H200) == 200


# -- choosing devices and slots --------------------------------------------------------------

SMI = """0, NVIDIA H200, 00000000:19:00.0, GPU-aaa, 143771
1, NVIDIA H200, 00000000:3B:00.0, GPU-bbb, 143771
2, NVIDIA H200, 00000000:4C:00.0, GPU-ccc, 143771
"""


def test_nvidia_smi_rows_are_read_in_index_order() -> None:
    gpus = parse_nvidia_smi("garbage line\n" + "\n".join(reversed(SMI.splitlines())))
    assert [g.index for g in gpus] == [0, 1, 2]
    assert gpus[1] == CudaDeviceEntry(1, "NVIDIA H200", "00000000:3B:00.0", "GPU-bbb", 143771)


def test_devices_choose_gpus_in_the_order_given() -> None:
    gpus = parse_nvidia_smi(SMI)
    assert [g.index for g in choose_devices(parse_device_list("2, 0"), gpus)] == [2, 0]
    assert choose_devices(None, gpus) == gpus
    slots = plan_slots(("cuda",), devices=(0, 2), discover=lambda: gpus)
    assert [s.label for s in slots] == ["cuda:0", "cuda:2"]
    with pytest.raises(InvalidRequestError, match="no GPU 5 on this host"):
        choose_devices((0, 5), gpus)
    with pytest.raises(InvalidRequestError, match="no CUDA device found"):
        plan_slots(("cuda",), discover=list)
    # a host without a GPU still serves its other backends
    assert [s.label for s in plan_slots(("cuda", "cpu"), discover=list)] == ["cpu:0"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "expected GPU indices"),
        ("0,,1", "expected GPU indices"),
        ("0,x", "'x' is not a GPU index"),
        ("-1", "'-1' is not a GPU index"),
        ("1,1", "GPU 1 is named twice"),
        ("99", "99 is not a GPU index"),
    ],
)
def test_bad_device_lists_name_the_field(text: str, reason: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_device_list(text)
    assert caught.value.field == "devices" and reason in caught.value.reason


def test_cpu_slots_get_disjoint_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slots_module, "_available_cpus", lambda: list(range(8)))
    slots = plan_slots(("cpu",), cpu_slots=3)
    assert [s.cpus for s in slots] == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert plan_slots(("cpu",)) == [SlotSpec("cpu", 0)]  # one slot: the whole host, unpinned
    with pytest.raises(InvalidRequestError, match="give 1 to 8"):
        plan_slots(("cpu",), cpu_slots=9)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "cuda", "--devices", "0,x"], "devices: 'x' is not a GPU index"),
        (["--backend", "cuda", "--devices", "0,0"], "devices: GPU 0 is named twice"),
        (["--backend", "cpu", "--devices", "0"], "devices: --devices chooses GPUs"),
        (["--backend", "cpu", "--slots", "0"], "slots: 0 CPU slots"),
        (["--backend", "cuda", "--slots", "2"], "slots: --slots sets CPU slots"),
    ],
)
def test_worker_option_mistakes_exit_2_with_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--server", "http://127.0.0.1:9", "--token", "t", *args])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"tunehub: {message}"), err


def test_worker_devices_on_a_host_without_that_gpu_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = parse_nvidia_smi(SMI)[:2]
    monkeypatch.setattr(slots_module, "discover_cuda_devices", lambda: gpus)
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--token", "t", "--backend", "cuda", "--devices", "1,3"])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2
    assert err == "tunehub: devices: no GPU 3 on this host (it has 0, 1)"


def test_build_coordinator_compiles_each_variant_once_and_one_build_at_a_time() -> None:
    from tuner.types import CompileResult

    class Counting:
        """Stands in for a backend's build: slow, counts concurrent builds and each id built."""

        def __init__(self) -> None:
            self.built: Counter[str] = Counter()
            self.active = self.most_active = 0
            self.lock = threading.Lock()

        def build(self, variants: list[Variant]) -> dict[str, CompileResult]:
            with self.lock:
                if all(v.id in self.built for v in variants):  # the compile cache answers
                    return {v.id: CompileResult(v.id, True, f"/{v.id}", 0, True) for v in variants}
                self.active += 1
                self.most_active = max(self.most_active, self.active)
                self.built.update(v.id for v in variants)
            time.sleep(0.2)
            with self.lock:
                self.active -= 1
            return {v.id: CompileResult(v.id, True, f"/{v.id}", 0.2, False) for v in variants}

    def variant(name: str) -> Variant:
        return Variant("reduce", name, {}, "", (), name)

    counting = Counting()
    builds = slots_module.BuildCoordinator()
    wanted = [[variant("a"), variant("b")], [variant("b"), variant("c")], [variant("a")]]
    answers: list[dict[str, CompileResult]] = []
    threads = [
        threading.Thread(target=lambda w=w: answers.append(builds.build(counting, w)))  # type: ignore[misc]
        for w in wanted
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(len(a) for a in answers) == [1, 2, 2]
    assert all(r.ok for a in answers for r in a.values())
    # "a" and "b" were asked for twice at once: each compiled once, the waiters read the cache
    assert counting.built == {"a": 1, "b": 1, "c": 1}
    assert builds.compiled == {"a": 1, "b": 1, "c": 1}
    assert counting.most_active == 1  # one compiling build at a time
