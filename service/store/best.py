"""The upsert of the best config of a key, by the winner rule of :mod:`tuner.winner`.

Who wins is decided in :mod:`tuner.winner` alone, the same code the engine runs; this module
reads the rows the rule needs and applies its verdicts: over a task's stored measurements
(their confirmation rounds travel in provenance) :func:`decide_winner` names the winner and
its tie set (``tuner.winner.decide_for``); a stored best config is replaced only by a winner
faster with confidence (``tuner.winner.replaces_stored_winner``, against the incumbent as the
candidate's own task timed it when it did), so re-tuning does not flip winners on noise; a
winner that beats the stored one by more than the team's TUNEHUB_RECORD_MARGIN
(``tuner.winner.is_record``) is held instead, until another host confirms it
(:mod:`service.store.confirm`). The best config keeps the deciding job's tie set and how many
budgeted candidates were left unmeasured. Uploads (:mod:`service.store.results`) and imports
(:mod:`service.store.imports`) both go through :func:`upsert_best`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store.keys import best_key, insert_ignore
from service.store.models import BestConfig, Job, Measurement, Task, Variant, utcnow
from service.store.rows import locked_row
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
    """The winning verified measurement and its tie set by :func:`tuner.winner.decide_for`
    (the rounds in each measurement's provenance, the ``incumbents`` by variant name)."""
    return winner_rule.decide_for(
        measurements,
        objective,
        median_us=lambda m: m.median_us,
        energy_j=lambda m: m.energy_j,
        name=lambda m: (names.get(m.variant_id, ""), m.variant_id, m.id),
        ok=lambda m: m.outcome == "ok",
        provenance=lambda m: m.provenance,
        incumbent=lambda m: names.get(m.variant_id) in incumbents,
    )


def winning_measurement(
    measurements: Sequence[Measurement], names: dict[str, str], objective: str = "time"
) -> Measurement | None:
    """The winning stored measurement of :func:`decide_winner` without incumbents, or None."""
    return decide_winner(measurements, names, objective).winner


def replaces_stored(session: Session, current: Measurement | None, candidate: Measurement) -> bool:
    """Whether ``candidate`` (outcome ok) replaces the stored winner ``current`` by
    :func:`tuner.winner.replaces_stored_winner`: against the incumbent as the candidate's own
    task measured it, when it did, else as stored."""
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
    assert candidate.median_us is not None
    return winner_rule.replaces_stored_winner(
        current.median_us if current is not None else None,
        candidate.median_us,
        candidate.provenance,
        None
        if again is None
        else winner_rule.Timed(again.outcome == "ok", again.median_us, again.provenance),
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
    """:func:`tuner.winner.is_record` of ``candidate`` over the stored winner ``current``."""
    stored_us = current.median_us if current is not None else None
    return winner_rule.is_record(stored_us, candidate.median_us, margin)


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
    best = locked_row(session, BestConfig, key)
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
