"""The web UI under ``/ui``: server-rendered pages (Jinja2), tables that need no JavaScript,
plots drawn as SVG on the server. A page of an unfinished job refreshes itself (meta refresh).

    /ui/jobs                   jobs with live progress
    /ui/jobs/{id}              every candidate of a job, and its plots
    /ui/best                   best configs by device, op and toolchain (+ client-measured)
    /ui/measurements/{id}      a measurement's provenance
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from service.api.deps import SessionDep, SettingsDep, require_read
from service.api.ui import charts, data
from service.api.ui.baselines import copy_ceiling, load_benchmark_file, vendor_figures
from service.api.ui.svg import bar_chart, line_chart
from service.errors import NotFound
from service.schemas.common import FINISHED_STATUSES, JOB_STATUSES, SafeStr
from service.settings import Settings

__all__ = ["router", "static_files", "REFRESH_SECONDS"]

HERE = Path(__file__).parent
REFRESH_SECONDS = 2
templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(require_read)])
Text = Annotated[SafeStr | None, Query(max_length=300)]
#: an unknown id (or one no row can have) is answered with a page saying so
_NO_SUCH: dict[str, Any] = {"description": "no such id (an HTML page)"}


def static_files() -> StaticFiles:
    return StaticFiles(directory=HERE / "static")


def _page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def _not_found(request: Request, exc: NotFound) -> HTMLResponse:
    return _page(request, "error.html", status_code=404, message=exc.detail)


@router.get("", response_class=RedirectResponse)
def ui_root() -> RedirectResponse:
    return RedirectResponse("/ui/jobs")


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(
    request: Request, session: SessionDep, status: Text = None, op: Text = None
) -> Response:
    jobs = data.list_jobs(session, status or None, op or None)
    live = any(job["status"] not in FINISHED_STATUSES for job in jobs)
    return _page(
        request,
        "jobs.html",
        jobs=jobs,
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
        label = f"device copy {ceiling.value:.0f} GB/s ({ceiling.source})" if ceiling else ""
        svg = line_chart(
            series,
            x_label="K (log2 scale)",
            y_label=f"achieved {rows[0]['throughput_unit'] or 'GB/s'}",
            ceiling=ceiling.value if ceiling else None,
            ceiling_label=label,
        )
        return {"line": svg, "line_params": names, "ceiling": ceiling}
    winners = {
        charts.problem_label(p["problem"]): (p["winner"] or {}).get("variant_id", "")
        for p in job["problems"]
    }
    baselines = {
        charts.problem_label(p["problem"]): vendor_figures(
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
        job = data.job_view(session, job_id)
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
        problem_label=charts.problem_label,
        refresh=None if job["status"] in FINISHED_STATUSES else REFRESH_SECONDS,
    )


@router.get("/best", response_class=HTMLResponse)
def best_page(
    request: Request,
    session: SessionDep,
    device: Text = None,
    op: Text = None,
    toolchain: Annotated[SafeStr | None, Query(max_length=1000)] = None,
) -> Response:
    return _page(
        request,
        "best.html",
        rows=data.best_rows(session, device or None, op or None, toolchain or None),
        client_rows=data.client_best_rows(session, device or None),
        choices=data.choices(session),
        device=device or "",
        op=op or "",
        toolchain=toolchain or "",
        problem_label=charts.problem_label,
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
    return _page(
        request,
        "measurement.html",
        m=measurement,
        readings=readings,
        problem_label=charts.problem_label,
    )
