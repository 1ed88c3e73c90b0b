"""The CLI as a user reads it at 80 columns and piped (stdout not a terminal): candidate names
whole, the winner's marker beside its name, dates on one line, --help within 80 columns, and
`tunehub best` saying which tuned shape answered and refusing one too far away."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from service.agent import WorkerAgent
from service.cli import main
from service.cli.output import best_answer_lines
from service.client import TunehubClient
from service.schemas.configs import MAX_NEAREST_DISTANCE, BestConfigOut
from tests.service.e2e.test_end_to_end import (  # noqa: F401  (fixtures)
    LiveServer,
    compile_cache,
    engine_config,
    live_server,
)

WIDTH = 80
REPO = Path(__file__).resolve().parents[3]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    code = exited.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().out


def fits(out: str) -> None:
    assert max(len(line) for line in out.splitlines()) <= WIDTH, out


def test_tune_and_best_read_whole_at_80_columns_piped(
    live_server: LiveServer,  # noqa: F811
    compile_cache: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    stop = threading.Event()
    agent = WorkerAgent(
        TunehubClient(live_server.url, live_server.worker_token),
        engine_config(compile_cache),
        ("cpu",),
        name="cli-output",
        poll_interval_s=0.05,
    )
    thread = threading.Thread(target=agent.run_forever, args=(stop,), daemon=True)
    thread.start()
    server = ["--server", live_server.url, "--token", live_server.admin_token]
    try:
        code, out = run_cli(
            ["tune", "reduce", "--m", "64", "--k", "2048", "--max-variants", "4", *server],
            capsys,
        )
    finally:
        stop.set()
        thread.join(timeout=30)
    assert code == 0, out
    fits(out)
    rows = [line for line in out.splitlines() if "reduce_f32_p" in line and "winner" not in line]
    names = [next(w for w in line.split() if w.startswith("reduce_f32_p")) for line in rows]
    # every candidate's whole name, one row each: none cut down to look like another
    assert len(names) == 4 and len(set(names)) == 4, out
    assert all(re.fullmatch(r"reduce_f32_p\d+_a\d+_u\d+", name) for name in names), names
    (winner_row,) = [line for line in rows if "*" in line]  # the marker on the name's line
    (winner_line,) = [line for line in out.splitlines() if line.startswith("winner for")]
    winner = next(w for w in winner_line.split() if w.startswith("reduce_f32_p"))
    assert winner in winner_row

    code, out = run_cli(["best", "reduce", "--m", "64", "--k", "2048", *server], capsys)
    assert code == 0 and "exact match" in out and winner in out
    fits(out)

    # a nearby shape: answered from the tuned one, which the answer names
    code, out = run_cli(["best", "reduce", "--m", "128", "--k", "2048", *server], capsys)
    assert code == 0, out
    assert "nearest tuned shape" in out and "m=64,k=2048,kind=sum" in out
    fits(out)

    # too far away: refused unless --max-distance allows it
    far = ["best", "reduce", "--m", "65536", "--k", "2048", *server]
    code, out = run_cli(far, capsys)
    assert code == 1 and "farther than" in out and "--max-distance" in out, out
    code, out = run_cli([*far, "--max-distance", "20"], capsys)
    assert code == 0 and "nearest tuned shape" in out, out


def test_max_distance_is_documented_where_users_look() -> None:
    readme = (REPO / "README.md").read_text()
    assert "--max-distance" in readme and f"{MAX_NEAREST_DISTANCE:g}" in readme


@pytest.mark.parametrize(
    "command",
    [[], ["tune"], ["tune", "gemm"], ["best", "reduce"], ["jobs"], ["serve"], ["worker"]],
)
def test_help_fits_80_columns_piped(command: list[str]) -> None:
    env = {**os.environ, "COLUMNS": str(WIDTH), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *command, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    fits(done.stdout)


def test_the_demo_keeps_its_compile_cache_in_its_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: the demo's folder holds its database, compile cache and token, whatever
    TUNEHUB_* the user has set."""
    from service.cli.serve import demo_environment
    from service.settings import Settings

    monkeypatch.setenv("TUNEHUB_CACHE_DIR", str(tmp_path / "elsewhere"))
    data_dir = tmp_path / ".tunehub-demo"
    env = demo_environment(data_dir)
    for name in ("TUNEHUB_DATA_DIR", "TUNEHUB_CACHE_DIR", "TUNEHUB_DATABASE_URL"):
        monkeypatch.setenv(name, env[name])
    settings = Settings()
    assert settings.cache_dir == data_dir / "cache"
    assert Path(settings.data_dir) == data_dir
    readme = (REPO / "README.md").read_text()
    assert "`./.tunehub-demo/cache`" in readme


def test_an_energy_job_on_the_cpu_backend_is_refused_in_one_line(
    live_server: LiveServer,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = ["--server", live_server.url, "--token", live_server.admin_token]
    args = ["tune", "reduce", "--m", "64", "--k", "2048", "--objective", "energy", *server]
    with pytest.raises(SystemExit) as exited:
        main(args)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert "energy counter" in err and "objective" in err, err
    assert "Traceback" not in err


def _answer(exact: bool) -> BestConfigOut:
    return BestConfigOut.model_validate(
        {
            "op": "reduce",
            "dtype": "f32",
            "layout": "row",
            "problem": {"m": 128, "k": 2048, "kind": "sum"},
            "tuned_problem": {"m": 64 if not exact else 128, "k": 2048, "kind": "sum"},
            "exact": exact,
            "distance": 0.0 if exact else 1.0,
            "variant_id": "sha-a",
            "variant_name": "reduce_f32_p4",
            "params": {"pack": 4},
            "median_us": 3.0,
            "p20_us": 2.9,
            "p80_us": 3.1,
            "throughput": 87.0,
            "throughput_unit": "GB/s",
            "device": {"backend": "cpu", "name": "Test CPU"},
            "toolchain": {},
            "measured_at": "2026-12-04T00:00:00Z",
        }  # fmt: skip
    )


def test_a_nearest_answer_says_whose_median_and_throughput_it_prints() -> None:
    lines = best_answer_lines(_answer(exact=False))
    (median,) = [line for line in lines if line.strip().startswith("median")]
    (throughput,) = [line for line in lines if line.strip().startswith("throughput")]
    assert "measured at m=64,k=2048,kind=sum" in median
    assert "measured at m=64,k=2048,kind=sum" in throughput
    assert not any("measured at" in line for line in best_answer_lines(_answer(exact=True)))
