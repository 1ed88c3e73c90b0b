"""``/metrics`` in the Prometheus text format, through prometheus-client.

    install_metrics(app)    a per-app registry, the request middleware and the route

Per process: request counts (method, route template, status) and latency histograms (method,
route template). From the database at scrape time, so every API process reports the same
figures: jobs and tasks by status (``tunehub_tasks{status="queued"}``: tasks waiting),
measurements by variant outcome, lease expiries (``tasks.attempts`` counts them) and leases
expired but not yet requeued, best configs stored (a gauge: ``tunehub_best_configs``), and
per worker seen in the last day (labels ``worker`` id and ``name``): connected (seen within
a lease's length, the rule that decides whether a job waits), seconds since it was last
seen (registered, leased or heartbeat) and its slots busy (tasks it holds a lease on).

Requests are labelled with the route template they matched; the UI's static files with their
mount (``/ui/static``), and anything else that matched no route with ``unmatched``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
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
from service.store.models import BestConfig, Job, Measurement, Task, Worker, utcnow
from service.store.queue import worker_live_seconds

__all__ = ["LATENCY_BUCKETS", "Metrics", "MetricsMiddleware", "install_metrics", "router"]


def count_by(session: Session, column: Any) -> dict[str, int]:
    """Rows per value of ``column``."""
    return {key: n for key, n in session.execute(select(column, func.count()).group_by(column))}


#: seconds; fine below 25 ms, where a lookup should land
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: the route label of a request that matched no route (so junk paths cannot grow the labels)
UNMATCHED = "unmatched"
#: workers unseen for longer than this (a day) are left out of the worker gauges
WORKERS_SHOWN_S = 86_400

router = APIRouter(tags=["health"])


class _StoreCollector(Collector):
    """Figures read from the database at each scrape."""

    def __init__(self, maker: sessionmaker[Session], live_seconds: float) -> None:
        self._maker = maker
        self._live_seconds = live_seconds

    def collect(self) -> Iterator[Metric]:
        with self._maker() as session:
            now = utcnow()
            workers: list[tuple[str, str, datetime]] = [
                (worker_id, name, seen)
                for worker_id, name, seen in session.execute(
                    select(Worker.id, Worker.name, Worker.last_seen_at)
                    .where(Worker.last_seen_at >= now - timedelta(seconds=WORKERS_SHOWN_S))
                    .order_by(Worker.id)
                )
            ]
            busy: dict[str | None, int] = {
                owner: n
                for owner, n in session.execute(
                    select(Task.lease_owner, func.count())
                    .where(Task.status == "running", Task.lease_owner.is_not(None))
                    .group_by(Task.lease_owner)
                )
            }
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
        yield _by_status("tunehub_tasks", "Tasks by status (queued: waiting for a worker).", tasks)
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
        yield GaugeMetricFamily("tunehub_best_configs", "Best configs stored.", value=best)
        yield from _worker_gauges(workers, busy, now, self._live_seconds)


def _worker_gauges(
    workers: Sequence[tuple[str, str, datetime]],
    busy: Mapping[str | None, int],
    now: datetime,
    live_seconds: float,
) -> Iterator[Metric]:
    labels = ["worker", "name"]
    connected = GaugeMetricFamily(
        "tunehub_worker_connected",
        f"1 while the worker was seen in the last {live_seconds:g} s (a lease's length), else 0.",
        labels=labels,
    )
    age = GaugeMetricFamily(
        "tunehub_worker_last_seen_age_seconds",
        "Seconds since the worker last registered, leased or sent a heartbeat.",
        labels=labels,
    )
    slots = GaugeMetricFamily(
        "tunehub_worker_slots_busy", "Tasks the worker holds a lease on.", labels=labels
    )
    for worker_id, name, last_seen in workers:
        seconds = max((now - _aware(last_seen)).total_seconds(), 0.0)
        connected.add_metric([worker_id, name], 1.0 if seconds <= live_seconds else 0.0)
        age.add_metric([worker_id, name], seconds)
        slots.add_metric([worker_id, name], busy.get(worker_id, 0))
    yield from (connected, age, slots)


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _by_status(name: str, doc: str, counts: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["status"])
    for status in JOB_STATUSES:
        family.add_metric([status], counts.get(status, 0))
    return family


class Metrics:
    """One app's registry: request metrics of this process plus the store figures."""

    def __init__(self, maker: sessionmaker[Session], live_seconds: float) -> None:
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
        self.registry.register(_StoreCollector(maker, live_seconds))

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
            if template is None and "app_root_path" in scope:  # a mount matched: its path
                mounted = scope.get("root_path", "")[len(scope["app_root_path"]) :]
                template = f"{mounted}/{{path}}" if mounted else None  # never the file's name
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
    live = worker_live_seconds(app.state.settings.lease_seconds)
    app.state.metrics = Metrics(app.state.sessionmaker, live)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.include_router(router)
