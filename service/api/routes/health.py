"""``/healthz`` and ``/metrics`` (Prometheus text format)."""

from __future__ import annotations

import logging
from typing import Any

from alembic.runtime.migration import MigrationContext
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from service.api.deps import SessionDep
from service.schemas.common import JOB_STATUSES, HealthOut
from service.store.models import BestConfig, Job, Measurement, Task
from service.store.views import count_by

__all__ = ["router"]

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "the database does not answer"}},
)
def healthz(session: SessionDep) -> Response:
    """``{status, database, revision}``; 503 when the database does not answer."""
    try:
        revision = MigrationContext.configure(session.connection()).get_current_revision()
    except SQLAlchemyError as exc:
        log.warning("health check: database error: %s", exc)
        body: dict[str, Any] = {"status": "error", "database": "error", "revision": None}
        return JSONResponse(body, status_code=503)
    return JSONResponse({"status": "ok", "database": "ok", "revision": revision})


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(session: SessionDep) -> str:
    jobs = count_by(session, Job.status)
    tasks = count_by(session, Task.status)
    measurements = session.scalar(select(func.count()).select_from(Measurement)) or 0
    best = session.scalar(select(func.count()).select_from(BestConfig)) or 0
    lines = [
        "# HELP tunehub_jobs Jobs by status.",
        "# TYPE tunehub_jobs gauge",
        *(f'tunehub_jobs{{status="{s}"}} {jobs.get(s, 0)}' for s in JOB_STATUSES),
        "# HELP tunehub_tasks Tasks by status.",
        "# TYPE tunehub_tasks gauge",
        *(f'tunehub_tasks{{status="{s}"}} {tasks.get(s, 0)}' for s in JOB_STATUSES),
        "# HELP tunehub_tasks_queued Tasks waiting for a worker.",
        "# TYPE tunehub_tasks_queued gauge",
        f"tunehub_tasks_queued {tasks.get('queued', 0)}",
        "# HELP tunehub_measurements_total Measurements stored.",
        "# TYPE tunehub_measurements_total counter",
        f"tunehub_measurements_total {measurements}",
        "# HELP tunehub_best_configs_total Best configs stored.",
        "# TYPE tunehub_best_configs_total gauge",
        f"tunehub_best_configs_total {best}",
    ]
    return "\n".join(lines) + "\n"
