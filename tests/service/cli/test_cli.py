"""The CLI's contract with its user: one line on stderr and exit 2 for every user error,
exit 1 for "not tuned yet", and the database and token commands (no server needed)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.cli import main
from service.cli.output import format_throughput
from service.cli.serve import ensure_admin_token
from service.settings import Settings, get_settings
from service.store.db import make_engine, make_sessionmaker
from service.store.tokens import authenticate

DOWN = "http://127.0.0.1:1"  # nothing listens on port 1


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    """Every CLI call here reads the environment the test set, not an earlier test's."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["tune", "reduce", "--m", "0", "--k", "8"], "m: must be >= 1"),
        (["tune", "reduce", "--m", "x", "--k", "8"], "--m"),
        (["tune", "reduce", "--k", "8"], "Missing option '--m'"),
        (["tune", "reduce", "--m", "8", "--k", "8", "--kind", "prod"], "kind"),
        (["tune", "reduce", "--m", "8", "--k", "8", "--dtype", "f64"], "dtype 'f64'"),
        (["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--layout", "xyz"], "layout"),
        (
            [
                "tune",
                "conv2d",
                "--n",
                "1",
                "--h",
                "2",
                "--w",
                "2",
                "--c",
                "1",
                "--k",
                "1",
                "--r",
                "5",
                "--s",
                "5",
            ],
            "empty output",
        ),
        (["tune", "reduce", "--m", "8", "--k", "8", "--strategy", "magic"], "strategy"),
        (["tune", "reduce", "--m", "8", "--k", "8", "--objective", "watts"], "objective"),
        (["tune", "transpose", "--m", "8"], "No such command 'transpose'"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["best", "softmax", "--m", "-3", "--k", "8"], "m: must be >= 1"),
        (["tune", "rms_norm", "--m", "8", "--k", "0"], "k: must be >= 1"),
        (["best", "rms_norm", "--m", "8"], "Missing option '--k'"),
    ],
)
def test_user_errors_print_one_line_and_exit_2(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli([*args, "--server", DOWN] if args[0] != "frobnicate" else args, capsys)
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("tunehub: ")
    assert expected in line
    assert out == ""


@pytest.mark.parametrize(
    "args",
    [
        ["tune", "softmax", "--m", "8", "--k", "8"],
        ["best", "gemm", "--m", "8", "--n", "8", "--k", "8"],
        ["jobs"],
        ["jobs", "cancel", "abc"],
    ],
)
def test_server_down_is_one_line_and_exit_2(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli([*args, "--server", DOWN], capsys)
    assert code == 2
    assert f"cannot reach tunehub at {DOWN}" in one_error_line(err)


def test_server_from_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNEHUB_SERVER", "http://127.0.0.1:2")
    code, _, err = run_cli(["jobs"], capsys)
    assert code == 2
    assert "http://127.0.0.1:2" in one_error_line(err)


def test_worker_without_token_is_a_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TUNEHUB_TOKEN", raising=False)
    # a data dir without the local admin-token file that `tunehub serve` writes
    monkeypatch.setenv("TUNEHUB_DATA_DIR", str(tmp_path / "data"))
    code, _, err = run_cli(["worker", "--server", DOWN], capsys)
    assert code == 2
    assert "needs a token" in one_error_line(err)


def test_db_upgrade_and_current(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    code, out, _ = run_cli(["db", "current", "--url", url], capsys)
    assert code == 0 and "not migrated" in out
    code, out, _ = run_cli(["db", "upgrade", "--url", url], capsys)
    assert code == 0 and "database at revision" in out
    code, out, _ = run_cli(["db", "current", "--url", url], capsys)
    assert code == 0 and "up to date" in out


def test_db_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["db", "current", "--url", "nosuchdriver://x/y"], capsys)
    assert code == 2
    assert "database error" in one_error_line(err)


def test_token_create_stores_a_working_token(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        [
            "token",
            "create",
            "--name",
            "gpu-host-1",
            "--scope",
            "worker",
            "--scope",
            "read",
            "--url",
            database_url,
        ],
        capsys,
    )
    assert code == 0
    token = out.strip()
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            row = authenticate(session, token)
            assert row is not None and row.name == "gpu-host-1"
            assert sorted(row.scopes) == ["read", "worker"]
    finally:
        engine.dispose()


def test_token_create_refuses_an_unknown_scope(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(
        ["token", "create", "--name", "x", "--scope", "root", "--url", database_url], capsys
    )
    assert code == 2
    assert "scope" in one_error_line(err)


def test_admin_token_file_is_private_and_reused(settings: Settings) -> None:
    settings.ensure_dirs()
    path = ensure_admin_token(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    assert ensure_admin_token(settings).read_text() == first  # still valid: kept
    path.write_text("th_stale\n")
    assert ensure_admin_token(settings).read_text() != "th_stale\n"  # invalid: replaced


def test_console_script_module_runs(tmp_path: Path) -> None:
    """``python -m service.cli`` (what ``tunehub demo`` starts) exits 2 on a user error."""
    env = {**os.environ, "TUNEHUB_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "tune", "reduce", "--m", "0", "--k", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("tunehub: ")


def test_compute_rates_under_a_teraflop_print_in_gflops() -> None:
    assert format_throughput(0.0523, "TFLOP/s") == "52.3 GFLOP/s"  # a CPU GEMM
    assert format_throughput(612.4, "TFLOP/s") == "612.4 TFLOP/s"  # an H200 GEMM
    assert format_throughput(25.5, "GB/s") == "25.5 GB/s"
    assert format_throughput(None, "GB/s") == "-"


def test_serve_on_an_unmigrated_database_says_run_db_upgrade(
    empty_database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if empty_database_url.startswith("sqlite"):  # an existing file (a new one is migrated)
        with sqlite3.connect(empty_database_url.removeprefix("sqlite:///")) as connection:
            connection.execute("CREATE TABLE unrelated (id INTEGER)")
    monkeypatch.setenv("TUNEHUB_DATABASE_URL", empty_database_url)
    monkeypatch.setenv("TUNEHUB_DATA_DIR", str(tmp_path / "data"))
    code, _, err = run_cli(["serve", "--port", "0", "--no-local-worker"], capsys)
    assert code == 2
    line = one_error_line(err)
    assert "not migrated" in line and "run `tunehub db upgrade`" in line, line
