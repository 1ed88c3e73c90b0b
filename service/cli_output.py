"""What the CLI draws: the job progress bar and the tables of candidates, jobs and answers."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from service.client import TunehubClient

__all__ = [
    "TERMINAL_STATUSES",
    "watch_job",
    "candidates_table",
    "jobs_table",
    "winner_line",
    "best_answer_lines",
    "format_us",
    "format_throughput",
]

TERMINAL_STATUSES = frozenset({"done", "failed", "cancelled"})


def format_us(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value:,.1f}" if value >= 100 else f"{value:.2f}"


def format_throughput(value: Any, unit: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value:,.1f} {unit or ''}".rstrip()


def watch_job(
    client: TunehubClient,
    job_id: Any,
    console: Console,
    poll_interval_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll GET /v1/jobs/{id} until it ends, drawing candidates done/total; returns the job."""
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("candidates"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(f"job {job_id}: queued", total=None)
        while True:
            job = client.get_job(job_id)
            counts = job.get("progress") or {}
            total = counts.get("candidates_total") or None
            done = counts.get("candidates_done") or 0
            tasks = f"{counts.get('tasks_done', 0)}/{counts.get('tasks_total', '?')} tasks"
            status = str(job.get("status", "?"))
            progress.update(bar, total=total, completed=done,
                            description=f"job {job_id}: {status} ({tasks})")
            if status in TERMINAL_STATUSES:
                if total is None or status == "done":
                    finished = max(done, total or 0, 1)
                    progress.update(bar, total=finished, completed=finished)
                return job
            sleep(poll_interval_s)


def _problem_text(problem: Any) -> str:
    if isinstance(problem, Mapping):
        dims = problem.get("dims", problem)
        if isinstance(dims, Mapping):
            return escape(",".join(f"{k}={v}" for k, v in dims.items()))
    return escape(str(problem))


def candidates_table(measurements: Sequence[Mapping[str, Any]], winners: set[str]) -> Table:
    """Every candidate, verified ones fastest first, then the failures."""
    table = Table(title="candidates", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("variant")
    table.add_column("outcome")
    table.add_column("median us", justify="right")
    table.add_column("p20-p80 us", justify="right")
    table.add_column("throughput", justify="right")
    multi_problem = len({_problem_text(m.get("problem")) for m in measurements}) > 1

    def order(m: Mapping[str, Any]) -> tuple[str, int, float, str]:
        ok = m.get("outcome") == "ok" and isinstance(m.get("median_us"), int | float)
        return (_problem_text(m.get("problem")) if multi_problem else "", 0 if ok else 1,
                float(m["median_us"]) if ok else 0.0, str(m.get("variant_name", "")))

    if multi_problem:
        table.add_column("problem")
    for index, m in enumerate(sorted(measurements, key=order), start=1):
        name = escape(str(m.get("variant_name", m.get("variant_id", "?"))))
        outcome = escape(str(m.get("outcome", "?")))
        style = "green" if outcome == "ok" else "red"
        won = str(m.get("variant_name")) in winners and outcome == "ok"
        spread = (f"{format_us(m.get('p20_us'))}-{format_us(m.get('p80_us'))}"
                  if m.get("p20_us") is not None else "-")
        row = [
            str(index),
            f"[bold]{name}[/bold] *" if won else name,
            f"[{style}]{outcome}[/{style}]" + (" (suspect)" if m.get("suspect") else ""),
            format_us(m.get("median_us")),
            spread,
            format_throughput(m.get("throughput"), m.get("throughput_unit")),
        ]
        if multi_problem:
            row.append(_problem_text(m.get("problem")))
        table.add_row(*row)
    return table


def winner_line(problem: Mapping[str, Any]) -> str:
    """One line per problem of a finished job: its winner, or why there is none."""
    where = _problem_text(problem.get("problem"))
    winner = problem.get("winner")
    if winner:
        name = escape(str(winner.get("variant_name", winner.get("variant_id", "?"))))
        return (f"winner for {where}: [bold green]{name}[/bold green] "
                f"{format_us(winner.get('median_us'))} us, "
                f"{format_throughput(winner.get('throughput'), winner.get('throughput_unit'))}")
    error = problem.get("error")
    why = f"[red]{escape(str(error))}[/red]" if error else "no verified candidate"
    return f"no winner for {where}: {why}"


def jobs_table(jobs: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="jobs")
    # ids are what a user copies into `jobs cancel`: never cut them
    id_width = max((len(str(job.get("id", ""))) for job in jobs), default=2)
    table.add_column("id", no_wrap=True, min_width=id_width)
    table.add_column("status", no_wrap=True)
    table.add_column("op", no_wrap=True)
    table.add_column("problems", overflow="fold")
    table.add_column("candidates", no_wrap=True, justify="right")
    table.add_column("created", overflow="fold")
    for job in jobs:
        counts = job.get("progress") or {}
        problems = job.get("problems") or []
        shown = ", ".join(_problem_text(p.get("problem", p)) for p in problems[:2])
        if len(problems) > 2:
            shown += f" (+{len(problems) - 2})"
        table.add_row(
            str(job.get("id", "?")),
            str(job.get("status", "?")),
            f"{job.get('op', '')} {job.get('dtype', '')}".strip(),
            shown or str(job.get("total_tasks", "")),
            f"{counts.get('candidates_done', 0)}/{counts.get('candidates_total', 0)}",
            str(job.get("created_at", ""))[:16].replace("T", " "),
        )
    return table


def best_answer_lines(answer: Mapping[str, Any]) -> list[str]:
    """The best-config answer as readable lines (exact, or nearest with its distance)."""
    exact = bool(answer.get("exact"))
    if exact:
        how = "[green]exact match[/green]"
    else:
        how = f"[yellow]nearest tuned shape[/yellow] (log-distance {answer.get('distance', '?')})"
        if answer.get("problem"):
            how += f": {_problem_text(answer['problem'])}"
    device = answer.get("device")
    if isinstance(device, Mapping):
        device = " ".join(str(device[k]) for k in ("backend", "name", "arch") if device.get(k))
    toolchain = answer.get("toolchain")
    if isinstance(toolchain, Mapping):
        toolchain = f"{toolchain.get('compiler', '')} tpl={toolchain.get('template_version', '')}"
    return [
        f"best config ({how})",
        f"  variant     [bold]{escape(str(answer.get('variant_name', '?')))}[/bold]",
        f"  params      {escape(str(answer.get('params', {})))}",
        f"  median      {format_us(answer.get('median_us'))} us",
        "  throughput  "
        + format_throughput(answer.get("throughput"), answer.get("throughput_unit")),
        f"  device      {escape(str(device or '?'))}",
        f"  toolchain   {escape(str(toolchain or '?'))}",
    ]
