"""bench/regress.py without a GPU: the comparison rule, the baseline file's round trip, the
table, a saved run compared and recorded through the command line, the shape list (issue 26's
families with their dtypes, references and precompile commands), the choice of a reference's
timers."""

from __future__ import annotations

import json
import shlex
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bench import (
    regress,
    regress_shapes,
    regress_timers,
    serving_epilogue,
    serving_fp8,
    serving_moe,
)
from bench import regress_rule as rule
from bench.precompile_cuda import parse_dims
from bench.regress_shapes import QUICK, ROW_KS, ROW_TOTAL, family_shapes, shapes
from tuner.moe import token_counts
from tuner.problems import ScaledGemmProblem, problem_from_dict

KEY = "softmax m=2796202,k=96"


def _record(ratio: float, noise: float | None = None) -> dict[str, Any]:
    return {"ratio": ratio, "noise": noise, "figure": 4211.0, "unit": "GB/s"}


def test_ratio_is_the_median_of_the_rounds_and_noise_half_their_spread() -> None:
    ratio, noise = rule.ratio_and_noise([0.98, 1.00, 1.02, 0.99, 1.01])
    assert ratio == pytest.approx(1.00)
    assert noise == pytest.approx(0.02)
    assert rule.ratio_and_noise([0.5]) == (0.5, 0.0)
    with pytest.raises(ValueError):
        rule.ratio_and_noise([])


def test_a_drop_beyond_the_tolerance_fails_and_one_inside_it_passes() -> None:
    record = _record(1.00, 0.005)
    # quiet run: the 3% floor applies
    assert rule.verdict({"ratio": 0.80, "noise": 0.01}, record).status == "drop"
    assert rule.verdict({"ratio": 0.975, "noise": 0.005}, record).status == "ok"
    low = rule.verdict({"ratio": 0.969, "noise": 0.005}, record)
    assert low.status == "drop" and low.failed
    assert low.tolerance == pytest.approx(0.03) and low.floor == pytest.approx(0.97)
    # a noisy run (4% half-spread) widens the tolerance to 8%
    noisy = rule.verdict({"ratio": 0.93, "noise": 0.04}, record)
    assert noisy.status == "ok" and noisy.tolerance == pytest.approx(0.08)
    # and so does a noisy record
    assert rule.verdict({"ratio": 0.93, "noise": 0.0}, _record(1.0, 0.04)).status == "ok"
    # the regression of issue 22 (K=96: 1.00x -> 0.80x copy) fails at any noise seen so far
    assert rule.verdict({"ratio": 0.80, "noise": 0.05}, record).failed


def test_new_lost_and_skipped_shapes() -> None:
    assert rule.verdict({"ratio": 0.5, "noise": 0.0}, None).status == "new"
    assert rule.verdict({"ratio": 0.5, "noise": 0.0}, {"ratio": None}).status == "new"
    assert rule.verdict({"ratio": None}, _record(1.0)).status == "lost"
    assert rule.verdict({"ratio": None}, _record(1.0)).failed
    assert rule.verdict({"ratio": None}, None).status == "new"
    assert rule.verdict({"skipped": "deadline"}, _record(1.0)).status == "skipped"
    assert not rule.verdict({"skipped": "deadline"}, _record(1.0)).failed


def test_baseline_round_trip_and_update(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    empty = rule.load_baseline(path)
    assert empty["devices"] == {}
    base = rule.updated_baseline(
        empty,
        {KEY: {"op": "softmax", "problem": {"m": 2796202, "k": 96}, "ratio": 1.0, "noise": 0.01}},
        {"date": "2026-12-03", "device": "NVIDIA H200", "commit": "abc1234"},
    )
    rule.save_baseline(path, base)
    loaded = rule.load_baseline(path)
    assert loaded == json.loads(json.dumps(base))
    record = rule.records_for(loaded, "NVIDIA H200")[KEY]
    assert (
        record["ratio"],
        record["noise"],
        record["date"],
        record["device"],
        record["commit"],
    ) == (
        1.0,
        0.01,
        "2026-12-03",
        "NVIDIA H200",
        "abc1234",
    )
    # a later run moves one shape; an unmeasured one keeps its record
    later = rule.updated_baseline(
        loaded,
        {
            KEY: {"ratio": 0.9, "noise": 0.02},
            "reduce m=1,k=128256,kind=sum": {"ratio": None},
        },
        {"date": "2026-12-05", "device": "NVIDIA H200", "commit": "def5678"},
    )
    h200 = rule.records_for(later, "NVIDIA H200")
    assert h200[KEY]["ratio"] == 0.9 and h200[KEY]["commit"] == "def5678"
    assert "reduce m=1,k=128256,kind=sum" not in h200
    kept = rule.updated_baseline(later, {}, {"date": "x", "device": "NVIDIA H200"})
    assert rule.records_for(kept, "NVIDIA H200") == h200


def test_each_device_is_compared_with_its_own_records(tmp_path: Path) -> None:
    h200 = {"date": "2026-12-03", "device": "NVIDIA H200", "commit": "abc1234"}
    empty = rule.load_baseline(tmp_path / "none.json")
    base = rule.updated_baseline(empty, {KEY: {"ratio": 1.05, "noise": 0.001}}, h200)
    # an H100 run at 0.99 has no record of its own: new, not a drop against the H200's 1.05
    h100 = "NVIDIA H100 80GB HBM3"
    h100_run = {KEY: {"ratio": 0.99, "noise": 0.001}}
    assert rule.records_for(base, h100) == {}
    assert rule.verdicts(h100_run, rule.records_for(base, h100))[KEY].status == "new"
    assert rule.verdicts(h100_run, rule.records_for(base, "NVIDIA H200"))[KEY].status == "drop"
    # recording the H100 keeps the H200's record beside it
    both = rule.updated_baseline(base, h100_run, {**h200, "device": h100})
    assert rule.records_for(both, "NVIDIA H200")[KEY]["ratio"] == 1.05
    assert rule.records_for(both, h100)[KEY]["ratio"] == 0.99


def test_a_file_of_format_1_is_read_per_device(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    old = {"format": 1, "shapes": {KEY: {**_record(1.0), "device": "NVIDIA H200"}}}
    path.write_text(json.dumps(old))
    assert rule.records_for(rule.load_baseline(path), "NVIDIA H200")[KEY]["ratio"] == 1.0


def test_a_file_of_another_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"shapes": []}))
    with pytest.raises(ValueError, match="not a regress baseline"):
        rule.load_baseline(path)


def test_the_table_fits_80_columns_and_names_failures() -> None:
    results = {
        KEY: {"ratio": 0.80, "noise": 0.012, "figure": 3387.0, "unit": "GB/s"},
        "gemm m=2048,n=14336,k=4096": {
            "ratio": 1.01,
            "noise": 0.003,
            "figure": 690.1,
            "unit": "TFLOP/s",
        },
        "conv2d n=8,h=56,w=56,c=128,k=128,r=3,s=3,stride=2,pad=1,dilation=1": {"ratio": None},
        "reduce m=4,k=256000,kind=sum": {"skipped": "deadline"},
    }
    records = {KEY: _record(1.0, 0.004)}
    found = rule.verdicts(results, records)
    table = rule.format_table(results, records, found)
    assert all(len(line) <= 80 for line in table.splitlines()), table
    assert "DROP" in table and "new" in table and "skipped" in table
    assert found[KEY].status == "drop"


def _run_file(tmp_path: Path, ratio: float) -> Path:
    path = tmp_path / "run.json"
    meta = {
        "device": "NVIDIA H200",
        "date": "2026-12-05 10:00 UTC",
        "commit": "f00",
        "copy_gbps": 4200,
    }
    results = {
        KEY: {
            "op": "softmax",
            "problem": {"m": 2796202, "k": 96},
            "ratio": ratio,
            "noise": 0.01,
            "figure": 4200.0 * ratio,
            "unit": "GB/s",
            "reference": "copy",
        }
    }
    path.write_text(json.dumps({"meta": meta, "results": results}))
    return path


def test_a_saved_run_fails_on_a_drop_and_update_records_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = tmp_path / "baseline.json"
    rule.save_baseline(
        baseline,
        rule.updated_baseline(
            rule.load_baseline(baseline),
            {KEY: {"ratio": 1.0, "noise": 0.005}},
            {"date": "2026-12-03", "device": "NVIDIA H200"},
        ),
    )
    out = tmp_path / "out"
    args = ["--baseline", str(baseline), "--out", str(out)]
    assert regress.main([*args, "--from-run", str(_run_file(tmp_path, 0.80))]) == 1
    assert "DROP" in capsys.readouterr().out
    written = json.loads((out / "regress.json").read_text())
    assert written["verdicts"] == {KEY: "drop"}
    assert "DROP" in (out / "regress.md").read_text()
    assert regress.main([*args, "--from-run", str(_run_file(tmp_path, 0.99))]) == 0
    # --update: the run becomes the record
    assert regress.main([*args, "--from-run", str(_run_file(tmp_path, 0.80)), "--update"]) == 0
    record = rule.records_for(rule.load_baseline(baseline), "NVIDIA H200")[KEY]
    assert record["ratio"] == 0.80 and record["commit"] == "f00"
    assert regress.main([*args, "--from-run", str(_run_file(tmp_path, 0.80))]) == 0


def test_bad_files_are_a_message_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert regress.main(["--baseline", str(bad), "--from-run", str(bad)]) == 2
    assert "--baseline" in capsys.readouterr().err
    assert regress.main(["--from-run", str(tmp_path / "missing.json"), "--out", str(tmp_path)]) == 2
    assert "--from-run" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        regress.main(["--deadline", "-1"])
    assert stop.value.code == 2


def test_list_prints_a_precompile_command_per_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert regress.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(shapes())
    assert all(line.startswith("python bench/precompile_cuda.py ") for line in lines)
    assert any("--op softmax" in line and "k=96 " in line for line in lines)
    assert any("--op gemm" in line and "m=2048,n=14336,k=4096" in line for line in lines)
    assert any("--op conv2d" in line for line in lines)


def test_rounds_make_the_ratio_and_the_noise() -> None:
    row: dict[str, Any] = {
        "op": "softmax",
        "problem": {"m": 2796202, "k": 96},
        "reference": "copy",
        # tunehub at the copy's rate in every round (bytes: 2 x m x k x 2 = 2^30 - 128)
        "rounds_us": {"tunehub": [256.0, 250.0, 262.0], "copy": [256.0, 250.0, 262.0]},
    }
    regress.summarise(row)
    bytes_moved = 2 * 2796202 * 96 * 2
    assert row["ratio"] == pytest.approx(bytes_moved / (2 * regress.COPY_BYTES), rel=1e-6)
    assert row["noise"] == pytest.approx(0.0, abs=1e-9)
    assert row["unit"] == "GB/s" and row["figure"] == pytest.approx(bytes_moved / 256.0 / 1e3)
    gemm: dict[str, Any] = {
        "op": "gemm",
        "problem": {"m": 1, "n": 4096, "k": 4096},
        "reference": "cublas",
        "rounds_us": {"tunehub": [10.0, 10.0, 10.0], "cublas": [13.0, 13.4, 13.2]},
    }
    regress.summarise(gemm)
    assert gemm["ratio"] == pytest.approx(1.32) and gemm["noise"] == pytest.approx(0.02 / 1.32)
    assert gemm["unit"] == "TFLOP/s"
    lost: dict[str, Any] = {"op": "gemm", "problem": {}, "reference": "cublas", "rounds_us": {}}
    regress.summarise(lost)
    assert lost["ratio"] is None


def test_the_shape_list_and_the_recorded_baseline() -> None:
    listed = {s.key: s for s in shapes()}
    for k in ROW_KS:
        assert f"softmax m={ROW_TOTAL // k},k={k}" in listed
    assert {s.op for s in listed.values()} == {
        "softmax",
        "reduce",
        "gemm",
        "conv2d",
        "scaled_gemm",
        "grouped_gemm",
    }
    assert len(listed) == len(shapes()), "every key names one shape"
    assert set(QUICK) <= set(listed) and len(shapes(quick=True)) == len(QUICK)
    baseline = rule.load_baseline(regress.BASELINE)
    assert rule.records_for(baseline, "NVIDIA H200"), "the repo records the H200's figures"
    records = [(k, r) for d in baseline["devices"].values() for k, r in d.items()]
    for key, record in records:
        assert key in listed, key
        assert record["ratio"] > 0 and record["reference"] == listed[key].reference
        assert record["date"] and record["device"] and record["commit"] and record["source"]


class _StandInCache:
    def lookup(self, variant_id: str) -> Any:
        return type("Hit", (), {"artifact": f"/cache/{variant_id}.so"})()


class _StandInBackend:
    """Test double of CudaBackend for phase_tune: no GPU, a cache that has every build."""

    def __init__(self, config: Any) -> None:
        self.cache = _StandInCache()
        self.closed = False

    def device(self) -> Any:
        return type("Device", (), {"key": lambda self: "stand-in"})()

    def close(self) -> None:
        self.closed = True


def _result(name: str, library: str | None, ok: bool = True) -> Any:
    outcome = type("Outcome", (), {"value": "ok" if ok else "wrong_result"})()
    timing = type("Timing", (), {"median_us": 10.0})()
    return type(
        "Result",
        (),
        {
            "variant_name": name,
            "variant_id": name,
            "params": {"library": library} if library else {},
            "outcome": outcome,
            "ok": ok,
            "timing": timing if ok else None,
        },
    )()


def test_phase_tune_records_winners_defaults_and_a_failed_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tuner.backends.cuda as cuda
    import tuner.engine as engine

    todo = [s for s in shapes() if s.op == "conv2d"][:2] + [shapes()[0]]
    calls: list[str] = []

    def stand_in_tune(request: Any, backend: Any, config: Any) -> Any:
        calls.append(request.op)
        if len(calls) == 2:
            raise RuntimeError("harness died")
        default = _result("cudnn_default", "cudnn")
        results = (
            [default, _result("winner", "cutlass")]
            if request.op == "conv2d"
            else [_result("softmax_winner", None)]
        )
        return type("Tuned", (), {"winner": results[-1], "results": results})()

    monkeypatch.setattr(cuda, "CudaBackend", _StandInBackend)
    monkeypatch.setattr(engine, "tune", stand_in_tune)
    rows = regress.phase_tune(todo, "unused", deadline=float("inf"))
    first, failed, rows_shape = (rows[s.key] for s in todo)
    assert first["winner"] == "winner" and first["artifact"] == "/cache/winner.so"
    assert first["vendor_default_artifact"] == "/cache/cudnn_default.so"
    assert "harness died" in failed["error"] and not failed.get("artifact")
    assert (
        rows_shape["winner"] == "softmax_winner" and rows_shape["vendor_default_artifact"] is None
    )
    # past the deadline nothing is tuned
    assert regress.phase_tune(todo, "unused", deadline=0.0) == {}


def test_the_keys_recorded_before_the_new_families_are_unchanged() -> None:
    """A dtype in the key is for the shapes not in f16: every shape before issue 26's families
    keeps the key its records have (the H100's cover all of them), ``op dims`` with no dtype."""
    new = {s.key for s in family_shapes()}
    before = [s for s in shapes() if s.key not in new]
    records = rule.records_for(rule.load_baseline(regress.BASELINE), "NVIDIA H100 80GB HBM3")
    assert len(before) == 50 and {s.key for s in before} <= set(records)
    for shape in before:
        assert shape.dtype == "f16"
        dims = problem_from_dict(shape.op, dict(shape.problem)).key()
        assert shape.key == f"{shape.op} {dims}"
    assert "gemm m=2048,n=14336,k=4096" in records and "reduce m=4,k=256000,kind=sum" in records


def test_the_new_families_come_last_with_their_dtypes_and_references() -> None:
    listed = shapes()
    family = family_shapes()
    assert [s.key for s in listed[-len(family) :]] == [s.key for s in family]
    assert not {s.key for s in family} & set(QUICK)
    by_kind = {
        (s.op, s.dtype, s.problem.get("epilogue"), s.problem.get("scaling")): s.reference
        for s in family
    }
    assert by_kind == {
        ("gemm", "f16", "bias_silu", None): "unfused",
        ("conv2d", "f16", "bias_relu", None): "unfused",
        ("scaled_gemm", "e4m3", None, "per_tensor"): "torch_scaled_mm",
        ("scaled_gemm", "e4m3", None, "block"): "torch_scaled_mm",
        ("grouped_gemm", "bf16", None, None): "grouped_mm",
        ("grouped_gemm", "e4m3", None, None): "scaled_grouped_mm",
    }
    keys = {s.key: s for s in family}
    assert "scaled_gemm e4m3 m=16,n=4096,k=4096,out_dtype=bf16,scaling=per_tensor" in keys
    assert "grouped_gemm bf16 experts=8,n=4096,k=14336,tokens=16,skew=2" in keys
    assert "grouped_gemm e4m3 experts=8,n=4096,k=14336,tokens=8192,skew=2" in keys
    assert "gemm m=2048,n=14336,k=4096,epilogue=bias_silu" in keys  # f16: no dtype in the key
    for shape in family:  # valid problems of their dtype, budgets within what tuning allows
        problem_from_dict(shape.op, dict(shape.problem), shape.dtype)
        assert 0 <= shape.precompile <= shape.max_variants <= 16
        assert shape.max_seconds <= 15
    # the grouped GEMMs are bench/serving_moe.py's problems, so the figures compare
    moe = {(label["dtype"], p.key()) for label, p in serving_moe.problems()}
    grouped = [s for s in family if s.op == "grouped_gemm"]
    assert len(grouped) == 4
    for shape in grouped:
        assert (shape.dtype, problem_from_dict(shape.op, dict(shape.problem)).key()) in moe


def test_the_new_families_budgets_fit_their_spaces_order() -> None:
    """The head ``precompile`` counts is the space's own (candidates before any vendor
    discovery), and a family without vendor candidates is built here whole."""
    from tuner.engine import candidate_params
    from tuner.spaces import cuda_grouped_gemm
    from tuner.types import Budget, TuneRequest

    for shape in family_shapes():
        problem = problem_from_dict(shape.op, dict(shape.problem), shape.dtype)
        request = TuneRequest(shape.op, shape.dtype, shape.layout, problem, "cuda", budget=Budget())
        ours, _ = candidate_params(request, "sm_90", "cuda")
        assert len(ours) >= shape.precompile, shape.key
        assert all(p.get("library") not in ("cublaslt", "cudnn") for p in ours[: shape.precompile])
        if shape.op == "grouped_gemm" or shape.problem.get("epilogue") == "bias_silu":
            assert shape.precompile == shape.max_variants, shape.key
        if shape.op == "conv2d":  # cuDNN's fused graph alone fuses a conv2d epilogue
            assert ours == [] and shape.precompile == 0
    assert regress_shapes.GROUPED_BUDGET == cuda_grouped_gemm._HEAD + 2


def test_list_prints_the_new_families_precompile_commands_with_their_dtype(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert regress.main(["--list", "--only", "scaled_gemm", "grouped_gemm", "epilogue="]) == 0
    lines = capsys.readouterr().out.splitlines()
    family = family_shapes()
    assert len(lines) == len(family)
    for line, shape in zip(lines, family, strict=True):
        argv = shlex.split(line)
        assert argv[argv.index("--op") + 1] == shape.op
        assert argv[argv.index("--dtype") + 1] == shape.dtype
        assert int(argv[argv.index("--max-variants") + 1]) == shape.precompile
        dims = parse_dims(argv[argv.index("--problem") + 1])
        assert problem_from_dict(shape.op, dims, shape.dtype).dims() == shape.problem
    assert sum("--dtype e4m3" in line for line in lines) == 5
    assert sum("--dtype bf16" in line for line in lines) == 2
    # a fused conv2d has only cuDNN's fused-graph configs: the line builds their discovery
    (conv,) = [line for line in lines if "--op conv2d" in line]
    assert conv.endswith("--max-variants 0")


def _row(shape: Any) -> dict[str, Any]:
    return regress._row_of(shape)


def test_each_family_is_timed_beside_its_serving_benchmarks_user_timers() -> None:
    family = {(s.op, s.dtype, s.problem.get("scaling", "")): s for s in family_shapes()}
    fused_gemm = regress_timers.user_timers(_row(family["gemm", "f16", ""]))
    assert isinstance(fused_gemm, partial) and fused_gemm.func is serving_epilogue.gemm_timers
    assert fused_gemm.keywords == {"epilogue": "bias_silu", "timing": regress_timers.TIMING}
    conv = family["conv2d", "f16", ""]
    user = regress_timers.user_timers(_row(conv))
    assert isinstance(user, partial) and user.func is serving_epilogue.conv_timers
    assert user.keywords == {"problem": conv.problem, "timing": regress_timers.TIMING}
    for scaling in ("per_tensor", "block"):
        user = regress_timers.user_timers(_row(family["scaled_gemm", "e4m3", scaling]))
        assert isinstance(user, partial) and user.func is serving_fp8.scaled_mm_timers
        assert user.keywords["problem"] == ScaledGemmProblem(2048, 4096, 4096, "bf16", scaling)
    grouped = {s.dtype: s for s in family_shapes() if s.op == "grouped_gemm"}
    for dtype, timers in (("bf16", serving_moe.vendor_timers), ("e4m3", serving_moe.fp8_timers)):
        shape = grouped[dtype]  # the last of its dtype: the prefill bucket
        user = regress_timers.user_timers(_row(shape))
        assert isinstance(user, partial) and user.func is timers
        assert user.keywords == {
            "counts": token_counts(8, 8192, 2),
            "timing": regress_timers.TIMING,
        }
    # the ops whose reference regress.py times itself: copy, cublas, cudnn_default
    plain = {s.op: s for s in shapes() if s.key not in {f.key for f in family_shapes()}}
    assert {op: regress_timers.user_timers(_row(s)) for op, s in plain.items()} == dict.fromkeys(
        plain
    )


def test_a_row_times_its_reference_alone_and_a_missing_one_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unfused() -> list[float]:
        return [1.0]

    def careful() -> list[float]:
        return [2.0]

    offered = {"unfused": unfused, "linear_then_act": careful}
    monkeypatch.setattr(regress_timers, "user_timers", lambda row: lambda torch, h, req: offered)
    row = {**_row(family_shapes()[0]), "artifact": "/cache/winner.so"}
    stand_in_torch = type("Torch", (), {"__version__": "0"})()
    timers = regress_timers.timers_for(stand_in_torch, object(), row, {}, unfused)
    assert set(timers) == {"tunehub", "unfused"} and timers["unfused"] is unfused
    with pytest.raises(RuntimeError, match="grouped_mm: not in this torch"):
        regress_timers.timers_for(
            stand_in_torch, object(), {**row, "reference": "grouped_mm"}, {}, unfused
        )


def test_a_family_rows_ratio_is_the_references_time_over_tunehubs() -> None:
    shape = [s for s in family_shapes() if s.op == "grouped_gemm" and s.dtype == "e4m3"][-1]
    row: dict[str, Any] = {
        **_row(shape),
        "rounds_us": {"tunehub": [100.0, 100.0, 100.0], "scaled_grouped_mm": [110.0, 111, 112]},
    }
    regress.summarise(row)
    assert row["ratio"] == pytest.approx(1.11) and row["unit"] == "TFLOP/s"
    flops = 2.0 * 8192 * 4096 * 14336
    assert row["figure"] == pytest.approx(flops / 100.0 / 1e6)


def test_every_shape_has_its_own_cell_in_the_80_column_table() -> None:
    listed = shapes()
    cells = [rule._short(s.key) for s in listed]
    assert len(set(cells)) == len(listed)
    op_width, shape_width = rule._WIDTHS[:2]
    assert all(len(op) <= op_width and len(shape) <= shape_width for op, shape in cells)
    assert rule._short("grouped_gemm e4m3 experts=8,n=4096,k=14336,tokens=16,skew=2") == (
        "grouped_gemm",
        "e4m3 E8 4096x14336 t16 s2",
    )
    conv = "conv2d n=32,h=28,w=28,c=128,k=128,r=3,s=3,stride=1,pad=1,dilation=1,epilogue=bias_relu"
    assert rule._short(conv) == ("conv2d", "n32 28x28 128>128 3x3 +relu")
    results = {s.key: {"ratio": 1.2345, "noise": 0.1234, "figure": 1234.5} for s in listed}
    table = rule.format_table(results, {}, rule.verdicts(results, {}))
    assert all(len(line) <= 80 for line in table.splitlines()), table


def test_phase_tune_asks_for_each_shapes_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.backends.cuda as cuda
    import tuner.engine as engine

    asked: list[tuple[str, str]] = []

    def stand_in_tune(request: Any, backend: Any, config: Any) -> Any:
        asked.append((request.op, request.dtype))
        results = [_result("winner", "tunehub")]
        return type("Tuned", (), {"winner": results[0], "results": results})()

    monkeypatch.setattr(cuda, "CudaBackend", _StandInBackend)
    monkeypatch.setattr(engine, "tune", stand_in_tune)
    todo = family_shapes()
    rows = regress.phase_tune(todo, "unused", deadline=float("inf"))
    assert asked == [(s.op, s.dtype) for s in todo]
    assert [rows[s.key]["dtype"] for s in todo] == [s.dtype for s in todo]
