"""One worker, several benchmarking slots: one per GPU of the host (or N on the CPU).

    slots = plan_slots(("cuda",), devices=(0, 2))          # or plan_slots(("cpu",), cpu_slots=4)
    pool = SlotPool(lambda: TunehubClient(url, token), engine_config, slots)
    pool.register()                                         # one worker, every slot's device
    pool.run_forever(stop_event)                            # a thread per slot until stopped

Each slot is a :class:`WorkerAgent` in its own thread with its own client and its own backend:
a CUDA slot's harness sees only its GPU (``CUDA_VISIBLE_DEVICES=<index>``, numbered as
nvidia-smi numbers them), a CPU slot's benchmark processes run pinned to its share of the
cores. The slots register as ONE worker and each leases for its own device key, so a slot
never takes a task its card cannot run. Compiles are shared: every slot builds through one
:class:`BuildCoordinator`, which holds a lock per variant id, so two slots asking for the same
variant at once compile it once (the other waits and reads the compile cache); the slot's
backend wrapper is in :mod:`tuner.backends.slot`.

A slot is isolated from the others: a task that fails is reported by its slot, which goes
on; a slot whose loop dies is restarted after a pause; a slot whose device cannot be opened
is left out at the start (if every slot fails, the worker stops with the reasons).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from service.agent.agent import BackendFactory, WorkerAgent
from service.agent.wire import device_in, host_in
from service.client import TunehubClient
from service.schemas.worker import LeaseOut, WorkerRegister
from tuner.backends.cuda_devices import (
    PCI_ORDER_ENV,
    CudaDeviceEntry,
    choose_devices,
    discover_cuda_devices,
)
from tuner.backends.slot import (
    BuildCoordinator,
    SlotBackend,
    SlotBackendFactory,
    SlotSpec,
    default_slot_backend,
)
from tuner.errors import InvalidRequestError, ToolchainError, TunerError
from tuner.host import HostInfo, host_identity
from tuner.types import DeviceInfo, EngineConfig

__all__ = [
    "SlotSpec",
    "SlotRecord",
    "BuildCoordinator",
    "SlotBackend",
    "SlotPool",
    "plan_slots",
    "default_slot_backend",
    "MAX_CPU_SLOTS",
]

log = logging.getLogger(__name__)

#: ``--slots`` at most (each CPU slot needs a core of its own)
MAX_CPU_SLOTS = 256


@dataclass(frozen=True)
class SlotRecord:
    """One task a slot ran: wall-clock start and end (``time.time()``) and how it ended."""

    slot: str
    task_id: str
    job_id: str
    started: float
    ended: float


def _available_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def plan_slots(
    backends: Sequence[str],
    *,
    devices: Sequence[int] | None = None,
    cpu_slots: int = 1,
    discover: Callable[[], Sequence[CudaDeviceEntry]] | None = None,
) -> list[SlotSpec]:
    """The slots for these backends: one per chosen GPU, ``cpu_slots`` on the CPU.

    Raises InvalidRequestError (field ``devices`` or ``slots``) for a choice this host cannot
    honour; the CLI prints it and exits 2. A host without a GPU still serves its other
    backends when ``--devices`` names none (as a worker without slots did).
    """
    if devices is not None and "cuda" not in backends:
        raise InvalidRequestError("devices", "--devices chooses GPUs: it needs --backend cuda")
    if cpu_slots != 1 and "cpu" not in backends:
        raise InvalidRequestError("slots", "--slots sets CPU slots: it needs --backend cpu")
    slots: list[SlotSpec] = []
    for backend in dict.fromkeys(backends):
        if backend == "cuda":
            found = (discover or discover_cuda_devices)()
            if not found and devices is None and len(set(backends)) > 1:
                log.warning("no CUDA device found on this host: serving %s only", backends)
                continue
            slots.extend(SlotSpec("cuda", entry.index) for entry in choose_devices(devices, found))
        elif backend == "cpu":
            slots.extend(_cpu_slots(cpu_slots))
        else:
            slots.append(SlotSpec(backend, 0))
    return slots


def _cpu_slots(count: int) -> list[SlotSpec]:
    cores = _available_cpus()
    if not 1 <= count <= min(len(cores), MAX_CPU_SLOTS):
        raise InvalidRequestError(
            "slots",
            f"{count} CPU slots: give 1 to {len(cores)} (each slot needs a core of its own; "
            f"this worker may use {len(cores)})",
        )
    if count == 1:
        return [SlotSpec("cpu", 0)]  # the whole host, as a worker without slots
    share, extra = divmod(len(cores), count)
    slots, start = [], 0
    for number in range(count):
        size = share + (1 if number < extra else 0)
        slots.append(SlotSpec("cpu", number, tuple(cores[start : start + size])))
        start += size
    return slots


# -- the pool ---------------------------------------------------------------------------------


class _SlotAgent(WorkerAgent):
    """A WorkerAgent for one slot: registers through the pool, logs each task it runs."""

    def __init__(self, pool: SlotPool, slot: SlotSpec, client: TunehubClient, **kwargs: object):
        factory: BackendFactory = lambda _name, config: SlotBackend(  # noqa: E731
            pool.slot_backend_factory(slot, config), slot, pool.builds
        )
        super().__init__(
            client,
            pool.engine_config,
            (slot.backend,),
            name=f"{pool.name}/{slot.label}",
            backend_factory=factory,
            **kwargs,  # type: ignore[arg-type]
        )
        self.pool = pool
        self.slot = slot
        self._known_worker: str | None = None

    def device_info(self) -> DeviceInfo:
        """Open the slot's backend (a CUDA slot probes its GPU) and return its device."""
        self._open_backends()
        return self._devices[self.slot.backend]

    def register(self) -> str:
        self._open_backends()
        self.worker_id = self._known_worker = self.pool.registration(stale=self._known_worker)
        return self.worker_id

    def _run_lease(self, lease: LeaseOut) -> None:
        started = time.time()
        try:
            super()._run_lease(lease)
        finally:
            self.pool.record(
                SlotRecord(
                    self.slot.label,
                    lease.task.task_id,
                    lease.task.job_id,
                    started,
                    time.time(),
                )
            )


class SlotPool:
    """Runs one :class:`WorkerAgent` per slot, registered together as one worker."""

    def __init__(
        self,
        client_factory: Callable[[], TunehubClient],
        engine_config: EngineConfig,
        slots: Sequence[SlotSpec],
        name: str | None = None,
        *,
        slot_backend_factory: SlotBackendFactory = default_slot_backend,
        host: HostInfo | None = None,
        **agent_options: object,
    ) -> None:
        if not slots:
            raise InvalidRequestError("devices", "a worker needs at least one slot")
        self.client_factory = client_factory
        self.engine_config = engine_config
        self.slot_backend_factory = slot_backend_factory
        self.builds = BuildCoordinator(engine_config.compile_workers or None)
        #: the host's identity (tuner.host), sent at registration; found when first needed
        self.host = host
        backends = "+".join(dict.fromkeys(s.backend for s in slots))
        self.name = name or f"{platform.node() or 'worker'}-{backends}"
        if any(s.backend == "cuda" for s in slots):
            for key, value in PCI_ORDER_ENV.items():  # the harnesses inherit it
                os.environ.setdefault(key, value)
        self._clients: list[TunehubClient] = []
        self.agents = [self._agent(slot, agent_options) for slot in slots]
        self.worker_id: str | None = None
        self.records: list[SlotRecord] = []
        self._lock = threading.Lock()

    def _agent(self, slot: SlotSpec, options: dict[str, object]) -> _SlotAgent:
        client = self.client_factory()
        self._clients.append(client)
        return _SlotAgent(self, slot, client, **options)

    # -- registration ------------------------------------------------------------------------

    def _open_all(self) -> None:
        """Open every slot's backend at once (CUDA probes take seconds); drop failed slots."""

        def open_one(agent: _SlotAgent) -> str | None:
            try:
                agent.device_info()
                return None
            except (TunerError, ImportError, OSError) as exc:
                return f"{agent.slot.label}: {exc}"

        with ThreadPoolExecutor(max_workers=len(self.agents)) as pool:
            failures = list(pool.map(open_one, self.agents))
        for agent, failure in zip(list(self.agents), failures, strict=True):
            if failure is not None:
                log.warning("slot %s is left out: %s", agent.slot.label, failure)
                agent.close()
                self.agents.remove(agent)
        if not self.agents:
            raise ToolchainError("no usable slot: " + "; ".join(f for f in failures if f))

    def registration(self, stale: str | None = None) -> str:
        """The worker id all slots share; registers (again) when it is unknown or ``stale``."""
        with self._lock:
            if self.worker_id is not None and self.worker_id != stale:
                return self.worker_id
            devices = []
            for agent in self.agents:
                device = device_in(agent.device_info())
                if device not in devices:
                    devices.append(device)
            if self.host is None:
                self.host = host_identity([agent.device_info() for agent in self.agents])
            registered = self.agents[0].client.register_worker(
                WorkerRegister(name=self.name, devices=devices, host=host_in(self.host))
            )
            self.worker_id = registered.id
            for agent in self.agents:
                agent.worker_id = agent._known_worker = registered.id
            log.info(
                "worker %s registered as %s with %d slots: %s",
                self.name,
                registered.id,
                len(self.agents),
                ", ".join(f"{a.slot.label}={a.device_info().key()}" for a in self.agents),
            )
            return registered.id

    def register(self) -> str:
        """Open every slot, register one worker with their devices, give each slot its key."""
        self._open_all()
        worker_id = self.registration()
        for agent in self.agents:
            agent.lease_device = device_in(agent.device_info())
        return worker_id

    # -- running -----------------------------------------------------------------------------

    def record(self, entry: SlotRecord) -> None:
        with self._lock:
            self.records.append(entry)

    @property
    def restarts(self) -> dict[str, int]:
        """How often each slot's loop died of an unexpected exception and started again."""
        return {a.slot.label: a.restarts for a in self.agents if a.restarts}

    def run_forever(self, stop: threading.Event) -> None:
        """A thread per slot, leasing and tuning until ``stop`` is set; then close."""
        if self.worker_id is None:
            self.register()
        threads = [
            threading.Thread(
                target=agent.run_forever,
                args=(stop,),
                name=f"slot-{agent.slot.label}",
                daemon=True,
            )
            for agent in self.agents
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(timeout=0.5)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30.0)
            self.close()

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()

    @property
    def tasks_done(self) -> int:
        return sum(agent.tasks_done for agent in self.agents)
