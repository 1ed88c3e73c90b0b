"""The FastAPI application.

    app = create_app(settings)

Refuses to start on an empty or outdated database (``tunehub db upgrade`` fixes it), unless
``settings.migrate_on_start``. The local worker is not started here: ``tunehub serve`` runs
it beside the app, talking to it over HTTP like any other worker.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from service.api import ui
from service.api.errors import SafeJSONResponse, install_error_handlers
from service.api.fastpath import CachedLookupMiddleware
from service.api.limits import IMPORT_PATH, BodyLimitMiddleware
from service.api.metrics import install_metrics
from service.api.openapi import install_openapi
from service.api.routes import (
    artifacts,
    client_results,
    configs,
    devices,
    health,
    jobs,
    leases,
    measurements,
    tokens,
    workers,
)
from service.errors import DatabaseNotMigrated
from service.settings import Settings, get_settings
from service.store.db import check_revision, make_engine, make_sessionmaker, upgrade
from service.store.freshness import ChangeSignal
from service.store.read_model import ReadModel

__all__ = ["create_app"]

log = logging.getLogger(__name__)

API_VERSION = "1"


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app over ``settings.database_url``; raises DatabaseNotMigrated when the
    schema is not at the head revision and ``migrate_on_start`` is off."""
    settings = settings or get_settings()
    engine = make_engine(settings.database_url)
    try:
        check_revision(engine)
    except DatabaseNotMigrated:
        if not settings.migrate_on_start:
            engine.dispose()
            raise
        log.info("migrate_on_start: upgrading the database")
        upgrade(settings.database_url)
        check_revision(engine)

    signal = ChangeSignal(settings.database_url)
    model = ReadModel(engine, signal, settings.lookup_staleness_ms)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            model.check()  # load the answers before the first lookup waits for it
        except Exception:  # the lookups retry, and the full path answers meanwhile
            log.exception("the lookups' read model could not load; lookups use the full path")
        yield
        signal.close()
        engine.dispose()

    # /docs and /redoc with their assets served from the package, not a CDN: they work offline
    app = FastAPIOffline(
        title="tunehub",
        version=API_VERSION,
        description="Kernel autotuning service: jobs, leases, measurements and best configs.",
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = make_sessionmaker(engine)
    install_error_handlers(app)
    app.add_middleware(
        BodyLimitMiddleware,
        default=settings.max_body_bytes,
        per_path={IMPORT_PATH: settings.max_import_bytes},
        per_pattern=[(artifacts.UPLOAD_PATH, settings.max_artifact_bytes)],
    )
    # inside the metrics middleware (added below, so outside this), which counts its hits
    app.add_middleware(CachedLookupMiddleware, app_ref=app, model=model)
    app.state.read_model = model
    for module in (
        jobs,
        configs,
        measurements,
        workers,
        leases,
        tokens,
        health,
        client_results,
        artifacts,
        devices,
    ):
        app.include_router(module.router)
    install_metrics(app)
    app.include_router(ui.router)
    app.include_router(ui.root_router)
    app.mount("/ui/static", ui.static_files(), name="ui-static")
    install_openapi(app, settings)
    return app
