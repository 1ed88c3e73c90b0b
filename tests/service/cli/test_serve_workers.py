"""`tunehub serve --workers N`: N API processes on one port, built from the app factory with
the settings of serve, each seeing the others' writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.cli.serve import free_port
from service.cli.serve_workers import settings_environment
from service.settings import Settings
from tests.conftest import spawn_cli
from tests.service.store.test_import_checks import REAL_NAME, REAL_PARAMS


def test_the_settings_reach_the_processes_through_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/x.db",
        data_dir=tmp_path,
        cache_dir=tmp_path / "c",
        read_token_required=True,
        lookup_staleness_ms=25,
        record_margin=0.3,
        copy_gbps={"H200": 4125.0},
        local_worker=None,
    )
    for key in list(os.environ):
        if key.startswith("TUNEHUB_"):
            monkeypatch.delenv(key)
    for key, value in settings_environment(settings).items():
        if value is not None:
            monkeypatch.setenv(key, value)
    assert Settings() == settings


def _children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [
        int(c)
        for c in found
        if b"multiprocessing-fork" in Path(f"/proc/{c}/cmdline").read_bytes()
        and b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()
    ]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _record(m: int, median: float) -> dict[str, Any]:
    return {
        "op": "reduce",
        "dtype": "f32",
        "layout": "row",
        "problem": {"m": m, "k": 4096, "kind": "sum"},
        "device": {"backend": "cpu", "name": "Test CPU", "arch": "x86_64-avx2", "sm_count": 8},
        "toolchain": {"compiler": "g++ 12.2.0", "template_version": "t", "libraries": {}},
        "variant": {"id": "c" * 64, "name": REAL_NAME, "params": REAL_PARAMS},
        "measurement": {"outcome": "ok", "median_us": median, "p20_us": median * 0.99,
                        "p80_us": median * 1.01, "min_us": median * 0.98},
    }  # fmt: skip


def test_two_processes_serve_one_port_and_see_each_others_writes(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "TUNEHUB_DATA_DIR": str(tmp_path / "data"),
        "TUNEHUB_DATABASE_URL": f"sqlite:///{tmp_path / 'tunehub.db'}",
    }
    args = ["serve", "--port", str(port), "--no-local-worker", "--workers", "2"]
    log = tmp_path / "serve.log"
    server = spawn_cli(args, env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while len(_children(server.pid)) < 2 or not _up(base):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tunehub serve did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.5)
        workers = _children(server.pid)
        assert len(workers) == 2
        token = (tmp_path / "data" / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
        params = {"op": "reduce", "dtype": "f32", "m": 1024, "k": 4096, "kind": "sum"}
        before = {pid: _cpu_ticks(pid) for pid in workers}
        for median in (50.0, 20.0):  # written through one process, read through both
            imported = httpx.post(
                f"{base}/v1/import", content=json.dumps(_record(1024, median)), headers=headers
            )
            assert imported.status_code == 200, imported.text
            for _ in range(60):  # a new connection each: the kernel hands them to both
                answer = httpx.get(f"{base}/v1/configs/best", params=params, timeout=10)
                assert answer.status_code == 200 and answer.json()["median_us"] == median
        assert all(_cpu_ticks(pid) > before[pid] for pid in workers)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
