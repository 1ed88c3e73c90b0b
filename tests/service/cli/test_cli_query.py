"""``tunehub query --file``: JSON lines in and out, exit codes, answers from the cache while the
service is down."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.cli.serve import create_token_in_db
from service.client import TunehubClient
from service.schemas.jobs import JobCreate
from service.schemas.worker import DeviceIn, LeaseRequest, ResultsIn, WorkerRegister
from service.settings import Settings, get_settings

TUNED = {"op": "reduce", "dtype": "f32", "problem": {"m": 64, "k": 512, "kind": "sum"}}
UNTUNED = {"op": "reduce", "dtype": "f32", "problem": {"m": 64, "k": 512, "kind": "max"}}
CPU = {"backend": "cpu", "name": "Test CPU", "arch": "x86_64", "sm_count": 4}


@pytest.fixture
def sqlite_settings(tmp_path: Path, _sqlite_template: Path) -> Settings:
    path = tmp_path / "tunehub.db"
    shutil.copyfile(_sqlite_template, path)
    return Settings(
        database_url=f"sqlite:///{path}",
        data_dir=tmp_path / "d",
        cache_dir=tmp_path / "c",
        verify_variants=False,  # tune() uploads a synthetic variant
    )


def tune(url: str, settings: Settings) -> None:
    submit = create_token_in_db(settings.database_url, "s", ["submit"])
    worker = create_token_in_db(settings.database_url, "w", ["worker"])
    with TunehubClient(url, submit) as user, TunehubClient(url, worker) as agent:
        user.submit(
            JobCreate.model_validate(
                {
                    "op": "reduce",
                    "dtype": "f32",
                    "problems": [TUNED["problem"]],
                    "device": {"backend": "cpu"},
                }
            )  # fmt: skip
        )
        worker_id = agent.register_worker(
            WorkerRegister(name="w", devices=[DeviceIn.model_validate(CPU)])
        ).id
        lease = agent.lease(LeaseRequest(worker_id=worker_id))
        assert lease is not None
        item = {"variant_id": "sha-a", "variant_name": "reduce_f32_p4", "params": {"pack": 4},
                "outcome": "ok", "median_us": 3.0}  # fmt: skip
        results = {"device": CPU, "toolchain": {"compiler": "g++", "template_version": "t"},
                   "measurements": [item], "final": True}  # fmt: skip
        agent.upload_results(lease.lease_id, ResultsIn.model_validate(results))


def run(
    capsys: pytest.CaptureFixture[str], shapes: Path, url: str, cache: Path, *extra: str
) -> tuple[int, list[dict[str, Any]], str]:
    args = ["query", "--file", str(shapes), "--server", url, "--cache-dir", str(cache), *extra]
    with pytest.raises(SystemExit) as exited:
        main(args)
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines() if line.strip()]
    return int(exited.value.code or 0), lines, captured.err


def test_query_file_answers_each_line_and_keeps_answering_from_the_cache(
    sqlite_settings: Settings,
    live_service: Callable[[Settings], Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service = live_service(sqlite_settings)
    tune(service.url, sqlite_settings)
    cache = tmp_path / "answers"
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps(TUNED) + "\n\n" + json.dumps(UNTUNED) + "\n")
    tuned_only = tmp_path / "tuned.jsonl"
    tuned_only.write_text(json.dumps(TUNED) + "\n")

    code, lines, _ = run(capsys, both, service.url, cache, "--backend", "cpu")
    assert code == 1
    assert [line["line"] for line in lines] == [1, 3]
    assert lines[0]["config"]["variant_name"] == "reduce_f32_p4" and not lines[0]["stale"]
    assert lines[1]["config"] is None and "not tuned" in lines[1]["error"]
    assert lines[0]["query"]["backend"] == "cpu"  # the default filled in

    assert run(capsys, tuned_only, service.url, cache)[0] == 0

    service.stop()
    code, lines, _ = run(capsys, tuned_only, service.url, cache)
    assert code == 0 and lines[0]["stale"] is True
    assert lines[0]["config"]["variant_name"] == "reduce_f32_p4"
    code, lines, _ = run(capsys, both, service.url, cache)
    assert code == 3
    assert lines[1]["config"] is None and "no cached answer" in lines[1]["error"]


def test_a_bad_line_is_exit_2_naming_the_line_and_nothing_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shapes = tmp_path / "bad.jsonl"
    shapes.write_text(json.dumps(TUNED) + "\n" + json.dumps({**TUNED, "op": "fft"}) + "\n")
    # nothing listens on port 9: a request would fail with exit 3, not 2
    code, lines, err = run(capsys, shapes, "http://127.0.0.1:9", tmp_path / "c")
    assert code == 2 and lines == []
    assert f"{shapes}:2: op:" in err
    shapes.write_text("{not json\n")
    assert run(capsys, shapes, "http://127.0.0.1:9", tmp_path / "c")[0] == 2
    code, _, err = run(capsys, tmp_path / "missing.jsonl", "http://127.0.0.1:9", tmp_path / "c")
    assert code == 2 and "cannot read" in err


def _best_into_closed_pipe(url: str, kind: str, tmp_path: Path) -> tuple[int, str]:
    """``tunehub best ... | head -1`` at its worst: the reader is gone before the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    args = [sys.executable, "-m", "service.cli", "best", "reduce", "--m", "64", "--k", "512",
            "--kind", kind, "--dtype", "f32", "--server", url]  # fmt: skip
    env = {**os.environ, "TUNEHUB_DATA_DIR": str(tmp_path / "d"),
           "TUNEHUB_CACHE_DIR": str(tmp_path / "c")}  # fmt: skip
    try:
        done = subprocess.run(
            args, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60, env=env
        )
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


def test_best_into_a_closed_pipe_keeps_its_exit_status(
    sqlite_settings: Settings, live_service: Callable[[Settings], Any], tmp_path: Path
) -> None:
    service = live_service(sqlite_settings)
    tune(service.url, sqlite_settings)
    code, err = _best_into_closed_pipe(service.url, "sum", tmp_path)
    assert (code, err) == (0, "")  # answered; the reader leaving is no error
    code, err = _best_into_closed_pipe(service.url, "max", tmp_path)
    assert (code, err) == (1, "")  # not tuned yet, whoever reads it


def test_query_applies_the_distance_bound_of_best(
    sqlite_settings: Settings,
    live_service: Callable[[Settings], Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service = live_service(sqlite_settings)
    tune(service.url, sqlite_settings)
    far = tmp_path / "far.jsonl"  # k 16x the tuned 512: log2 distance 4
    far.write_text(json.dumps({**TUNED, "problem": {"m": 64, "k": 8192, "kind": "sum"}}) + "\n")
    cache = tmp_path / "answers"
    code, lines, _ = run(capsys, far, service.url, cache, "--backend", "cpu")
    assert code == 1 and lines[0]["config"] is None
    assert "log2 distance 4.00, farther than 2" in lines[0]["error"]
    code, lines, _ = run(capsys, far, service.url, cache, "--backend", "cpu", "--max-distance", "5")
    assert code == 0 and lines[0]["config"]["variant_name"] == "reduce_f32_p4"


def test_best_answers_from_the_client_cache_while_the_service_is_down(
    sqlite_settings: Settings,
    live_service: Callable[[Settings], Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TUNEHUB_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    service = live_service(sqlite_settings)
    tune(service.url, sqlite_settings)
    best = ["best", "reduce", "--m", "64", "--k", "512", "--kind", "sum", "--dtype", "f32",
            "--server", service.url]  # fmt: skip
    try:
        with pytest.raises(SystemExit) as exited:
            main(best)
        assert exited.value.code == 0 and "reduce_f32_p4" in capsys.readouterr().out
        assert any((tmp_path / "cache" / "client").rglob("*.json"))  # kept for later
        service.stop()
        with pytest.raises(SystemExit) as exited:
            main(best)
    finally:
        get_settings.cache_clear()
    out, err = capsys.readouterr()
    assert exited.value.code == 0 and "reduce_f32_p4" in out
    assert "unreachable; this answer is from the cache" in err
