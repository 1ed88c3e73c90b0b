"""The web UI under ``/ui``: server-rendered pages (Jinja2), tables that need no JavaScript,
plots drawn as SVG on the server. A page of an unfinished job refreshes itself (meta refresh).

    /ui/jobs                   jobs with live progress (and why a queued one waits)
    /ui/jobs/{id}              every candidate of a job, and its plots
    /ui/jobs/{id}/problems/{task_id}
                               one problem's search: time per parameter, best so far
    /ui/compare?a=&b=          two jobs side by side, per problem
    /ui/best                   best configs by device, op and toolchain (+ client-measured)
    /ui/measurements/{id}      a measurement's provenance
    /                          redirects to /ui

Every table sorts by a click on its header (static/sortable.js, numbers as numbers); the
pages work without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from service.api.deps import SessionDep, SettingsDep, ToolchainQuery, require_read
from service.api.ui import charts, data, labels, search_views
from service.api.ui.baselines import copy_ceiling, load_benchmark_file, vendor_figures
from service.api.ui.plots import best_so_far_chart, scatter_chart
from service.api.ui.svg import bar_chart, line_chart
from service.errors import NotFound
from service.schemas.common import FINISHED_STATUSES, JOB_STATUSES, SafeStr
from service.settings import Settings
from tuner.units import format_rate

__all__ = ["router", "root_router", "static_files", "REFRESH_SECONDS"]

HERE = Path(__file__).parent
REFRESH_SECONDS = 2
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.globals.update(
    rate=format_rate,
    problem_label=labels.problem_label,
    selector_label=labels.selector_label,
    device_label=labels.device_label,
    budget_label=labels.budget_label,
    SUSPECT_TEXT=labels.SUSPECT_TEXT,
)
router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(require_read)])
#: ``/`` itself: a person who opens the server's address lands on the UI
root_router = APIRouter(include_in_schema=False)
Text = Annotated[SafeStr | None, Query(max_length=300)]
PageNumber = Annotated[int, Query(ge=1, le=data.MAX_PAGE)]
#: an unknown id (or one no row can have) is answered with a page saying so
_NO_SUCH: dict[str, Any] = {"description": "no such id (an HTML page)"}


def static_files() -> StaticFiles:
    return StaticFiles(directory=HERE / "static")


def _page_url(request: Request, key: str, number: int) -> str:
    """This page's address with page ``key`` set to ``number`` (its filters kept)."""
    params = dict(request.query_params)
    params[key] = str(number)
    return f"{request.url.path}?{urlencode(params)}"


def _page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    context["page_url"] = lambda key, number: _page_url(request, key, number)
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def _not_found(request: Request, exc: NotFound) -> HTMLResponse:
    return _page(request, "error.html", status_code=404, message=exc.detail)


@root_router.get("/", response_class=RedirectResponse)
def site_root() -> RedirectResponse:
    return RedirectResponse("/ui")


@router.get("", response_class=RedirectResponse)
def ui_root() -> RedirectResponse:
    return RedirectResponse("/ui/jobs")


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    status: Text = None,
    op: Text = None,
    page: PageNumber = 1,
) -> Response:
    jobs, shown = data.list_jobs(session, status or None, op or None, page, settings.lease_seconds)
    live = any(job["status"] not in FINISHED_STATUSES for job in jobs)
    return _page(
        request,
        "jobs.html",
        jobs=jobs,
        page=shown,
        statuses=JOB_STATUSES,
        status=status or "",
        op=op or "",
        refresh=REFRESH_SECONDS if live else None,
    )


def _plots(job: dict[str, Any], rows: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
    if not rows:
        return {}
    device_name = rows[0]["device"]["name"]
    bench = load_benchmark_file(settings.ui_benchmark_file)
    if job["op"] in charts.BANDWIDTH_OPS:
        series, names = charts.bandwidth_series(rows)
        ceiling = copy_ceiling(
            device_name, (m["provenance"] for m in rows), settings.copy_gbps, bench
        )
        label = (
            f"device copy {format_rate(ceiling.value, 'GB/s')} ({ceiling.source})"
            if ceiling
            else ""
        )
        svg = line_chart(
            series,
            x_label="K (log2 scale)",
            y_label="achieved",
            unit=rows[0]["throughput_unit"] or "GB/s",
            ceiling=ceiling.value if ceiling else None,
            ceiling_label=label,
            winners=charts.winner_points(job["problems"]),
        )
        return {"line": svg, "line_params": names, "ceiling": ceiling}
    winners = {
        labels.problem_label(p["problem"]): (p["winner"] or {}).get("variant_id", "")
        for p in job["problems"]
    }
    baselines = {
        labels.problem_label(p["problem"]): vendor_figures(
            bench, device_name, job["op"], p["problem"]
        )
        for p in job["problems"]
    }
    bars = [
        (label, bar_chart(items, unit=unit, title=f"{job['op']} {label}"))
        for label, items, unit in charts.shape_bars(rows, winners, baselines)
    ]
    return {"bars": bars, "bench": bench if any(b[0] for b in baselines.values()) else None}


@router.get("/jobs/{job_id}", response_class=HTMLResponse, responses={404: _NO_SUCH})
def job_page(request: Request, job_id: str, session: SessionDep, settings: SettingsDep) -> Response:
    try:
        job = data.job_view(session, job_id, settings.lease_seconds)
    except NotFound as exc:
        return _not_found(request, exc)
    rows = data.job_measurements(session, job_id)
    winner_ids = {i for i in job["winner_ids"].values() if i is not None}
    return _page(
        request,
        "job.html",
        job=job,
        rows=rows,
        winner_ids=winner_ids,
        plots=_plots(job, rows, settings),
        refresh=None if job["status"] in FINISHED_STATUSES else REFRESH_SECONDS,
    )


@router.get(
    "/jobs/{job_id}/problems/{task_id}", response_class=HTMLResponse, responses={404: _NO_SUCH}
)
def search_page(
    request: Request, job_id: str, task_id: str, session: SessionDep, settings: SettingsDep
) -> Response:
    """One problem of a job: its candidates' time against each parameter, and the best
    time so far against candidates tried."""
    try:
        job = data.job_view(session, job_id, settings.lease_seconds)
        problem = next((p for p in job["problems"] if p["task_id"] == task_id), None)
        if problem is None:
            raise NotFound(f"job {job_id} has no problem (task) {task_id}")
    except NotFound as exc:
        return _not_found(request, exc)
    rows = [m for m in data.job_measurements(session, job_id) if m["task_id"] == task_id]
    winner_id = job["winner_ids"].get(task_id)
    axes, fixed = search_views.param_axes(rows)
    scatters = [
        (axis, scatter_chart(axis.name, axis.labels, dots))
        for axis, dots in search_views.param_scatters(rows, winner_id)
    ]
    dots, steps = search_views.best_so_far(rows, winner_id)
    return _page(
        request,
        "search.html",
        job=job,
        problem=problem,
        rows=rows,
        scatters=scatters,
        fixed=fixed,
        progress_chart=best_so_far_chart(dots, steps),
        steps=steps,
        failed=sum(1 for d in dots if d.kind == "failed"),
        refresh=None if job["status"] in FINISHED_STATUSES else REFRESH_SECONDS,
    )


@router.get("/compare", response_class=HTMLResponse, responses={404: _NO_SUCH})
def compare_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    a: Annotated[SafeStr | None, Query(max_length=100)] = None,
    b: Annotated[SafeStr | None, Query(max_length=100)] = None,
) -> Response:
    """Two jobs side by side: per problem each one's winner and time, and B's speed-up over
    A. Without both ids, a form to choose them from the recent jobs."""
    recent, _ = data.list_jobs(session, None, None, 1, settings.lease_seconds)
    if not (a and b):
        return _page(request, "compare.html", recent=recent, a=a or "", b=b or "", rows=None)
    try:
        job_a = data.job_view(session, a.strip(), settings.lease_seconds)
        job_b = data.job_view(session, b.strip(), settings.lease_seconds)
    except NotFound as exc:
        return _not_found(request, exc)
    rows = search_views.compare_problems(job_a, job_b)
    speedups = [r.speedup for r in rows if r.speedup]
    return _page(
        request,
        "compare.html",
        recent=recent,
        a=job_a["id"],
        b=job_b["id"],
        job_a=job_a,
        job_b=job_b,
        rows=rows,
        geomean=search_views.geomean([s for s in speedups if s]),
        compared=len(speedups),
    )


@router.get("/best", response_class=HTMLResponse)
def best_page(
    request: Request,
    session: SessionDep,
    device: Text = None,
    op: Text = None,
    toolchain: ToolchainQuery = None,
    page: PageNumber = 1,
    client_page: PageNumber = 1,
) -> Response:
    rows, shown = data.best_rows(session, device or None, op or None, toolchain or None, page)
    client_rows, client_shown = data.client_best_rows(session, device or None, client_page)
    return _page(
        request,
        "best.html",
        rows=rows,
        page=shown,
        client_rows=client_rows,
        client_page=client_shown,
        choices=data.choices(session),
        device=device or "",
        op=op or "",
        toolchain=toolchain or "",
    )


@router.get(
    "/measurements/{measurement_id}", response_class=HTMLResponse, responses={404: _NO_SUCH}
)
def measurement_page(request: Request, measurement_id: int, session: SessionDep) -> Response:
    try:
        measurement = data.measurement_view(session, measurement_id)
    except NotFound as exc:
        return _not_found(request, exc)
    provenance = measurement["provenance"]
    readings = [
        (when, provenance[key])
        for when, key in (("before", "nvml_before"), ("after", "nvml_after"))
        if isinstance(provenance.get(key), dict) and provenance[key]
    ]
    return _page(request, "measurement.html", m=measurement, readings=readings)
