"""``/healthz`` (``/metrics`` is in :mod:`service.api.metrics`)."""

from __future__ import annotations

import logging
from typing import Any

from alembic.runtime.migration import MigrationContext
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from service.api.deps import SessionDep
from service.schemas.common import HealthOut

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
