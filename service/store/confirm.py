"""Optional confirmation of winners by a second worker.

A best config is ``confirmed`` once a worker registered with another token than the one that
measured the winner re-measured the same variant (by name) for the same key (problem, device
key, toolchain) with a verified median inside the tie band of the winner's. A job submitted
with ``confirm: 2`` (or every job, with ``TUNEHUB_CONFIRM=2``) asks for that: when one of its
tasks finishes with a winner, a re-measuring task of the same problem is queued that only a
worker of another token holding the winner's device may lease.

The rule is recomputed from the stored measurements whenever a final upload or an import
touches the key, so it does not depend on the order in which the two workers finish.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store.keys import same_best_key
from service.store.models import BestConfig, Job, Measurement, Task, Variant, Worker

__all__ = ["within_band", "refresh_confirmed", "refresh_key", "queue_confirmation"]


def within_band(a: float, b: float, tie_band: float) -> bool:
    """Whether two medians are the same speed (the slower within ``tie_band`` of the faster)."""
    low, high = min(a, b), max(a, b)
    return low > 0 and high <= low * (1.0 + tie_band)


def _token_of(session: Session, worker_id: str | None) -> int | None:
    if worker_id is None:
        return None
    return session.scalar(select(Worker.token_id).where(Worker.id == worker_id))


def refresh_confirmed(session: Session, best: BestConfig, tie_band: float) -> bool:
    """Set and return ``best.confirmed`` from the measurements of its key (module doc)."""
    current = session.get(Measurement, best.measurement_id)
    variant = session.get(Variant, current.variant_id) if current is not None else None
    if current is None or variant is None or current.median_us is None:
        best.confirmed = False
        return False
    owner = _token_of(session, current.worker_id)
    query = (
        select(Measurement.median_us)
        .join(Variant, Variant.id == Measurement.variant_id)
        .join(Worker, Worker.id == Measurement.worker_id)
        .where(
            *same_best_key(Measurement, best),
            Measurement.outcome == "ok",
            Measurement.id != current.id,
            Variant.name == variant.name,
            Worker.token_id.is_not(None),
        )
    )
    if owner is not None:
        query = query.where(Worker.token_id != owner)
    medians = session.scalars(query)
    best.confirmed = any(
        m is not None and within_band(m, current.median_us, tie_band) for m in medians
    )
    return best.confirmed


def refresh_key(
    session: Session, job: Job, task: Task, device_id: int, toolchain_id: int, tie_band: float
) -> None:
    """Refresh ``confirmed`` of the best config of the task's problem on this device and
    toolchain, if there is one (its measurements may have just confirmed it)."""
    best = session.scalars(
        select(BestConfig).where(
            BestConfig.op == job.op,
            BestConfig.dtype == job.dtype,
            BestConfig.layout == job.layout,
            BestConfig.problem_key == task.problem_key,
            BestConfig.device_id == device_id,
            BestConfig.toolchain_id == toolchain_id,
        )
    ).first()
    if best is not None:
        refresh_confirmed(session, best, tie_band)


def queue_confirmation(session: Session, job: Job, task: Task, winner: Measurement) -> Task | None:
    """Queue the re-measuring task of ``task`` when its job asks for confirmation; None when
    it does not (or ``task`` is itself a re-measuring task)."""
    if job.confirm < 2 or task.confirm_of is not None:
        return None
    confirm = Task(
        job_id=job.id,
        position=task.position,
        problem=task.problem,
        problem_key=task.problem_key,
        confirm_of=task.id,
        confirm_device_id=winner.device_id,
        confirm_exclude_token_id=_token_of(session, winner.worker_id),
    )
    session.add(confirm)
    session.flush()
    return confirm
