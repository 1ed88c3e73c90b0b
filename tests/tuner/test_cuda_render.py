"""The hand-written CUDA spaces render every variant; pruning, flags, harness plumbing.

No nvcc and no GPU needed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tuner.backends.cuda import CudaBackend, arch_flags
from tuner.backends.cuda_process import HarnessProcess, HarnessTimeout
from tuner.cutlass_paths import cutlass_include_dirs
from tuner.errors import DeviceError, ToolchainError
from tuner.nvml import suspect_reasons
from tuner.problems import ReduceProblem, SoftmaxProblem
from tuner.render import render_variant
from tuner.spaces.cuda_reduce import CudaReduceSpace
from tuner.spaces.cuda_softmax import CudaSoftmaxSpace
from tuner.types import BenchResult, EngineConfig, Outcome, TuneRequest

SPACES = [CudaReduceSpace(), CudaSoftmaxSpace()]


def render(space, params, dtype: str = "f16") -> str:
    return render_variant(space, params, dtype, "row", "sm_90", arch_flags("sm_90"), "nvcc").source


SYMBOLS = ("tunehub_can_run", "tunehub_workspace_bytes", "tunehub_run", "tunehub_describe")


@pytest.mark.parametrize("space", SPACES, ids=lambda s: s.op)
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_every_variant_renders(space, dtype: str) -> None:
    names = set()
    for params in space.enumerate(dtype, "row", "sm_90"):
        variant = render_variant(space, params, dtype, "row", "sm_90", arch_flags("sm_90"), "nvcc")
        assert variant.name not in names
        names.add(variant.name)
        for symbol in SYMBOLS:  # declared by the ABI header, then defined by the template
            assert variant.source.count(f" {symbol}(") >= 2, symbol
        assert f'"{variant.name} ' in variant.source  # tunehub_describe names the variant
        assert "{{" not in variant.source and "{%" not in variant.source
    assert len(names) >= 50


def test_names_follow_the_procedural_scheme() -> None:
    reduce_space, softmax_space = SPACES
    assert (
        reduce_space.name(
            {"pack": 8, "strategy": "group", "group": 4, "threads": 256}, "f16", "row"
        )
        == "reduce_f16_p8_g4_t256"
    )
    assert (
        softmax_space.name(
            {"pack": 8, "strategy": "warp", "group": 32, "threads": 128, "mode": "reg"},
            "f16",
            "row",
        )
        == "softmax_f16_p8_warp_t128_reg"
    )


def test_f32_packs_stop_at_16_bytes() -> None:
    packs = {p["pack"] for p in CudaReduceSpace().enumerate("f32", "row", "sm_90")}
    assert packs == {1, 2, 4}


def test_other_layouts_enumerate_nothing() -> None:
    assert list(CudaReduceSpace().enumerate("f16", "rcr", "sm_90")) == []


def test_prune_reasons() -> None:
    space = CudaReduceSpace()
    p8 = {"pack": 8, "strategy": "group", "group": 4, "threads": 256}
    assert space.prune(p8, ReduceProblem(m=4, k=100), "f16", "row") is None  # head/body/tail
    assert space.prune(p8, ReduceProblem(m=4, k=1024), "f16", "row") is None
    block = {"pack": 8, "strategy": "block", "group": 1024, "threads": 1024}
    assert "idle" in (space.prune(block, ReduceProblem(m=4, k=1024), "f16", "row") or "")
    smallest = {"pack": 1, "strategy": "group", "group": 2, "threads": 128}
    assert space.prune(smallest, ReduceProblem(m=4, k=1), "f16", "row") is None


def test_softmax_registers_prune_long_rows() -> None:
    space = CudaSoftmaxSpace()
    reg = {"pack": 8, "strategy": "warp", "group": 32, "threads": 128, "mode": "reg"}
    assert space.prune(reg, SoftmaxProblem(m=4, k=4096), "f16", "row") is None
    assert "registers" in (space.prune(reg, SoftmaxProblem(m=4, k=8192), "f16", "row") or "")
    two_pass = dict(reg, mode="2pass")
    assert space.prune(two_pass, SoftmaxProblem(m=4, k=1 << 20), "f16", "row") is None


@pytest.mark.parametrize("k", [50257, 13824, 1009, 151936, 3])
def test_odd_k_keeps_every_pack_and_renders(k: int) -> None:
    """Rows of any length (odd, prime, vocabulary-sized) keep pack 2/4/8 variants, rendered
    with a scalar head and tail around the aligned vector body."""
    for space in SPACES:
        problem = ReduceProblem(m=8, k=k) if space.op == "reduce" else SoftmaxProblem(m=8, k=k)
        kept = [
            p
            for p in space.enumerate("f16", "row", "sm_90")
            if space.prune(p, problem, "f16", "row") is None
        ]
        assert {p["pack"] for p in kept} == {1, 2, 4, 8}, (space.op, k)
        source = render(space, kept[-1])
        assert "head_of" in source or "split_row" in source
        assert "k % kPack != 0" not in source  # no refusal of odd k


def test_softmax_shared_memory_mode_fits_rows_on_chip() -> None:
    space = CudaSoftmaxSpace()
    smem = {"pack": 8, "strategy": "block", "group": 1024, "threads": 1024, "mode": "smem"}
    assert space.prune(smem, SoftmaxProblem(m=4, k=50257), "f16", "row") is None
    assert space.prune(smem, SoftmaxProblem(m=4, k=100277), "f16", "row") is None
    reason = space.prune(smem, SoftmaxProblem(m=4, k=151936), "f16", "row") or ""
    assert "shared memory" in reason
    assert "shared memory" in (space.prune(smem, SoftmaxProblem(m=4, k=65536), "f32", "row") or "")
    modes = {(p["strategy"], p["mode"]) for p in space.enumerate("f16", "row", "sm_90")}
    assert ("block", "smem") in modes and ("warp", "smem") not in modes
    source = render(space, smem)
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in source
    # the aligned (plain vector loop) and the any-k instantiations, picked per launch
    assert "softmax_in_shared<EDGES><<<" in source
    assert "launch_in_shared<false>" in source and "launch_in_shared<true>" in source


def test_every_k_of_the_sweep_keeps_candidates() -> None:
    for k in (1, 8, 32, 1024, 32768, 1 << 20):
        for space in SPACES:
            problem = ReduceProblem(m=8, k=k) if space.op == "reduce" else SoftmaxProblem(m=8, k=k)
            kept = [
                p
                for p in space.enumerate("f16", "row", "sm_90")
                if space.prune(p, problem, "f16", "row") is None
            ]
            assert kept, (space.op, k)


def test_arch_flags() -> None:
    assert "-gencode=arch=compute_90a,code=sm_90a" in arch_flags("sm_90")
    assert "-DNDEBUG" in arch_flags("sm_90")
    assert "-gencode=arch=compute_80,code=sm_80" in arch_flags("sm_80")
    with pytest.raises(ToolchainError):
        arch_flags("gfx90a")


def test_cutlass_include_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cutlass_include_dirs(("/x",)) == ("/x",)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ToolchainError, match="pip install nvidia-cutlass"):
        cutlass_include_dirs()


def test_suspect_reasons() -> None:
    assert suspect_reasons({"throttle_mask": 0x1, "pids": [7]}, {"pids": [7]}, {7}) == []
    reasons = suspect_reasons({"throttle_mask": 0x8, "pids": [7, 9]}, {}, {7})
    assert "hardware slowdown" in reasons
    assert any("[9]" in r for r in reasons)
    # a kernel alone at the software power cap is its own steady state, not interference
    assert suspect_reasons({"throttle_mask": 0x4, "pids": [7]}, {"throttle_mask": 0x4}, {7}) == []


def _fake_harness(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "fake_harness.py"
    script.write_text(
        "import json, sys, time\n"
        "print(json.dumps({'ready': True}), flush=True)\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n" + body
    )
    return [sys.executable, str(script)]


def test_harness_process_answers_restarts_and_times_out(tmp_path: Path) -> None:
    argv = _fake_harness(
        tmp_path,
        """
    if req['cmd'] == 'crash':
        sys.exit(3)
    if req['cmd'] == 'hang':
        time.sleep(60)
    print(json.dumps({'echo': req['cmd']}), flush=True)
""",
    )
    proc = HarnessProcess(argv, env={})
    try:
        assert proc.request({"cmd": "a"}, 10) == {"echo": "a"}
        died = proc.request({"cmd": "crash"}, 10)
        assert died["fatal"] and "exited with code 3" in died["log"]
        assert proc.request({"cmd": "b"}, 10) == {"echo": "b"}
        with pytest.raises(HarnessTimeout):
            proc.request({"cmd": "hang"}, 0.5)
        assert not proc.alive()
        assert proc.request({"cmd": "c"}, 10) == {"echo": "c"}
        assert proc.starts == 3
    finally:
        proc.close()


def test_harness_that_cannot_start_answers_a_fatal_failure(tmp_path: Path) -> None:
    script = tmp_path / "no_gpu.py"
    script.write_text("import json\nprint(json.dumps({'ready': False, 'log': 'no GPU'}))\n")
    proc = HarnessProcess([sys.executable, str(script)], env={})
    answer = proc.request({"cmd": "run"}, 10)
    assert answer["fatal"] and answer["outcome"] == "runtime_error" and answer["log"] == "no GPU"
    assert not proc.alive()


def test_results_carry_throughput_and_suspect(tmp_path: Path) -> None:
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path)), nvcc="nvcc")
    request = TuneRequest(
        op="reduce",
        dtype="f16",
        layout="row",
        problem=ReduceProblem(m=1024, k=1024),
        backend="cuda",
    )
    base = BenchResult("id", "reduce_f16_p8_g4_t256", {}, Outcome.RUNTIME_ERROR)
    answer = {
        "outcome": "ok",
        "samples_us": [2.0] * 10,
        "suspect_reasons": ["power cap"],
        "provenance": {"batch": 100},
    }
    result = backend._result(base, json.loads(json.dumps(answer)), request, 0.1)
    assert result.ok and result.suspect
    # (1024*1024 + 1024) f16 elements in 2 us
    assert result.throughput == pytest.approx((1024 * 1024 + 1024) * 2 / 2.0 / 1e3)
    assert result.throughput_unit == "GB/s"
    wrong = backend._result(base, {"outcome": "wrong_result", "log": "bad"}, request, 0.1)
    assert wrong.outcome is Outcome.WRONG_RESULT and wrong.timing is None


def test_device_without_a_gpu_is_a_device_error(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path)), harness_python=sys.executable)
    with pytest.raises(DeviceError):
        backend.device()


def test_run_without_a_gpu_is_a_runtime_error_not_a_crash(tmp_path: Path) -> None:
    """The real harness (--serve) on a host without torch or a GPU: the variant fails as data."""
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    backend = CudaBackend(
        EngineConfig(cache_dir=str(tmp_path)), nvcc="nvcc", harness_python=sys.executable
    )
    request = TuneRequest(
        op="reduce", dtype="f16", layout="row", problem=ReduceProblem(m=8, k=8), backend="cuda"
    )
    variant = render_variant(
        CudaReduceSpace(),
        {"pack": 1, "strategy": "group", "group": 2, "threads": 128},
        "f16",
        "row",
        "sm_90",
        (),
        "x",
    )
    try:
        result = backend.run(variant, str(tmp_path / "missing.so"), request)
    finally:
        backend.close()
    assert result.outcome is Outcome.RUNTIME_ERROR
    assert "torch" in result.log or "GPU" in result.log


def test_split_rows_only_where_clusters_exist() -> None:
    for space in SPACES:
        on_hopper = {p["strategy"] for p in space.enumerate("f16", "row", "sm_90")}
        on_ampere = {p["strategy"] for p in space.enumerate("f16", "row", "sm_80")}
        assert "cluster" in on_hopper
        assert "cluster" not in on_ampere
    params = {"pack": 8, "strategy": "cluster", "group": 4, "threads": 256}
    assert SPACES[0].name(params, "f16", "row") == "reduce_f16_p8_c4_t256"
    source = render(SPACES[0], params)
    assert "__cluster_dims__(kCluster, 1, 1)" in source and "map_shared_rank" in source
    assert "__cluster_dims__" not in render(SPACES[0], dict(params, strategy="block", group=256))


def test_split_row_softmax_holds_long_rows_in_registers() -> None:
    space = CudaSoftmaxSpace()
    c8 = {"pack": 8, "strategy": "cluster", "group": 8, "threads": 512, "mode": "reg"}
    # 8 CTAs x 512 threads x 64 floats: rows up to 262,144 f16 elements read once
    assert space.prune(c8, SoftmaxProblem(m=4, k=256000), "f16", "row") is None
    reason = space.prune(c8, SoftmaxProblem(m=4, k=300000), "f16", "row") or ""
    assert "cluster's registers" in reason
    assert "idle" in (space.prune(c8, SoftmaxProblem(m=4, k=1009), "f16", "row") or "")
    names = {space.name(p, "f16", "row") for p in space.enumerate("f16", "row", "sm_90")}
    assert "softmax_f16_p8_c8_t512_reg" in names
    # split rows hold their shares in registers, or (16-byte packs) in shared memory (the
    # bulk-copy family too: test_cuda_softmax_bulk.py)
    held = ("_reg", "_smem", "_bulk", "_bulkp")
    assert not any("_c" in n and not n.endswith(held) for n in names)


@pytest.mark.parametrize("m", [1, 8, 64])
@pytest.mark.parametrize("op", ["reduce", "softmax"])
def test_few_rows_reach_split_rows_first(op: str, m: int) -> None:
    """M <= 64 rows of a vocabulary-sized K cannot fill the SMs one CTA per row: the order puts
    the split-row variants first, so the default budget (and a capped search) reaches them."""
    space = CudaReduceSpace() if op == "reduce" else CudaSoftmaxSpace()
    problem = ReduceProblem(m=m, k=128256) if op == "reduce" else SoftmaxProblem(m=m, k=128256)
    kept = [
        p
        for p in space.enumerate("f16", "row", "sm_90")
        if space.prune(p, problem, "f16", "row") is None
    ]
    ordered = space.order(kept, problem, "f16", "row")
    clusters = ordered
    if op == "softmax":  # the grid split (every SM) first, then the clusters (8 SMs a row)
        assert {p["strategy"] for p in ordered[:2]} == {"grid"}
        # (then the bulk-copy clusters, up to 16 CTAs a row: test_cuda_softmax_bulk.py)
        clusters = [
            p for p in ordered if p["strategy"] != "grid" and p["mode"] not in ("bulk", "bulkp")
        ]
    assert clusters[0]["strategy"] == "cluster" and clusters[0]["group"] == 8
    assert sorted(map(str, ordered)) == sorted(map(str, kept))


def test_many_rows_put_split_rows_after_the_one_cta_mappings() -> None:
    space = CudaReduceSpace()
    problem = ReduceProblem(m=266041, k=1009)
    kept = [
        p
        for p in space.enumerate("f16", "row", "sm_90")
        if space.prune(p, problem, "f16", "row") is None
    ]
    pack8 = [p for p in space.order(kept, problem, "f16", "row") if p["pack"] == 8]
    strategies = [p["strategy"] for p in pack8]
    assert "cluster" not in strategies[: strategies.index("block") + 1]


def test_pipelined_and_streamed_softmax_modes() -> None:
    space = CudaSoftmaxSpace()
    pipe = {"pack": 8, "strategy": "block", "group": 512, "threads": 512, "mode": "pipe"}
    # two buffers of a 50k-entry f16 row fit in 227 KB, two of a 64k-entry row do not
    assert space.prune(pipe, SoftmaxProblem(m=4, k=50257), "f16", "row") is None
    assert "shared memory" in (space.prune(pipe, SoftmaxProblem(m=4, k=65536), "f16", "row") or "")
    params = list(space.enumerate("f16", "row", "sm_90"))
    pipes = [p for p in params if p["mode"] == "pipe"]
    assert pipes and all(p["strategy"] == "block" and p["pack"] == 8 for p in pipes)
    streams = [p for p in params if p["mode"] == "stream"]
    assert streams and {p["strategy"] for p in streams} == {"group", "warp"}
    source = render(space, pipe)
    assert "cp.async.cg.shared.global" in source and "softmax_pipelined" in source
    assert "softmax_streamed" in render(space, streams[0])
