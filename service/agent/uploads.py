"""What one leased task's uploads share, and how they survive a short outage of the service.

The engine's observer (:class:`UploadingObserver`) queues each measurement and uploads them in
batches while tuning. The service keys an upload by lease and variant and answers a copy of
what it stored as ``replayed`` (a copy with other content is a 409), so an upload is safe to
send again: a batch that could not be sent is kept for the next one, and the final upload is
sent again, the same body every time, across an outage of up to ``upload_retry_s`` (the lease
outlives it: ``TUNEHUB_LEASE_SECONDS``, 120 s by default), rather than abandoned to wait out
its lease and be measured again by someone else.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from service.agent.wire import measurement_in
from service.client import ConnectionFailed, LeaseLost, TunehubClient
from service.schemas.common import DeviceReport
from service.schemas.worker import MeasurementIn, ResultsIn, ResultsOut, ToolchainReport
from tuner.types import BenchResult

if TYPE_CHECKING:
    from service.agent.agent import WorkerAgent

__all__ = ["TaskState", "UploadingObserver", "upload_until", "UPLOAD_BACKOFF_S"]

log = logging.getLogger(__name__)

#: waits between tries of a final upload: doubling from the first, at most the last
UPLOAD_BACKOFF_S = (0.5, 8.0)


def upload_until(
    client: TunehubClient,
    lease_id: str,
    body: ResultsIn,
    window_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> ResultsOut:
    """``client.upload_results(lease_id, body)``, sent again while the service cannot be
    reached, for up to ``window_s`` seconds; ConnectionFailed after that. Other errors (a
    lost lease, a refusal) end it at once."""
    deadline = time.monotonic() + window_s
    wait, cap = UPLOAD_BACKOFF_S
    while True:
        try:
            return client.upload_results(lease_id, body)
        except ConnectionFailed as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            log.warning("lease %s: upload failed (%s); trying again in %.1f s", lease_id, exc, wait)
            sleep(min(wait, left))
            wait = min(wait * 2, cap)


@dataclass
class TaskState:
    """What the heartbeat thread and the engine's observer share for one leased task."""

    lease_id: str
    done: int = 0
    total: int = 0
    cancelled: bool = False
    lost: bool = False
    pending: list[MeasurementIn] = field(default_factory=list)
    #: when the last heartbeat was sent (the lease was granted just now)
    last_beat: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def should_stop(self) -> bool:
        return self.cancelled or self.lost


#: the fields of an upload that a re-measurement changes (provenance: the confirmation
#: rounds the store's winner rule reads)
_TIMING = {"outcome", "median_us", "p20_us", "p80_us", "min_us", "reps", "suspect", "provenance"}


class UploadingObserver:
    """Engine observer: counts progress and uploads measurements in batches."""

    def __init__(
        self,
        agent: WorkerAgent,
        state: TaskState,
        device: DeviceReport,
        toolchain: ToolchainReport,
    ) -> None:
        self.agent = agent
        self.state = state
        #: what was queued for upload per variant, to send re-timed results again at the end
        self.sent: dict[str, MeasurementIn] = {}
        self.device = device
        self.toolchain = toolchain
        self.last_upload = time.monotonic()

    def on_start(self, total: int, pruned: int) -> None:
        with self.state.lock:
            self.state.total = total
        self.agent._heartbeat(self.state)  # the total reaches progress bars at once

    def on_result(self, result: BenchResult, done: int, total: int) -> None:
        now = time.monotonic()
        measurement = measurement_in(result)
        with self.state.lock:
            self.state.done, self.state.total = done, total
            self.state.pending.append(measurement)
            self.sent[result.variant_id] = measurement
            upload_due = (
                len(self.state.pending) >= self.agent.upload_batch
                or now - self.last_upload >= self.agent.upload_interval_s
            )
            beat_due = now - self.state.last_beat >= self.agent.progress_interval_s
        if beat_due:
            self.agent._heartbeat(self.state)
        if upload_due:
            self.flush(final=False)

    def queue_retimed(self, results: Sequence[BenchResult]) -> None:
        """Queue the final results that differ from what was sent (the engine re-measured
        suspects and confirmed near-ties after their first timing), so that the store picks
        its winner from the same timings as the engine."""
        with self.state.lock:
            for result in results:
                first = self.sent.get(result.variant_id)
                if first is None:
                    continue
                final = measurement_in(result)
                if final.model_dump(include=_TIMING) != first.model_dump(include=_TIMING):
                    self.state.pending.append(final.model_copy(update={"retimed": True}))

    def flush(
        self, final: bool, error: str | None = None, unmeasured: int = 0
    ) -> ResultsOut | None:
        """Upload what is pending. A batch the service cannot take now (it is unreachable) is
        kept for the next upload while tuning goes on; the final upload is sent again, the
        same body each time, until ``agent.upload_retry_s`` has passed (a short outage costs
        nothing: the service answers a copy it stored already as ``replayed``)."""
        with self.state.lock:
            batch, self.state.pending = self.state.pending, []
        if not batch and not final:
            return None
        body = ResultsIn(
            device=self.device,
            toolchain=self.toolchain,
            measurements=batch,
            final=final,
            error=error,
            unmeasured=unmeasured,
        )
        try:
            if final:
                reply = upload_until(
                    self.agent.client,
                    self.state.lease_id,
                    body,
                    self.agent.upload_retry_s,
                    self.agent.sleep,
                )
            else:
                reply = self.agent.client.upload_results(self.state.lease_id, body)
        except LeaseLost:
            self.state.lost = True
            raise
        except ConnectionFailed as exc:
            if final:
                raise
            with self.state.lock:  # sent again with the next upload (a copy is replayed)
                self.state.pending[:0] = batch
            log.warning("lease %s: upload deferred: %s", self.state.lease_id, exc)
            return None
        self.last_upload = time.monotonic()
        return reply
