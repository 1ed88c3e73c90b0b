"""`tunehub serve` is quiet by default: no access-log line per request (workers poll for
leases all day); `--access-log` turns the lines on."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from service.cli.serve import free_port
from tests.conftest import spawn_cli


def _serve_and_poll(tmp_path: Path, *extra: str) -> str:
    """Start `tunehub serve` (SQLite, no local worker), send a few requests, stop it, and
    return what it printed."""
    port = free_port()
    env = {
        **os.environ,
        "TUNEHUB_DATA_DIR": str(tmp_path / "data"),
        "TUNEHUB_DATABASE_URL": f"sqlite:///{tmp_path / 'tunehub.db'}",
    }
    args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--no-local-worker", *extra]
    log = tmp_path / "serve.log"
    server = spawn_cli(args, env, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tunehub serve did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.2)
        for _ in range(3):
            httpx.get(f"http://127.0.0.1:{port}/v1/jobs", timeout=5)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
    return log.read_text(errors="replace")


def test_serve_logs_no_line_per_request_by_default(tmp_path: Path) -> None:
    printed = _serve_and_poll(tmp_path)
    assert "Uvicorn running" in printed or "Application startup complete" in printed, printed
    assert "GET /v1/jobs" not in printed and "GET /healthz" not in printed, printed


def test_access_log_turns_the_request_lines_on(tmp_path: Path) -> None:
    printed = _serve_and_poll(tmp_path, "--access-log")
    assert printed.count("GET /v1/jobs") == 3, printed
