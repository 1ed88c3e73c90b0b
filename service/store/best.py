"""Who wins, and the upsert of the best config of a key.

Winner rule: :mod:`tuner.winner`, the same code the engine runs, over a task's stored
measurements (their confirmation rounds travel in provenance): only outcome ``ok`` wins; the
contenders the rounds cannot tell from the fastest form the tie set, in which the vendor's
default, then the incumbent, then the variant name wins; a stored best config is replaced
only by a winner faster with confidence (``tuner.winner.replaces_incumbent``), so re-tuning
does not flip winners on noise. The best config keeps the deciding job's tie set and how
many budgeted candidates were left unmeasured. A winner that beats the stored one by more
than the team's TUNEHUB_RECORD_MARGIN is held instead, until another host confirms it.
Uploads (:mod:`service.store.results`) and imports (:mod:`service.store.imports`) both go
through :func:`upsert_best`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store.keys import best_key, insert_ignore
from service.store.models import BestConfig, Job, Measurement, Task, Variant, utcnow
from tuner import winner as winner_rule

__all__ = [
    "UpsertOutcome",
    "decide_winner",
    "winning_measurement",
    "replaces_stored",
    "upsert_best",
    "is_record",
    "incumbents_of",
]

UpsertOutcome = Literal["inserted", "replaced", "kept", "held"]


def decide_winner(
    measurements: Sequence[Measurement],
    names: dict[str, str],
    objective: str = "time",
    incumbents: Collection[str] = (),
) -> winner_rule.Decision[Measurement]:
    """The winning verified measurement and its tie set by :func:`tuner.winner.decide` (the
    rounds in each measurement's provenance, the ``incumbents`` by variant name). Under
    objective energy the score is joules per launch, among the measurements that carry one."""
    energy = objective == "energy"
    return winner_rule.decide(
        measurements,
        median=(lambda m: m.energy_j) if energy else (lambda m: m.median_us),
        name=lambda m: (names.get(m.variant_id, ""), m.variant_id, m.id),
        ok=lambda m: m.outcome == "ok" and m.median_us is not None,
        rounds=(lambda m: ()) if energy else (lambda m: winner_rule.rounds_of(m.provenance)),
        vendor_default=lambda m: winner_rule.is_vendor_default(m.provenance),
        incumbent=lambda m: names.get(m.variant_id) in incumbents,
    )


def winning_measurement(
    measurements: Sequence[Measurement], names: dict[str, str], objective: str = "time"
) -> Measurement | None:
    """The winning stored measurement of :func:`decide_winner` without incumbents, or None."""
    return decide_winner(measurements, names, objective).winner


def replaces_stored(session: Session, current: Measurement | None, candidate: Measurement) -> bool:
    """Whether ``candidate`` (outcome ok) replaces the stored winner ``current`` by
    tuner.winner's rule: against the incumbent as the candidate's own task measured it, when it
    did (its median, its confirmation rounds and CPU share), else as stored."""
    current_median = current.median_us if current is not None else None
    again = None  # the incumbent measured again by the candidate's own task, if it was
    if current is not None and candidate.task_id is not None:
        again = session.scalars(
            select(Measurement)
            .where(
                Measurement.task_id == candidate.task_id,
                Measurement.variant_id == current.variant_id,
                Measurement.device_id == candidate.device_id,
                Measurement.toolchain_id == candidate.toolchain_id,
            )
            .order_by(Measurement.id.desc())
        ).first()
    reference = winner_rule.incumbent_reference(
        current_median,
        None if again is None else (again.outcome == "ok" and again.median_us is not None),
        again.median_us if again is not None else None,
    )
    assert candidate.median_us is not None
    # rounds only where the incumbent was timed in the candidate's own job (else medians)
    return winner_rule.replaces_incumbent(
        reference,
        candidate.median_us,
        incumbent_rounds=winner_rule.rounds_of(again.provenance) if again is not None else (),
        candidate_rounds=winner_rule.rounds_of(candidate.provenance),
        incumbent_cpu_share=winner_rule.cpu_share_of(again.provenance) if again else None,
    )


def _kept_tie_set(
    session: Session, best: BestConfig, candidate: Measurement, tie_set: Sequence[str]
) -> list[str] | None:
    """The tie set of a kept best config after a job of its key: the job's, with the kept
    winner first, when the job timed the kept winner too; else None (unchanged)."""
    current = session.get(Measurement, best.measurement_id)
    kept = session.get(Variant, current.variant_id) if current is not None else None
    if kept is None or candidate.task_id is None:
        return None
    timed = session.scalar(
        select(Measurement.id).where(
            Measurement.task_id == candidate.task_id, Measurement.variant_id == kept.id
        )
    )
    if timed is None:
        return None
    return [kept.name, *(name for name in tie_set if name != kept.name)]


def is_record(current: Measurement | None, candidate: Measurement, margin: float | None) -> bool:
    """Whether ``candidate`` beats the stored winner ``current`` by more than ``margin`` (a
    fraction of its median; None: the policy is off, TUNEHUB_RECORD_MARGIN)."""
    if margin is None or current is None or current.median_us is None:
        return False
    return candidate.median_us is not None and candidate.median_us < current.median_us * (
        1.0 - margin
    )


def upsert_best(
    session: Session,
    candidate: Measurement,
    tie_set: Sequence[str] = (),
    unmeasured: int = 0,
    *,
    record_margin: float | None = None,
) -> UpsertOutcome:
    """Make ``candidate`` (outcome ok) the best config of its key unless the stored one is
    not beaten with confidence (:func:`replaces_stored`). ``tie_set``: the variant names
    the candidate's job could not tell from its fastest; ``unmeasured``: the budgeted
    candidates that job left unmeasured (the key keeps the fewest any of its jobs left).
    A candidate that beats the stored winner by more than ``record_margin`` is ``held``:
    stored as the key's pending record, not served until another host confirms it
    (:mod:`service.store.confirm`)."""
    key = best_key(candidate)
    now = utcnow()
    names = list(tie_set)
    before = session.scalar(select(BestConfig.id).filter_by(**key))
    if before is None:
        row = {**key, "problem": candidate.problem, "measurement_id": candidate.id}
        row |= {"tie_set": names or None, "unmeasured": unmeasured}
        insert_ignore(session, BestConfig, [{**row, "created_at": now, "updated_at": now}])
    query = select(BestConfig).filter_by(**key)
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    best = session.scalars(query.execution_options(populate_existing=True)).one()
    if best.measurement_id == candidate.id:
        return "inserted"
    best.unmeasured = min(best.unmeasured, unmeasured)
    current = session.get(Measurement, best.measurement_id)
    if replaces_stored(session, current, candidate):
        if is_record(current, candidate, record_margin):
            best.pending_measurement_id = candidate.id
            return "held"
        best.measurement_id = candidate.id
        best.updated_at = now
        best.confirmed = False  # until another host re-measures the new winner
        best.tie_set = names or None
        return "replaced"
    kept = _kept_tie_set(session, best, candidate, names) if names else None
    if kept is not None:
        best.tie_set = kept
    return "kept"


def incumbents_of(session: Session, job: Job, task: Task, device_ids: Collection[int]) -> list[str]:
    """The variant names of the stored winners of the task's problem on these devices (the
    incumbents a lease names to the engine, and that a tie prefers: tuner.winner rule 3)."""
    if not device_ids:
        return []
    names = session.scalars(
        select(Variant.name)
        .join(Measurement, Measurement.variant_id == Variant.id)
        .join(BestConfig, BestConfig.measurement_id == Measurement.id)
        .where(
            BestConfig.op == job.op,
            BestConfig.dtype == job.dtype,
            BestConfig.layout == job.layout,
            BestConfig.problem_key == task.problem_key,
            BestConfig.device_id.in_(list(device_ids)),
        )
    )
    return sorted(set(names))
