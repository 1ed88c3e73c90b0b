"""The GPU-free parts of bench/vs_vendor_conv.py: argument parsing, the time caps of the
whole-list run, its progress lines, and the page (--report) with and without the output-buffer
controls."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import vs_vendor_conv as bench
from bench.conv_report import miss_reason, output_cause, write_report
from tests.conftest import REPO_ROOT

RUN = REPO_ROOT / "bench" / "results" / "h200-conv-vendor.json"
OLD_RUN = REPO_ROOT / "bench" / "results" / "h200-conv-vendor-run1.json"


def test_only_1x1_layers_are_whole_list_shapes() -> None:
    ones = [s for s in bench.shapes() if bench.is_1x1(s)]
    assert {s["layer"] for s in ones} == {
        "l1.conv3 1x1",
        "l2.down 1x1 s2",
        "l3.conv1 1x1",
        "s1.pwconv1 1x1",
        "s3.pwconv2 1x1",
    }
    assert len(ones) == 2 * 5  # batch 1 and 8


def test_shape_seconds_keeps_nominal_caps_when_time_suffices() -> None:
    nominal = [5.0, 20.0, 5.0]
    assert bench.shape_seconds(nominal, 0, 100.0) == 5.0
    assert bench.shape_seconds(nominal, 1, 25.0) == 20.0


def test_shape_seconds_shares_a_short_deadline_in_proportion() -> None:
    nominal = [5.0, 20.0, 5.0]
    # 15 s for caps summing to 30: every shape gets half of its cap, none is starved
    assert bench.shape_seconds(nominal, 0, 15.0) == pytest.approx(2.5)
    assert bench.shape_seconds(nominal, 1, 12.5) == pytest.approx(10.0)
    assert bench.shape_seconds(nominal, 2, 2.5) == pytest.approx(2.5)
    assert bench.shape_seconds(nominal, 2, 0.0) == 0.0
    assert bench.shape_seconds(nominal, 2, -3.0) == 0.0


def test_shape_seconds_fit_the_recommended_six_minute_run() -> None:
    # the command in the module doc: tuning deadline 330 - 70 s, 10 whole-list 1x1 shapes
    whole = [bench.is_1x1(s) for s in bench.shapes()]
    nominal = [20.0 if w else 5.0 for w in whole]
    left = 330.0 - 70.0
    total = 0.0
    for i in range(len(nominal)):  # every shape spends its whole cap: the worst case
        cap = bench.shape_seconds(nominal, i, left)
        assert cap >= 0.9 * nominal[i] * 260 / 270
        left -= cap
        total += cap
    assert total == pytest.approx(260.0)


def _result(us: float | None, name: str) -> Any:
    timing = SimpleNamespace(median_us=us) if us is not None else None
    return SimpleNamespace(ok=us is not None, timing=timing, variant_name=name)


def test_progress_prints_every_n_and_the_last(capsys: pytest.CaptureFixture[str]) -> None:
    progress = bench.TuneProgress("resnet50 l1.conv3 1x1 n=1", every=2)
    progress.on_start(5, 1)
    for done, us in enumerate([4.0, 3.5, None, 3.9, 3.6], start=1):
        progress.on_result(_result(us, f"v{done}"), done, 5)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[tune]   resnet50 l1.conv3 1x1 n=1: 5 candidates (1 pruned)"
    assert [line.split(": ")[1].split(" in ")[0] for line in lines[1:]] == ["2/5", "4/5", "5/5"]
    assert lines[-1].endswith("best 3.50 us v2")


def test_report_of_the_committed_run_is_the_page_docs_holds(tmp_path: Path) -> None:
    """--report of bench/results/h200-conv-vendor.json writes the page docs/benchmarks holds
    (its generated part: the narrative follows it)."""
    assert bench.main(["--report", str(RUN), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "h200-conv-vendor.md").read_text()
    committed = (REPO_ROOT / "docs" / "benchmarks" / "h200-conv-vendor.md").read_text()
    assert committed.startswith(page.rstrip("\n"))
    assert "## Output buffer or kernel" in page
    assert "interleaved: 3 rounds per shape" in page


def test_report_of_a_run_without_controls(tmp_path: Path) -> None:
    """The 04:35 run timed no output-buffer controls: no such section, causes not measured."""
    assert bench.main(["--report", str(OLD_RUN), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "h200-conv-vendor.md").read_text()
    assert "Output buffer or kernel" not in page
    assert "cause not measured here" in page
    assert "one window per label" in page


def _row(**times: float) -> dict[str, Any]:
    return {
        "model": "resnet50",
        "layer": "l1.conv3 1x1",
        "n": 1,
        "h": 56,
        "w": 56,
        "c": 64,
        "k": 256,
        "r": 1,
        "s": 1,
        "stride": 1,
        "pad": 0,
        "dilation": 1,
        "discovered": 3,
        "winner": "conv2d_f16_nhwc_cudnn_e58_k25x2",
        "vendor_default": "conv2d_f16_nhwc_cudnn_e58_k25x2",
        "winner_params": {"library": "cudnn"},
        "winner_us": 3.5,
        "seconds": 9.0,
        "candidates": [
            {"library": "cudnn", "outcome": "ok", "median_us": 3.5},
            {"library": "cudnn", "outcome": "ok", "median_us": 3.9},
            {"library": "cudnn", "outcome": "aborted_slow", "median_us": 9.0},
            {"library": "cutlass", "outcome": "ok", "median_us": 4.4},
        ],
        "times_us": times,
    }


def test_a_lead_that_vanishes_on_the_same_buffers_is_the_buffer() -> None:
    t = {"tunehub": 3.6, "torch": 3.0, "tunehub_fixed_out": 3.0, "torch_out_rotated": 3.6}
    assert str(output_cause(t)).startswith("the output buffer")


def test_a_lead_that_stays_on_the_same_buffers_is_the_kernel() -> None:
    t = {"tunehub": 3.6, "torch": 3.0, "tunehub_fixed_out": 3.5, "torch_out_rotated": 3.1}
    assert str(output_cause(t)).startswith("a faster kernel")


def test_a_lead_that_stays_on_one_condition_only_is_partly_the_buffer() -> None:
    t = {"tunehub": 3.6, "torch": 3.0, "tunehub_fixed_out": 3.0, "torch_out_rotated": 3.2}
    assert str(output_cause(t)).startswith("partly the output buffer")


def test_no_controls_no_cause_and_no_lead_says_so() -> None:
    assert output_cause({"tunehub": 3.6, "torch": 3.0}) is None
    t = {"tunehub": 3.0, "torch": 3.0, "tunehub_fixed_out": 2.9, "torch_out_rotated": 3.1}
    assert str(output_cause(t)).startswith("no torch lead")


def test_miss_reason_names_the_measured_cause_and_the_whole_list() -> None:
    row = _row(tunehub=3.6, torch=3.0, tunehub_fixed_out=3.0, torch_out_rotated=3.6)
    reason = miss_reason(row)
    assert "3 of 3 cuDNN configs timed (the whole list)" in reason
    assert "cause: the output buffer" in reason
    assert "not measured" not in reason
    lt = {"library": "cublaslt", "outcome": "ok", "median_us": 3.7}
    row = {**row, "discovered_cublaslt": 8, "candidates": [*row["candidates"], lt]}
    assert "3 of 3 cuDNN configs timed (the whole list), 1 of 8 cuBLASLt algorithms;" in (
        miss_reason(row)
    )


def test_report_with_controls_adds_the_same_buffer_table(tmp_path: Path) -> None:
    rows = [
        _row(
            tunehub=3.6,
            cudnn_default=3.6,
            torch=3.0,
            tunehub_fixed_out=3.0,
            cudnn_default_fixed_out=3.0,
            torch_out_rotated=3.6,
            torch_out_fixed=3.0,
        ),
        {**_row(tunehub=5.0, torch=5.1), "layer": "l1.conv2 3x3", "r": 3, "s": 3},
    ]
    payload = {"meta": {"command": "python3 bench/vs_vendor_conv.py --full-list-1x1"}, "rows": rows}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(payload))
    assert bench.main(["--report", str(path), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "h200-conv-vendor.md").read_text()
    table = page.split("## Output buffer or kernel")[1].split("\n\n")[2].splitlines()
    assert len(table) == 3  # header, rule and the one row that timed the controls
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    assert cells[3:13] == ["3.6", "3.0", "3.6", "3.0", "3.6", "3.0", "3.0", "1.00x", "1.00x", "3/3"]
    assert cells[13].startswith("the output buffer")
    assert "rotated: **1.000x** over 1 shapes" in page
    assert "0.83x (torch's call is faster than the cuDNN default; 3 of 3" in page


def test_write_report_without_rows_keeps_its_summary(tmp_path: Path) -> None:
    write_report(tmp_path, {"meta": {"command": "x"}, "rows": []})
    assert "over 0 shapes" in (tmp_path / "h200-conv-vendor.md").read_text()


#: phase_tune hands its config to the backend and to tune(), both stand-ins here
NO_CONFIG: Any = None


class _FakeBackend:
    """What phase_tune asks of the CUDA backend: a device, discovery and the compile cache."""

    def __init__(self, config: Any) -> None:
        self.closed = False
        self.last_discovery: list[dict[str, Any]] = []
        self.cache = SimpleNamespace(lookup=lambda vid: SimpleNamespace(artifact=f"/c/{vid}.so"))

    def device(self) -> Any:
        return SimpleNamespace(arch="sm_90", driver="580", key=lambda: "NVIDIA H200|9.0|132")

    def discover(self, request: Any, arch: str) -> list[dict[str, Any]]:
        found = [{"library": "cudnn", "engine": i} for i in range(40)]
        if request.problem.r == 1 and request.problem.stride == 1:
            found += [{"library": "cublaslt", "algo": i} for i in range(8)]
        self.last_discovery = [{"source": "heur_a"} for _ in found]
        return found

    def close(self) -> None:
        self.closed = True


def test_phase_tune_budgets_whole_lists_on_1x1_layers_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuner.stats import timing_from_samples
    from tuner.types import BenchResult, Outcome

    calls: list[tuple[Any, Any]] = []

    def fake_tune(request: Any, backend: Any, config: Any, observer: Any = None) -> Any:
        calls.append((request, observer))
        timing = timing_from_samples([3.5] * 10)
        params = {"library": "cudnn", "family": "cudnn", "engine": 58}
        result = BenchResult("v58", "conv2d_f16_nhwc_cudnn_e58", params, Outcome.OK, timing)
        if observer is not None:
            observer.on_start(1, 0)
            observer.on_result(result, 1, 1)
        return SimpleNamespace(results=[result], winner=result)

    monkeypatch.setattr("tuner.backends.cuda.CudaBackend", _FakeBackend)
    monkeypatch.setattr(bench, "tune", fake_tune)
    args = argparse.Namespace(
        full_list_1x1=True, full_list_seconds=20.0, shape_seconds=5.0, max_variants=14
    )
    todo = [s for s in bench.shapes() if s["n"] == 1][:4]  # 3x3, 1x1, 3x3 s2, 1x1 s2
    rows = bench.phase_tune(args, NO_CONFIG, bench.time.monotonic() + 1000, todo)
    assert [r["layer"] for r in rows] == [s["layer"] for s in todo]
    budgets = [(c[0].budget.max_variants, c[0].budget.max_seconds, c[1] is not None) for c in calls]
    assert budgets == [
        (14, 5.0, False),
        (40 + 8 + 3, 20.0, True),  # every cuDNN config and cuBLASLt algorithm, the CUTLASS head
        (14, 5.0, False),
        (40 + 3, 20.0, True),  # strided 1x1: whole list, but no cuBLASLt algorithms
    ]
    assert [(r["discovered"], r["discovered_cublaslt"]) for r in rows] == [
        (40, 0),
        (40, 8),
        (40, 0),
        (40, 0),
    ]
    assert rows[1]["full_list"] and not rows[0]["full_list"]
    assert len(rows[1]["discovery"]) == 48 and len(rows[0]["discovery"]) == 3
    assert rows[1]["artifact"] == "/c/v58.so" and rows[1]["vendor_default"].endswith("e58")
    out = capsys.readouterr().out
    assert "[tune]   resnet50 l1.conv3 1x1 n=1: 1/1 in" in out
    assert "(40 cuDNN configs, 8 cuBLASLt algorithms)" in out


def test_phase_tune_stops_when_no_time_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tuner.backends.cuda.CudaBackend", _FakeBackend)
    monkeypatch.setattr(bench, "tune", lambda *a, **k: pytest.fail("tuned past the deadline"))
    args = argparse.Namespace(
        full_list_1x1=False, full_list_seconds=20.0, shape_seconds=5.0, max_variants=14
    )
    assert bench.phase_tune(args, NO_CONFIG, bench.time.monotonic() - 1, bench.shapes()) == []
