"""The worker agent: lease a task over HTTP, tune it with the engine, upload what it measured.

    agent = WorkerAgent(TunehubClient(url, token), EngineConfig(cache_dir=...), backends=("cpu",))
    agent.run_forever(stop_event)      # or agent.run_once() -> bool (did it run a task?)

The agent is the only part of the service that runs the engine (the store and the API import
only tuner's values and rules: problems, the winner rule, variant acceptance, capabilities);
a GPU host needs a URL and a worker token, never database credentials. ``tunehub serve`` runs
the same agent in a thread against its own API (the local worker).

While a task runs, heartbeats report progress (at most once a second) and a thread keeps
the lease alive during long compiles (every few seconds); the server's
``cancelled`` flag or a lost lease (409) stops the tune between candidates. Measurements are
uploaded in batches while tuning and once more with ``final=True`` at the end, each sent
again across a short outage of the service (:mod:`service.agent.uploads`); then the
winner's artifact is built and uploaded (:mod:`service.agent.artifacts`; a failure there is
logged, never the task's). A tuner error or any unexpected exception fails the task (final
upload with the error text) and the agent takes the next one; a lost lease abandons the task
without a final upload.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
import traceback
from collections.abc import Callable, Sequence

from service.agent.artifacts import share_artifacts
from service.agent.uploads import TaskState, UploadingObserver
from service.agent.wire import (
    device_in,
    host_in,
    request_from_task,
    toolchain_report,
)
from service.client import ClientError, ConnectionFailed, LeaseLost, TunehubClient
from service.schemas.common import MAX_LOG_CHARS, DeviceIn
from service.schemas.worker import (
    HeartbeatIn,
    LeaseOut,
    LeaseRequest,
    ResultsIn,
    ResultsOut,
    ToolchainReport,
    WorkerRegister,
)
from tuner.backends.base import Backend
from tuner.engine import tune
from tuner.errors import ToolchainError, TunerError
from tuner.host import HostInfo, host_identity
from tuner.registry import load_backend_class, load_space
from tuner.spaces.base import VariantSpace
from tuner.types import DeviceInfo, EngineConfig, ProblemResult

__all__ = ["WorkerAgent"]

log = logging.getLogger(__name__)

#: stands in for a compiler or template version nobody could read (the API needs text)
_UNKNOWN = "unknown"

BackendFactory = Callable[[str, EngineConfig], Backend]
#: a final upload outlives an outage of the service this long (half the default lease)
DEFAULT_UPLOAD_RETRY_S = 60.0
#: after a bug in the loop (an exception nobody expected) the loop starts again this much later
DEFAULT_RESTART_PAUSE_S = 2.0


def _default_backend_factory(name: str, config: EngineConfig) -> Backend:
    return load_backend_class(name)(config)


class WorkerAgent:
    """Leases tasks for its backends' devices and runs them through ``tuner.engine.tune``."""

    def __init__(
        self,
        client: TunehubClient,
        engine_config: EngineConfig,
        backends: Sequence[str] = ("cpu",),
        name: str | None = None,
        *,
        heartbeat_interval_s: float = 3.0,
        progress_interval_s: float = 1.0,
        poll_interval_s: float = 1.0,
        upload_batch: int = 8,
        upload_interval_s: float = 5.0,
        backend_factory: BackendFactory = _default_backend_factory,
        upload_artifacts: bool = True,
        host: HostInfo | None = None,
        upload_retry_s: float = DEFAULT_UPLOAD_RETRY_S,
        restart_pause_s: float = DEFAULT_RESTART_PAUSE_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.engine_config = engine_config
        self.backend_names = tuple(backends)
        self.name = name or f"{platform.node() or 'worker'}-{'+'.join(self.backend_names)}"
        self.heartbeat_interval_s = heartbeat_interval_s
        self.progress_interval_s = progress_interval_s
        self.poll_interval_s = poll_interval_s
        self.upload_batch = max(1, upload_batch)
        self.upload_interval_s = upload_interval_s
        #: how long a final upload is sent again while the service is unreachable
        #: (service.agent.uploads); the waits go through ``sleep``
        self.upload_retry_s = upload_retry_s
        self.restart_pause_s = restart_pause_s
        #: how often the loop died of an unexpected exception and was started again
        self.restarts = 0
        self.sleep = sleep
        self._backend_factory = backend_factory
        #: build and upload each task's winner's artifact after its final upload
        self.upload_artifacts = upload_artifacts
        self._backends: dict[str, Backend] = {}
        self._devices: dict[str, DeviceInfo] = {}
        self.worker_id: str | None = None
        #: lease only for this one of the worker's devices (a slot of a multi-GPU worker)
        self.lease_device: DeviceIn | None = None
        self.tasks_done = 0
        self.host = host  # tuner.host's identity, sent at registration (found if None)

    # -- setup ----------------------------------------------------------------------------

    def _open_backends(self) -> None:
        """Open every backend that works here; a host without a GPU still serves cpu."""
        failures = []
        for backend_name in self.backend_names:
            if backend_name in self._backends:
                continue
            try:
                backend = self._backend_factory(backend_name, self.engine_config)
                self._devices[backend_name] = backend.device()
            except (TunerError, ImportError, OSError) as exc:
                log.warning("backend %s is unavailable: %s", backend_name, exc)
                failures.append(f"{backend_name}: {exc}")
                continue
            self._backends[backend_name] = backend
        if not self._backends:
            raise ToolchainError("no usable backend: " + "; ".join(failures))

    def register(self) -> str:
        """Open the backends, then POST /v1/workers with their devices; returns the id."""
        self._open_backends()
        devices = [device_in(d) for d in self._devices.values()]
        self.host = self.host or host_identity(list(self._devices.values()))
        registered = self.client.register_worker(
            WorkerRegister(name=self.name, devices=devices, host=host_in(self.host))
        )
        self.worker_id = registered.id
        log.info(
            "worker %s registered as %s with %s",
            self.name,
            self.worker_id,
            ", ".join(d.key() for d in self._devices.values()),
        )
        return registered.id

    def close(self) -> None:
        for backend in self._backends.values():
            try:
                backend.close()
            except Exception:  # closing must not hide the reason we stop
                log.exception("closing backend %s failed", backend.name)
        self._backends.clear()

    # -- the loop -------------------------------------------------------------------------

    def run_once(self) -> bool:
        """Lease one task and run it; False when the server had nothing for us."""
        worker_id = self.worker_id or self.register()
        if not self._backends:  # closed after a crash of the loop: open them again
            self._open_backends()
        request = LeaseRequest.model_validate(
            {"worker_id": worker_id, "backends": list(self._backends), "device": self.lease_device}
        )
        lease = self.client.lease(request)
        if not lease:
            return False
        self._run_lease(lease)
        self.tasks_done += 1
        return True

    def run_forever(self, stop_event: threading.Event) -> None:
        """Lease and tune until ``stop_event`` is set. An unreachable server is retried; an
        unexpected exception (a bug) is logged and the loop starts again, so a worker thread
        never dies silently while its jobs wait; only an unusable toolchain stops it."""
        backoff = self.poll_interval_s
        try:
            while not stop_event.is_set():
                try:
                    worked = self.run_once()
                    backoff = self.poll_interval_s
                except ConnectionFailed as exc:
                    log.warning("%s; retrying in %.0f s", exc, backoff)
                    stop_event.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                except ClientError as exc:
                    log.error("worker %s: %s", self.name, exc)
                    if getattr(exc, "status", None) in (401, 403, 404):
                        # a bad token stays bad; an unknown worker id means register again
                        self.worker_id = None
                    stop_event.wait(max(backoff, 5.0))
                    continue
                except ToolchainError as exc:
                    log.error("worker %s stops: %s", self.name, exc)
                    return
                except Exception:
                    self.restarts += 1
                    log.exception(
                        "worker %s: the loop stopped unexpectedly; starting it again in %.0f s",
                        self.name,
                        self.restart_pause_s,
                    )
                    self.close()  # run_once opens the backends again
                    stop_event.wait(self.restart_pause_s)
                    continue
                if not worked:
                    stop_event.wait(self.poll_interval_s)
        finally:
            self.close()

    # -- one task -------------------------------------------------------------------------

    def _run_lease(self, lease: LeaseOut) -> None:
        lease_id, task = lease.lease_id, lease.task
        state = TaskState(lease_id=lease_id)
        log.info("lease %s: task %s of job %s (%s)", lease_id, task.task_id, task.job_id, task.op)
        stop_beating = threading.Event()
        beater = threading.Thread(
            target=self._heartbeat_loop,
            args=(state, stop_beating),
            name=f"heartbeat-{lease_id}",
            daemon=True,
        )
        beater.start()
        observer: UploadingObserver | None = None
        finished: tuple[Backend, VariantSpace, ProblemResult, ResultsOut] | None = None
        try:
            backend_name = task.device.backend
            backend = self._backends.get(backend_name)
            if backend is None:
                raise TunerError(f"this worker has no {backend_name!r} backend")
            device = device_in(self._devices[backend_name])
            observer = UploadingObserver(self, state, device, self._fallback_toolchain(backend))
            # the task's problem is parsed here, once, and its space loaded once: the engine
            # and the artifact sharing after the final upload are handed both
            request = request_from_task(task)
            space = load_space(request.op, backend.name)
            observer.toolchain = toolchain_report(backend.toolchain(space))
            result = tune(
                request, backend, self.engine_config, observer, state.should_stop, space=space
            )
            observer.device = device_in(result.device)
            observer.toolchain = toolchain_report(result.toolchain)
            self._heartbeat(state)  # the last progress, so that bars end full
            if state.lost:
                log.warning("lease %s lost; abandoning task %s", lease_id, task.task_id)
                return
            observer.queue_retimed(result.results)
            reply = observer.flush(final=True, unmeasured=result.unmeasured)
            if reply is not None:
                finished = (backend, space, result, reply)
            winner = result.winner.variant_name if result.winner else "none verified"
            log.info(
                "lease %s done: %d candidates, winner %s%s",
                lease_id,
                len(result.results),
                winner,
                " (cancelled)" if state.cancelled else "",
            )
        except LeaseLost:
            log.warning("lease %s lost (409); abandoning task %s", lease_id, task.task_id)
        except ConnectionFailed:
            raise  # the server is gone: the lease will expire and the task be re-queued
        except Exception as exc:  # a tuner error or a bug fails this task, not the worker
            reason = str(exc) if isinstance(exc, TunerError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, TunerError):
                log.error("task %s crashed:\n%s", task.task_id, traceback.format_exc())
            else:
                log.warning("task %s failed: %s", task.task_id, reason)
            self._fail_task(state, observer, reason)
        finally:
            stop_beating.set()
            beater.join(timeout=self.heartbeat_interval_s + 5.0)
        if finished is not None and self.upload_artifacts:  # the task is done: no heartbeats
            done_backend, done_space, result, reply = finished
            share_artifacts(self.client, done_backend, done_space, result, lease_id, reply)

    def _fail_task(
        self,
        state: TaskState,
        observer: UploadingObserver | None,
        reason: str,
    ) -> None:
        if state.lost:
            return
        lease_id = state.lease_id
        reason = reason[-MAX_LOG_CHARS:] or "task failed"
        try:
            if observer is not None:
                observer.flush(final=True, error=reason)
            else:
                # no backend for the task's device: report with any device this worker has
                device = next(iter(self._devices.values()))
                unknown = ToolchainReport(compiler=_UNKNOWN, template_version=_UNKNOWN)
                self.client.upload_results(
                    lease_id,
                    ResultsIn(
                        device=device_in(device), toolchain=unknown, final=True, error=reason
                    ),
                )
        except LeaseLost:
            log.warning("lease %s lost while reporting its failure", lease_id)
        except ClientError as exc:
            log.error("could not report the failure of lease %s: %s", lease_id, exc)

    @staticmethod
    def _fallback_toolchain(backend: Backend) -> ToolchainReport:
        """Toolchain text for a task that fails before the space's toolchain is known."""
        try:
            compiler = backend.compiler_identity() or _UNKNOWN
        except Exception:  # a missing compiler is reported by the failure itself
            compiler = _UNKNOWN
        return ToolchainReport(compiler=compiler[:200], template_version=_UNKNOWN)

    def _heartbeat(self, state: TaskState) -> None:
        """Send progress, extend the lease, and read the job's cancelled flag."""
        with state.lock:
            done, total = state.done, state.total
            state.last_beat = time.monotonic()
        try:
            reply = self.client.heartbeat(state.lease_id, HeartbeatIn(done=done, total=total))
        except LeaseLost:
            state.lost = True
            log.warning("lease %s lost on heartbeat", state.lease_id)
            return
        except ClientError as exc:  # the next beat may get through before the lease expires
            log.warning("heartbeat of lease %s failed: %s", state.lease_id, exc)
            return
        if reply.cancelled and not state.cancelled:
            log.info(
                "lease %s: job cancelled; stopping after the current candidate", state.lease_id
            )
            state.cancelled = True

    def _heartbeat_loop(self, state: TaskState, stop: threading.Event) -> None:
        """Keeps the lease alive while the engine is busy (long compiles send no results)."""
        tick = max(0.01, self.heartbeat_interval_s / 4)
        while not stop.wait(tick) and not state.lost:
            with state.lock:
                due = time.monotonic() - state.last_beat >= self.heartbeat_interval_s
            if due:
                self._heartbeat(state)
