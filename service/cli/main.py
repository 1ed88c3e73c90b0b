"""The ``tunehub`` command line: serve, tune, ask for the best config, run a worker, manage.

Every user error (bad dims, unknown op, unreachable server, refused token) prints one line to
stderr and exits 2; ``best`` exits 1 when the shape is not tuned yet; a tune whose job fails
exits 1; ``query`` documents its own (service/cli/query.py: 0, 1, 2, 3). Tracebacks are for
bugs only.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.logging import RichHandler
from sqlalchemy.exc import SQLAlchemyError

from service.cli.common import (
    MaxVariantsOpt,
    ServerOpt,
    TokenOpt,
    UserError,
    check_choice,
    make_client,
    resolve_server,
    resolve_token,
    stderr,
    stdout,
)
from service.cli.ops import best_app, tune_app
from service.cli.output import jobs_table
from service.cli.query import query_command
from service.cli.tokens import token_app
from service.client import ClientError
from service.errors import ServiceError
from service.settings import get_settings
from tuner.errors import TunerError
from tuner.registry import BACKENDS

__all__ = ["app", "main"]

log = logging.getLogger(__name__)

app = typer.Typer(
    name="tunehub",
    help="Kernel autotuning service with a persistent profile database.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
jobs_app = typer.Typer(help="List and cancel jobs.", invoke_without_command=True)
app.add_typer(db_app, name="db")
app.add_typer(tune_app, name="tune")
app.add_typer(best_app, name="best")
app.add_typer(jobs_app, name="jobs")
app.add_typer(token_app, name="token")
app.command("query")(query_command)

# -- jobs -----------------------------------------------------------------------------------


@jobs_app.callback()
def jobs_list(ctx: typer.Context, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """List jobs, newest first (``tunehub jobs cancel ID`` cancels one)."""
    if ctx.invoked_subcommand is not None:
        return
    with make_client(server, token) as client:
        jobs = client.list_jobs()
    if not jobs:
        stdout.print("no jobs yet")
        return
    stdout.print(jobs_table(jobs, stdout.width))


@jobs_app.command("cancel")
def jobs_cancel(job_id: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Cancel a queued or running job."""
    with make_client(server, token) as client:
        job = client.cancel_job(job_id)
    stdout.print(f"job {job_id}: {job.status}")


# -- db ------------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    url: Annotated[str | None, typer.Option(help="Database URL (default: settings).")] = None,
) -> None:
    """Migrate the database to the newest schema."""
    from service.store.db import current_revision, upgrade

    target = url or get_settings().database_url
    upgrade(target)
    stdout.print(f"database at revision {current_revision(target)}")


@db_app.command("current")
def db_current(
    url: Annotated[str | None, typer.Option(help="Database URL (default: settings).")] = None,
) -> None:
    """Print the database's schema revision."""
    from service.store.db import current_revision, head_revision

    revision = current_revision(url or get_settings().database_url)
    head = head_revision()
    note = "(up to date)" if revision == head else f"(newest is {head}; run tunehub db upgrade)"
    stdout.print(f"{revision or 'empty (not migrated)'} {note}")


# -- serve, worker, demo --------------------------------------------------------------------


@app.command("serve")
def serve_command(
    host: Annotated[str | None, typer.Option(help="Bind address (default: settings).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings).")] = None,
    local_worker: Annotated[
        bool | None,
        typer.Option(
            "--local-worker/--no-local-worker",
            help="Run a worker in the service (default: on for SQLite).",
        ),
    ] = None,
    migrate: Annotated[bool, typer.Option(help="Migrate the database before starting.")] = False,
    backend: Annotated[
        list[str] | None, typer.Option(help="Backends of the local worker (repeat; default cpu).")
    ] = None,
    access_log: Annotated[
        bool, typer.Option("--access-log", help="Log one line per HTTP request (default: off).")
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            min=1, max=64, help="API processes on the one port (default 1; one per core)."
        ),
    ] = 1,
) -> None:
    """Run the API (uvicorn), with the local worker on the embedded default."""
    from service.cli.serve import serve

    backends = tuple(backend or ["cpu"])
    for name in backends:
        check_choice("backend", name, list(BACKENDS))
    serve(
        get_settings(),
        host=host,
        port=port,
        local_worker=local_worker,
        migrate=migrate,
        backends=backends,
        access_log=access_log,
        workers=workers,
    )


@app.command("worker")
def worker_command(
    server: ServerOpt = None,
    token: TokenOpt = None,
    backend: Annotated[
        list[str] | None, typer.Option(help="Backends to serve (repeat; default cpu).")
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            envvar="TUNEHUB_WORKER_NAME",
            help="Worker name, as /v1/workers and /metrics show it (default: host name).",
        ),
    ] = None,
    devices: Annotated[
        str | None,
        typer.Option(help="GPUs to drive, as nvidia-smi numbers them: 0,2 (default: all)."),
    ] = None,
    slots: Annotated[
        int, typer.Option(help="CPU benchmarking slots, each on its own cores (default 1).")
    ] = 1,
) -> None:
    """Lease tasks from a tunehub server and tune them on this host's devices: one
    benchmarking slot per GPU (or per --slots on the CPU), compiles shared by all."""
    from service.agent.slots import plan_slots
    from service.cli.serve import run_remote_worker
    from tuner.backends.cuda_devices import parse_device_list

    backends = tuple(backend or ["cpu"])
    for backend_name in backends:
        check_choice("backend", backend_name, list(BACKENDS))
    chosen = parse_device_list(devices) if devices is not None else None
    if not resolve_token(token):
        raise UserError("a worker needs a token: --token or TUNEHUB_TOKEN")
    plan = plan_slots(backends, devices=chosen, cpu_slots=slots)
    run_remote_worker(get_settings(), resolve_server(server), resolve_token(token), plan, name)


@app.command("demo")
def demo_command(
    data_dir: Annotated[Path, typer.Option(help="Data dir of the demo server.")] = Path(
        ".tunehub-demo"
    ),
    max_variants: MaxVariantsOpt = None,
) -> None:
    """Start a server, tune a 4096x4096 f32 row sum on this CPU, then ask for the best config."""
    from service.cli.serve import run_demo

    raise typer.Exit(run_demo(data_dir, stdout, max_variants=max_variants))


@app.callback()
def _root(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(
        level=level,
        handlers=[RichHandler(console=stderr, show_path=False)],
        format="%(message)s",
        force=True,
    )
    if not verbose:
        for noisy in ("httpx", "httpcore", "alembic", "uvicorn.access"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _fail(message: str, code: int = 2) -> None:
    stderr.print(f"tunehub: {message}", markup=False, soft_wrap=True)
    sys.exit(code)


#: usage errors and other click errors; typer >= 0.2x ships its own copy of click
_CLICK_ERRORS: tuple[type[Exception], ...] = (click.ClickException, typer.TyperException)
_ABORTS: tuple[type[BaseException], ...] = (click.Abort, typer.Abort, KeyboardInterrupt)


class _ClosedPipeSafe:
    """sys.stdout for one command: when the reader goes away (``tunehub best ... | head -1``)
    the rest of the output is dropped instead of raising, so the exit status stays the
    command's own (0 answered, 1 not tuned, 2 bad input) and nothing is printed about it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.closed_by_reader = False

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.closed_by_reader = True
        try:  # the interpreter flushes stdout at exit: point it at /dev/null first
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, AttributeError, ValueError):
            pass  # not a real file (a test's capture): nothing is flushed at exit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point; turns user errors into one line and exit status 2."""
    real_stdout = sys.stdout
    sys.stdout = _ClosedPipeSafe(real_stdout)  # type: ignore[assignment]
    try:
        _main(argv)
    finally:
        sys.stdout.flush()
        sys.stdout = real_stdout


def _main(argv: Sequence[str] | None) -> None:
    command = typer.main.get_command(app)
    try:
        code = command.main(
            args=list(argv) if argv is not None else None,
            prog_name="tunehub",
            standalone_mode=False,
        )
    except _CLICK_ERRORS as exc:
        message = getattr(exc, "format_message", exc.__str__)()
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help is the answer
            stderr.print(message, markup=False)
            sys.exit(2)
        _fail(" ".join(message.split()))
    except _ABORTS:
        _fail("interrupted", 130)
    except (UserError, ClientError, TunerError, ServiceError) as exc:
        _fail(" ".join(str(exc).split()))
    except SQLAlchemyError as exc:
        _fail(f"database error: {str(exc).splitlines()[0]}")
    except OSError as exc:
        _fail(f"{exc.strerror or exc} {exc.filename or ''}".strip())
    else:
        sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
