"""What the CLI draws: the job progress bar and the tables of candidates, jobs and answers."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from service.client import TunehubClient
from service.schemas.common import FINISHED_STATUSES
from service.schemas.configs import BestConfigOut, MeasurementOut
from service.schemas.jobs import JobOut, JobSummary, ProblemStatus
from tuner.units import scale_rate

__all__ = [
    "watch_job",
    "watch_jobs",
    "candidates_table",
    "jobs_table",
    "winner_line",
    "best_answer_lines",
    "format_us",
    "format_throughput",
]


def format_us(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value:,.1f}" if value >= 100 else f"{value:.2f}"


def format_throughput(value: Any, unit: Any) -> str:
    """``value unit`` with one decimal, in the unit of its magnitude (tuner.units: a CPU
    GEMM in GFLOP/s, so that it does not print as 0.0 TFLOP/s)."""
    if not isinstance(value, int | float):
        return "-"
    value, unit = scale_rate(float(value), str(unit or ""))
    return f"{value:,.1f} {unit}".rstrip()


#: characters of a job id the progress line shows (the whole id is printed when submitted)
SHORT_ID = 8


def progress_columns() -> tuple[ProgressColumn, ...]:
    """The progress line: the job (short id, status, tasks), a bar that takes the room left,
    candidates done/total and the time elapsed; the counts fit at 80 columns."""
    return (
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=None),
        MofNCompleteColumn(),
        TextColumn("candidates"),
        TimeElapsedColumn(),
    )


def progress_description(job_id: str, status: str, tasks_done: int, tasks_total: int) -> str:
    return f"job {escape(job_id[:SHORT_ID])}: {status} ({tasks_done}/{tasks_total} tasks)"


def watch_job(
    client: TunehubClient,
    job_id: str,
    console: Console,
    poll_interval_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> JobOut:
    """Poll GET /v1/jobs/{id} until it ends, drawing candidates done/total; returns the job."""
    return watch_jobs(client, [job_id], console, poll_interval_s, sleep)[0]


def watch_jobs(
    client: TunehubClient,
    job_ids: Sequence[str],
    console: Console,
    poll_interval_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> list[JobOut]:
    """Poll every job until all have ended, one bar each (candidates done/total); a job's
    ``waiting_for`` line is printed above the bars whenever it changes. Returns the jobs."""
    columns = progress_columns()
    finished: dict[str, JobOut] = {}
    with Progress(*columns, console=console, transient=False) as progress:
        bars = {
            i: progress.add_task(progress_description(i, "queued", 0, 0), total=None)
            for i in job_ids
        }
        waiting: dict[str, str | None] = dict.fromkeys(job_ids)
        while True:
            for job_id in job_ids:
                if job_id in finished:
                    continue
                job = client.get_job(job_id)
                if job.waiting_for != waiting[job_id] and job.waiting_for:
                    # printed once per change, above the bar: nobody can take the job yet
                    progress.console.print(f"job {job_id}: {job.waiting_for}", markup=False)
                waiting[job_id] = job.waiting_for
                counts = job.progress
                total = counts.candidates_total or None
                done = counts.candidates_done
                bar = bars[job_id]
                description = progress_description(
                    job_id, job.status, counts.tasks_done, counts.tasks_total
                )
                progress.update(bar, total=total, completed=done, description=description)
                if job.status in FINISHED_STATUSES:
                    if total is None or job.status == "done":
                        full = max(done, total or 0, 1)
                        progress.update(bar, total=full, completed=full)
                    finished[job_id] = job
            if len(finished) == len(job_ids):
                return [finished[i] for i in job_ids]
            sleep(poll_interval_s)


def _problem_text(problem: Mapping[str, Any]) -> str:
    return escape(",".join(f"{k}={v}" for k, v in problem.items()))


#: below this console width the candidates table leaves out the p20-p80 column
WIDE_CANDIDATES_COLUMNS = 100
#: the candidates table's optional columns, left out in this order while it does not fit
_OPTIONAL_CANDIDATE_COLUMNS = ("p20-p80 us", "throughput", "#")


def candidates_table(
    measurements: Sequence[MeasurementOut], winners: set[str], width: int = WIDE_CANDIDATES_COLUMNS
) -> Table:
    """Every candidate, verified ones fastest first, then the failures. Names and outcomes
    are never cut or wrapped (variants differ in their last characters) and the winner's
    marker stays on its line: where the console is too narrow for every column, the p20-p80
    spread, then the throughput, then the row number are left out."""
    dropped: set[str] = set() if width >= WIDE_CANDIDATES_COLUMNS else {"p20-p80 us"}
    table = _candidates(measurements, winners, dropped)
    for column in _OPTIONAL_CANDIDATE_COLUMNS:
        if _natural_width(table) <= width:
            break
        dropped.add(column)
        table = _candidates(measurements, winners, dropped)
    return table


def _natural_width(table: Table) -> int:
    console = Console(width=10_000, file=io.StringIO(), color_system=None)
    return Measurement.get(console, console.options, table).maximum


def _candidates(
    measurements: Sequence[MeasurementOut], winners: set[str], dropped: set[str]
) -> Table:
    table = Table(
        title="candidates",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    shown = [
        c
        for c in ("#", "variant", "outcome", "median us", "p20-p80 us", "throughput")
        if c not in dropped
    ]
    longest = max((len(m.variant_name) for m in measurements), default=7)
    outcome_width = max((len(_outcome_text(m)) for m in measurements), default=7)
    for column in shown:
        if column == "variant":  # "* " marks the winner
            table.add_column(column, no_wrap=True, min_width=longest + 2)
        elif column == "outcome":
            table.add_column(column, no_wrap=True, min_width=outcome_width)
        else:
            table.add_column(column, justify="right", no_wrap=True)
    multi_problem = len({_problem_text(m.problem) for m in measurements}) > 1

    def order(m: MeasurementOut) -> tuple[str, int, float, str]:
        ok = m.outcome == "ok" and m.median_us is not None
        return (
            _problem_text(m.problem) if multi_problem else "",
            0 if ok else 1,
            float(m.median_us or 0.0) if ok else 0.0,
            m.variant_name,
        )

    if multi_problem:
        table.add_column("problem")
    for index, m in enumerate(sorted(measurements, key=order), start=1):
        name = escape(m.variant_name)
        style = "green" if m.outcome == "ok" else "red"
        won = m.variant_name in winners and m.outcome == "ok"
        spread = f"{format_us(m.p20_us)}-{format_us(m.p80_us)}" if m.p20_us is not None else "-"
        cells = {
            "#": str(index),
            "variant": f"[bold]* {name}[/bold]" if won else f"  {name}",
            "outcome": f"[{style}]{escape(_outcome_text(m))}[/{style}]",
            "median us": format_us(m.median_us),
            "p20-p80 us": spread,
            "throughput": format_throughput(m.throughput, m.throughput_unit),
        }
        row = [cells[c] for c in shown]
        if multi_problem:
            row.append(_problem_text(m.problem))
        table.add_row(*row)
    return table


def _outcome_text(m: MeasurementOut) -> str:
    return m.outcome + (" (suspect)" if m.suspect else "")


def winner_line(problem: ProblemStatus) -> str:
    """One line per problem of a finished job: its winner, or why there is none."""
    where = _problem_text(problem.problem)
    winner = problem.winner
    if winner:
        ties = [name for name in winner.tie_set if name != winner.variant_name]
        return (
            f"winner for {where}: [bold green]{escape(winner.variant_name)}[/bold green] "
            f"{format_us(winner.median_us)} us, "
            f"{format_throughput(winner.throughput, winner.throughput_unit)}"
            + (f"; {len(ties)} more tied (`best` names them)" if ties else "")
            + (
                ""
                if winner.complete
                else f"; [yellow]incomplete[/yellow]: {winner.unmeasured} budgeted candidates "
                "not measured"
            )
        )
    why = f"[red]{escape(problem.error)}[/red]" if problem.error else "no verified candidate"
    return f"no winner for {where}: {why}"


#: below this console width `tunehub jobs` leaves out the problems column (80 columns hold
#: the 32-character id, status, op, candidates and date on one line)
WIDE_JOBS_COLUMNS = 100


def jobs_table(jobs: Sequence[JobSummary], width: int = WIDE_JOBS_COLUMNS) -> Table:
    table = Table(
        title="jobs", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True
    )
    # ids are what a user copies into `jobs cancel`: never cut them
    id_width = max((len(job.id) for job in jobs), default=2)
    table.add_column("id", no_wrap=True, min_width=id_width)
    table.add_column("status", no_wrap=True)
    table.add_column("op", no_wrap=True)
    wide = width >= WIDE_JOBS_COLUMNS
    if wide:
        table.add_column("problems", overflow="fold")
    table.add_column("done", no_wrap=True, justify="right")  # candidates done/total
    # "MM-DD HH:MM" (UTC): one line, whatever the width
    table.add_column("created", no_wrap=True, min_width=11)
    for job in jobs:
        counts = job.progress
        problems = job.problems if isinstance(job, JobOut) else []
        shown = ", ".join(_problem_text(p.problem) for p in problems[:2])
        if len(problems) > 2:
            shown += f" (+{len(problems) - 2})"
        cells = [job.id, job.status, f"{job.op} {job.dtype}"]
        if wide:
            cells.append(shown or str(job.total_tasks))
        cells += [
            f"{counts.candidates_done}/{counts.candidates_total}",
            job.created_at.strftime("%m-%d %H:%M"),
        ]
        table.add_row(*cells)
    return table


def best_answer_lines(answer: BestConfigOut) -> list[str]:
    """The best-config answer as readable lines (exact, or nearest with its distance)."""
    if answer.exact:
        how = "[green]exact match[/green]"
    else:
        # the shape that was tuned, not the one asked for: the user judges how near it is
        how = (
            f"[yellow]nearest tuned shape[/yellow] {_problem_text(answer.tuned_problem)} "
            f"(log2 distance {answer.distance:.2f})"
        )
    device = " ".join(
        v for v in (answer.device.backend, answer.device.name, answer.device.arch) if v
    )
    toolchain = f"{answer.toolchain.compiler} tpl={answer.toolchain.template_version}"
    # a nearest answer's figures were measured on the tuned shape, not on the one asked for
    whose = "" if answer.exact else f" (measured at {_problem_text(answer.tuned_problem)})"
    library = answer.params.get("library")  # cutlass, cublaslt, cudnn or tunehub
    return [
        f"best config ({how})",
        f"  variant     [bold]{escape(answer.variant_name)}[/bold]",
        *([f"  library     [bold]{escape(str(library))}[/bold]"] if library else []),
        *(
            [f"  fused       {escape(str(fused))} (in the {escape(str(library))} kernel)"]
            if (fused := answer.params.get("epilogue"))
            else []
        ),
        f"  params      {escape(str(answer.params))}",
        f"  median      {format_us(answer.median_us)} us{whose}",
        "  throughput  " + format_throughput(answer.throughput, answer.throughput_unit) + whose,
        f"  device      {escape(device or '?')}",
        f"  toolchain   {escape(toolchain)}",
        "  confirmed   "
        + ("yes: re-measured on another host" if answer.confirmed else "no (one host)"),
        *(
            [f"  ties        {escape(', '.join(answer.tie_set))} (as fast, within the noise)"]
            if len(answer.tie_set) > 1
            else []
        ),
        *(
            []
            if answer.complete
            else [
                f"  complete    [yellow]no[/yellow]: {answer.unmeasured} budgeted candidates "
                "not measured yet (a later job measures them)"
            ]
        ),
        "  artifact    "
        + (
            f"{answer.artifact.url} ({answer.artifact.size} bytes, {answer.artifact.abi})"
            if answer.artifact is not None
            else "none uploaded yet"
        ),
    ]
