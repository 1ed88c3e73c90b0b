"""``tunehub tune --from-file``: every bad line named before anything is sent (exit 2), and
against a live server with a CPU worker: duplicates dropped, shapes already tuned skipped
(one batch query), one job per op/dtype/layout/device, a summary readable at 80 columns."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from service.agent import WorkerAgent
from service.cli import main
from service.cli.common import UserError
from service.cli.tune_file import read_shapes
from service.client import TunehubClient
from tests.service.e2e.test_end_to_end import (  # noqa: F401  (fixtures)
    LiveServer,
    compile_cache,
    engine_config,
    live_server,
)
from tuner.backends import cpu_host

DOWN = "http://127.0.0.1:1"  # nothing listens on port 1
WIDTH = 80


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), out, err


def fits(out: str) -> None:
    assert max(len(line) for line in out.splitlines()) <= WIDTH, out


def write(path: Path, *records: Any) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return path


SUM = {"op": "reduce", "dtype": "f32", "problem": {"m": 64, "k": 1024, "kind": "sum"}}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "shapes.jsonl:2: not JSON"),
        ("[1, 2]", "shapes.jsonl:2: must be a JSON object"),
        ({**SUM, "op": "attention"}, "shapes.jsonl:2: op: Input should be"),
        ({**SUM, "dtype": "f64"}, "shapes.jsonl:2: dtype:"),
        ({**SUM, "layout": "rcr"}, "shapes.jsonl:2: layout: 'rcr' is not one of row"),
        ({**SUM, "problem": {"m": 0, "k": 8}}, "shapes.jsonl:2: problem: m: must be >= 1"),
        ({**SUM, "problem": {"m": 4, "k": 8, "z": 1}}, "shapes.jsonl:2: problem: z:"),
        ({**SUM, "colour": "red"}, "shapes.jsonl:2: colour: Extra inputs"),
        ({**SUM, "device": "gpu:X:sm_90:1"}, "shapes.jsonl:2: device: 'gpu:X:sm_90:1' is"),
        ({**SUM, "dtype": "e4m3"}, "shapes.jsonl:2: dtype: 'e4m3' is not one of f16, bf16, f32"),
        (
            {
                "op": "scaled_gemm",
                "dtype": "e4m3",
                "problem": {"m": 8, "n": 200, "k": 256, "scaling": "block"},
            },
            "shapes.jsonl:2: problem: n: must be a multiple of 128",
        ),  # fmt: skip
    ],
)
def test_a_bad_line_is_named_and_nothing_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: Any, message: str
) -> None:
    path = write(tmp_path / "shapes.jsonl", SUM, line)
    code, out, err = run_cli(["tune", "--from-file", str(path), "--server", DOWN], capsys)
    assert code == 2, (out, err)
    (error,) = [text for text in err.splitlines() if text.strip()]
    assert message in error and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tune", "--from-file", "missing.jsonl"], "cannot read missing.jsonl"),
        (["tune", "--from-file", "EMPTY"], "no shapes"),
        (["tune", "--from-file", "GOOD", "--strategy", "magic"], "strategy 'magic'"),
        (["tune", "--from-file", "GOOD", "--backend", "tpu"], "backend 'tpu'"),
        (["tune", "--from-file", "GOOD", "--max-variants", "0"], "budget.max_variants"),
        (["tune", "--from-file", "GOOD", "gemm"], "--from-file takes no op"),
        (["tune", "--max-variants", "3", "reduce", "--m", "8", "--k", "8"], "put them after"),
    ],
)
def test_bad_invocations_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "GOOD", SUM)
    (tmp_path / "EMPTY").write_text("\n\n")
    code, _, err = run_cli([*args, "--server", DOWN], capsys)
    assert code == 2 and message in err, err


def test_read_shapes_fills_in_layout_and_device_selectors() -> None:
    key = "cpu:Some CPU: with colons:x86_64-avx2:8"
    text = "\n".join(
        json.dumps(r)
        for r in (
            {"op": "gemm", "dtype": "f16", "problem": {"m": 1, "n": 2, "k": 3}, "device": key},
            {"op": "softmax", "dtype": "f32", "problem": {"m": 1, "k": 2}, "device": "H200"},
            {
                "op": "conv2d",
                "dtype": "f16",
                "problem": {"n": 1, "h": 8, "w": 8, "c": 4, "k": 4, "r": 3, "s": 3},
            },  # fmt: skip
        )
    )
    gemm, softmax, conv = read_shapes(text, "f", backend="cuda")
    assert gemm.layout == "rcr" and dict(gemm.selector) == {
        "backend": "cpu", "name": "Some CPU: with colons", "arch": "x86_64-avx2"
    }  # fmt: skip
    assert dict(softmax.selector) == {"backend": "cuda", "name": "H200"}
    assert softmax.layout == "row"
    assert dict(conv.selector) == {"backend": "cuda"} and conv.layout == "nhwc"
    assert dict(conv.problem) == {"n": 1, "h": 8, "w": 8, "c": 4, "k": 4, "r": 3, "s": 3,
                                  "stride": 1, "pad": 0, "dilation": 1}  # fmt: skip
    with pytest.raises(UserError, match="f:1: problem: m: must be >= 1"):
        read_shapes(json.dumps({**SUM, "problem": {"m": 0, "k": 1}}), "f")


def test_tunes_what_is_not_tuned_yet(
    live_server: LiveServer,  # noqa: F811
    compile_cache: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    device = ":".join(
        [
            "cpu",
            cpu_host.cpu_model_name(),
            cpu_host.isa_level(*_machine_and_flags()),
            str(_cpus()),
        ]
    )
    softmax = {"op": "softmax", "dtype": "f32", "problem": {"m": 32, "k": 256}, "device": device}
    first = write(tmp_path / "first.jsonl", SUM, softmax, SUM, "")
    server = ["--server", live_server.url, "--token", live_server.admin_token]

    code, out, _ = run_cli(["tune", "--from-file", str(first), "--dry-run", *server], capsys)
    assert code == 0, out
    assert "first.jsonl: 2 shapes (1 duplicate line dropped)" in out
    assert "to tune: 2 in 2 jobs" in out and "would submit softmax f32 row, 1 shape" in out
    assert f"  on cpu {cpu_host.cpu_model_name()} " in out
    fits(out)

    stop = threading.Event()
    agent = WorkerAgent(
        TunehubClient(live_server.url, live_server.worker_token),
        engine_config(compile_cache),
        ("cpu",),
        name="tune-file",
        poll_interval_s=0.05,
    )
    thread = threading.Thread(target=agent.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        # the CLI waits for the jobs as long as it takes: a worker that could not start must
        # fail the test now, not after pytest's timeout
        deadline = time.monotonic() + 60
        while agent.worker_id is None and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert thread.is_alive() and agent.worker_id, "the CPU worker did not start (see log)"
        budget = ["--max-variants", "2"]
        code, out, _ = run_cli(["tune", "--from-file", str(first), *budget, *server], capsys)
        assert code == 0, out
        assert "summary: tuned now 2, already tuned 0, failed 0" in out
        assert "artifacts:" not in out  # it waited until the worker shared both winners'
        assert out.count("submitted job") == 2
        fits(out)

        wider = {**SUM, "problem": {"m": 128, "k": 1024, "kind": "sum"}}
        second = write(tmp_path / "second.jsonl", SUM, softmax, wider)
        code, out, _ = run_cli(["tune", "--from-file", str(second), *budget, *server], capsys)
        assert code == 0, out
        assert "already tuned: 2; to tune: 1 in 1 job" in out
        assert "summary: tuned now 1, already tuned 2, failed 0" in out

        code, out, _ = run_cli(["tune", "--from-file", str(second), *server], capsys)
        assert code == 0 and "to tune: 0 in 0 jobs" in out, out
    finally:
        stop.set()
        thread.join(timeout=30)
    jobs = TunehubClient(live_server.url, live_server.admin_token).list_jobs()
    assert sorted(j.op for j in jobs) == ["reduce", "reduce", "softmax"]


def _machine_and_flags() -> tuple[str, list[str]]:
    import platform

    return platform.machine(), cpu_host.cpu_flags()


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


def test_says_which_winners_have_no_artifact_yet(
    live_server: LiveServer,  # noqa: F811
    compile_cache: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A worker that shares no artifacts: the wait ends, and the summary says so."""
    stop = threading.Event()
    agent = WorkerAgent(
        TunehubClient(live_server.url, live_server.worker_token),
        engine_config(compile_cache),
        ("cpu",),
        name="no-artifacts",
        poll_interval_s=0.05,
        upload_artifacts=False,
    )
    thread = threading.Thread(target=agent.run_forever, args=(stop,), daemon=True)
    thread.start()
    shapes = write(tmp_path / "shapes.jsonl", SUM)
    server = ["--server", live_server.url, "--token", live_server.admin_token]
    try:
        code, out, _ = run_cli(["tune", "--from-file", str(shapes), "--max-variants", "2",
                                "--artifact-wait", "0.5", *server], capsys)  # fmt: skip
    finally:
        stop.set()
        thread.join(timeout=30)
    assert code == 0, out
    assert "waiting for the workers to share the winners' artifacts (0/1)" in out
    assert "artifacts: 0 of 1 winners so far" in " ".join(out.split())
