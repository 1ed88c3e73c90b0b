"""Jobs: submitted as a ``Job`` row and one ``Task`` per problem.

problems = parse_problems(body)                      # 422 naming the bad dim, nothing stored
job = submit_job(session, body, problems, token, confirm=settings.confirm)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.orm import Session

from service.schemas.jobs import JobCreate
from service.store.models import ApiToken, Job, Task
from service.store.validation import parse_problem
from tuner.problems import Problem

__all__ = ["parse_problems", "submit_job"]

log = logging.getLogger(__name__)


def parse_problems(body: JobCreate) -> list[Problem]:
    """The job's problems, parsed once here at the door (InvalidInput names the bad one)."""
    return [
        parse_problem(body.op, fields, ["body", "problems", index])
        for index, fields in enumerate(body.problems)
    ]


def submit_job(
    session: Session,
    body: JobCreate,
    problems: Sequence[Problem],
    owner: ApiToken,
    *,
    confirm: int,
) -> Job:
    """Store the job and one queued task per problem, owned by ``owner``; commits. ``confirm``:
    the server's TUNEHUB_CONFIRM, used when the body names none."""
    assert body.layout is not None  # JobCreate defaults it from the op
    job = Job(
        op=body.op,
        dtype=body.dtype,
        layout=body.layout,
        device=body.device.model_dump(exclude_none=True),
        backend=body.device.backend,
        strategy=body.strategy,
        budget=body.budget.model_dump(),
        objective=body.objective,
        seed=body.seed,
        confirm=body.confirm or confirm,
        token_id=owner.id,
    )
    session.add(job)
    session.flush()
    for position, problem in enumerate(problems):
        session.add(
            Task(
                job_id=job.id, position=position, problem=problem.dims(), problem_key=problem.key()
            )
        )
    session.commit()
    log.info("job %s: %s %s %s, %d problems", job.id, job.op, job.dtype, job.layout, len(problems))
    return job
