"""The long-running commands: ``serve`` (API + local worker), ``worker`` and ``demo``.

``serve`` on the embedded default migrates a new SQLite file, writes an admin token to
``<data_dir>/admin-token`` (mode 600) for the CLI on the same machine, and runs the worker
agent in a thread that talks to its own API over HTTP with a worker token it creates.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from sqlalchemy.engine import make_url

from service.agent import WorkerAgent
from service.agent.slots import SlotPool, SlotSpec
from service.cli.common import ADMIN_TOKEN_FILE, UserError
from service.cli.output import best_answer_lines
from service.client import ApiError, ConnectionFailed, TunehubClient
from service.schemas.configs import ConfigQuery
from service.settings import Settings
from tuner.types import EngineConfig

__all__ = [
    "ADMIN_TOKEN_FILE",
    "engine_config_from",
    "create_token_in_db",
    "ensure_admin_token",
    "serve",
    "run_remote_worker",
    "run_demo",
    "demo_environment",
    "free_port",
]

log = logging.getLogger(__name__)

#: the job the README's first command runs
DEMO_PROBLEM = {"m": 4096, "k": 4096, "kind": "sum"}
DEMO_START_TIMEOUT_S = 90.0
SERVER_STOP_TIMEOUT_S = 20.0


def engine_config_from(settings: Settings) -> EngineConfig:
    return EngineConfig(
        cache_dir=str(settings.cache_dir),
        compile_workers=settings.compile_workers,
        bench_seconds=settings.bench_seconds,
    )


def create_token_in_db(url: str, name: str, scopes: Sequence[str]) -> str:
    """Create a token straight in the database (no server needed); returns its plaintext."""
    from service.store.db import make_engine, make_sessionmaker
    from service.store.tokens import SCOPES, create_token

    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise UserError(f"scope must be one of {', '.join(SCOPES)}; got {', '.join(scopes)}")
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as session, session.begin():
            return create_token(session, name, scopes)
    finally:
        engine.dispose()


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.chmod(path, 0o600)  # an older file may have had wider permissions


def ensure_admin_token(settings: Settings) -> Path:
    """Write an admin token to ``<data_dir>/admin-token`` unless the one there still works."""
    from service.store.db import make_engine, make_sessionmaker
    from service.store.tokens import authenticate

    path = Path(settings.data_dir) / ADMIN_TOKEN_FILE
    if path.exists():
        engine = make_engine(settings.database_url)
        try:
            with make_sessionmaker(engine)() as session:
                if authenticate(session, path.read_text().strip()) is not None:
                    return path
        finally:
            engine.dispose()
        log.info("the admin token in %s is not in this database; writing a new one", path)
    token = create_token_in_db(settings.database_url, "admin", ["admin"])
    _write_private(path, token)
    log.info("admin token written to %s", path)
    return path


def _sqlite_file_is_new(url: str) -> bool:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return False
    return not Path(parsed.database).expanduser().exists()


def _bound_port(server: Any, fallback: int) -> int:
    """The port uvicorn listens on (differs from the setting when that was 0)."""
    for listener in getattr(server, "servers", []) or []:
        for sock in getattr(listener, "sockets", []) or []:
            return int(sock.getsockname()[1])
    return fallback


def _local_url(host: str, port: int) -> str:
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://{host}:{port}"


def _run_local_worker(
    settings: Settings, server: Any, token: str, backends: Sequence[str], stop: threading.Event
) -> None:
    while not server.started and not stop.is_set():
        stop.wait(0.1)
    if stop.is_set():
        return
    url = _local_url(settings.host, _bound_port(server, settings.port))
    client = TunehubClient(url, token)
    agent = WorkerAgent(client, engine_config_from(settings), backends, name="local-worker")
    log.info("local worker (%s) talks to %s", ", ".join(backends), url)
    try:
        agent.run_forever(stop)
    except Exception:  # the API keeps serving even if its worker dies
        log.exception("the local worker stopped")
    finally:
        client.close()


def serve(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    local_worker: bool | None = None,
    migrate: bool = False,
    backends: Sequence[str] = ("cpu",),
    access_log: bool = False,
    workers: int = 1,
) -> None:
    """Run uvicorn with the app until interrupted; the local worker runs beside it.
    ``workers`` > 1: that many API processes on one port (:mod:`service.cli.serve_workers`).

    Quiet by default: without ``access_log`` no line is logged per request (workers poll for
    leases every second or so, which would bury everything else)."""
    import uvicorn

    from service.api.app import create_app
    from service.store.db import check_revision, make_engine, upgrade

    updates: dict[str, Any] = {"host": host, "port": port, "local_worker": local_worker}
    settings = settings.model_copy(update={k: v for k, v in updates.items() if v is not None})
    settings.ensure_dirs()
    if migrate or settings.migrate_on_start or _sqlite_file_is_new(settings.database_url):
        upgrade(settings.database_url)
    # before anything reads a table: an unmigrated database gets "run `tunehub db upgrade`"
    engine = make_engine(settings.database_url)
    try:
        check_revision(engine)
    finally:
        engine.dispose()
    ensure_admin_token(settings)
    stop = threading.Event()
    worker_thread: threading.Thread | None = None

    def start_local_worker(server: Any, at: Settings) -> None:
        nonlocal worker_thread
        if not at.local_worker_enabled:
            return
        token = create_token_in_db(at.database_url, "local-worker", ["worker"])
        worker_thread = threading.Thread(
            target=_run_local_worker,
            args=(at, server, token, tuple(backends), stop),
            name="local-worker",
            daemon=True,
        )
        worker_thread.start()

    try:
        if workers > 1:
            from service.cli.serve_workers import Listening, run_processes

            def bound(port: int) -> None:
                at = settings.model_copy(update={"port": port})
                start_local_worker(Listening(settings.host, port), at)

            run_processes(settings, workers, access_log, bound)
        else:
            server = uvicorn.Server(
                uvicorn.Config(
                    create_app(settings),
                    host=settings.host,
                    port=settings.port,
                    log_level="info",
                    access_log=access_log,
                )
            )
            start_local_worker(server, settings)
            server.run()
    finally:
        stop.set()
        if worker_thread is not None:
            # a task in progress is abandoned; its lease expires and it is queued again
            worker_thread.join(timeout=10.0)


def run_remote_worker(
    settings: Settings,
    server_url: str,
    token: str | None,
    slots: Sequence[SlotSpec],
    name: str | None,
    connect_attempts: int = 30,
) -> None:
    """``tunehub worker``: register (waiting for the server to come up), then lease forever,
    one slot per GPU or CPU share (service/agent/slots.py)."""
    stop = threading.Event()
    pool = SlotPool(
        lambda: TunehubClient(server_url, token), engine_config_from(settings), slots, name=name
    )
    for attempt in range(1, connect_attempts + 1):
        try:
            pool.register()
            break
        except ConnectionFailed as exc:
            if attempt == connect_attempts:
                raise
            log.warning("%s (attempt %d of %d)", exc, attempt, connect_attempts)
            time.sleep(2.0)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log.info("worker %s serving %d slots from %s", pool.name, len(pool.agents), server_url)
    pool.run_forever(stop)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_healthy(client: TunehubClient, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + DEMO_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(
                f"the demo server exited ({proc.returncode}); see {log_path}:\n"
                + _log_tail(log_path)
            )
        try:
            client.healthz()
            return
        except (ConnectionFailed, ApiError):
            time.sleep(0.2)
    raise UserError(
        f"the demo server did not answer /healthz in {DEMO_START_TIMEOUT_S:.0f} s; see {log_path}"
    )


def _stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)  # uvicorn shuts down cleanly on SIGINT
    try:
        proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=SERVER_STOP_TIMEOUT_S)


#: the demo's compile cache, inside its data dir (README: "its own data folder")
DEMO_CACHE_SUBDIR = "cache"


def demo_environment(data_dir: Path) -> dict[str, str]:
    """The demo server's environment: everything it writes (SQLite database, compile cache,
    admin token, log) goes inside ``data_dir``, whatever TUNEHUB_* the user has set."""
    root = str(Path(__file__).resolve().parents[2])
    return {
        **os.environ,
        "TUNEHUB_DATA_DIR": str(data_dir),
        "TUNEHUB_DATABASE_URL": "",  # the SQLite file inside the demo's data dir
        "TUNEHUB_CACHE_DIR": str(data_dir / DEMO_CACHE_SUBDIR),
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }


def run_demo(data_dir: Path, console: Console, max_variants: int | None = None) -> int:
    """Serve from a fresh data dir, tune the README's reduce, ask for its best config, stop."""
    from service.cli.ops import run_tune

    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = demo_environment(data_dir)
    command = [
        sys.executable,
        "-m",
        "service.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--local-worker",
        "--migrate",
    ]
    log_path = data_dir / "server.log"
    console.print(
        f"starting tunehub on http://127.0.0.1:{port} (data in {data_dir}, log in {log_path})"
    )
    with open(log_path, "ab") as server_log:
        proc = subprocess.Popen(
            command, env=env, stdout=server_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        url = f"http://127.0.0.1:{port}"
        with TunehubClient(url) as probe:
            _wait_healthy(probe, proc, log_path)
        token = (data_dir / ADMIN_TOKEN_FILE).read_text().strip()
        with TunehubClient(url, token) as client:
            code = run_tune(
                client,
                op="reduce",
                dims=dict(DEMO_PROBLEM),
                dtype="f32",
                max_variants=max_variants,
                console=console,
            )
            try:
                query = ConfigQuery(
                    op="reduce", dtype="f32", problem=dict(DEMO_PROBLEM), backend="cpu"
                )
                answer = client.best_config(query)
            except ApiError as exc:
                console.print(f"GET /v1/configs/best: HTTP {exc.status}: {exc.detail}")
                return 1
            console.print("GET /v1/configs/best answers:")
            for line in best_answer_lines(answer):
                console.print(line)
            return code
    finally:
        _stop_server(proc)
        console.print("tunehub stopped")
