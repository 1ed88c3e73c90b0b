"""``/metrics`` in the Prometheus text format, through prometheus-client.

    install_metrics(app)    a per-app registry, the request middleware and the route

Per process: request counts (method, route template, status) and latency histograms (method,
route template). From the database at scrape time, so every API process reports the same
figures: jobs and tasks by status, tasks waiting, measurements by variant outcome, lease
expiries (``tasks.attempts`` counts them) and leases expired but not yet requeued, best
configs stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.schemas.common import JOB_STATUSES
from service.store.models import BestConfig, Job, Measurement, Task, utcnow
from service.store.views import count_by

__all__ = ["LATENCY_BUCKETS", "Metrics", "MetricsMiddleware", "install_metrics", "router"]

#: seconds; fine below 25 ms, where a lookup should land
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: the route label of a request that matched no route (so junk paths cannot grow the labels)
UNMATCHED = "unmatched"

router = APIRouter(tags=["health"])


class _StoreCollector(Collector):
    """Figures read from the database at each scrape."""

    def __init__(self, maker: sessionmaker[Session]) -> None:
        self._maker = maker

    def collect(self) -> Iterator[Metric]:
        with self._maker() as session:
            jobs = count_by(session, Job.status)
            tasks = count_by(session, Task.status)
            outcomes = count_by(session, Measurement.outcome)
            best = session.scalar(select(func.count()).select_from(BestConfig)) or 0
            expiries = session.scalar(select(func.coalesce(func.sum(Task.attempts), 0))) or 0
            overdue = (
                session.scalar(
                    select(func.count())
                    .select_from(Task)
                    .where(Task.status == "running", Task.lease_expires_at < utcnow())
                )
                or 0
            )
        yield _by_status("tunehub_jobs", "Jobs by status.", jobs)
        yield _by_status("tunehub_tasks", "Tasks by status.", tasks)
        yield GaugeMetricFamily(
            "tunehub_tasks_queued", "Tasks waiting for a worker.", value=tasks.get("queued", 0)
        )
        measured = CounterMetricFamily(
            "tunehub_measurements", "Measurements stored.", value=sum(outcomes.values())
        )
        yield measured
        by_outcome = CounterMetricFamily(
            "tunehub_variant_outcomes",
            "Measured variants by outcome (ok, wrong, crash, timeout, ...).",
            labels=["outcome"],
        )
        for outcome, count in sorted(outcomes.items()):
            by_outcome.add_metric([outcome], count)
        yield by_outcome
        yield CounterMetricFamily(
            "tunehub_lease_expiries",
            "Leases that expired and went back to the queue (or failed their task).",
            value=expiries,
        )
        yield GaugeMetricFamily(
            "tunehub_leases_overdue",
            "Running tasks whose lease has expired but is not requeued yet.",
            value=overdue,
        )
        yield GaugeMetricFamily("tunehub_best_configs_total", "Best configs stored.", value=best)


def _by_status(name: str, doc: str, counts: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["status"])
    for status in JOB_STATUSES:
        family.add_metric([status], counts.get(status, 0))
    return family


class Metrics:
    """One app's registry: request metrics of this process plus the store figures."""

    def __init__(self, maker: sessionmaker[Session]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "tunehub_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tunehub_http_request_duration_seconds",
            "Time from request to the end of the response, by method and route template.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StoreCollector(maker))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Times every HTTP request and labels it with the template of the route it matched."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path_format", None) or getattr(route, "path", None)
            self.metrics.observe(
                scope["method"], template or UNMATCHED, status, time.perf_counter() - start
            )


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
def metrics(request: Request) -> Response:
    """Prometheus text format (see the module doc for what is counted)."""
    body = request.app.state.metrics.render()
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def install_metrics(app: FastAPI) -> None:
    """Give ``app`` its registry, the request middleware and ``GET /metrics``."""
    app.state.metrics = Metrics(app.state.sessionmaker)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.include_router(router)
