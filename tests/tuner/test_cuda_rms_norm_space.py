"""CudaRmsNormSpace without nvcc: every variant renders, names, pruning mirrors the kernel's
register capacity, and the order puts the likely winner of decode and prefill shapes first."""

from __future__ import annotations

import pytest

from tuner.backends.cuda import arch_flags
from tuner.engine import candidate_params
from tuner.problems import RmsNormProblem, SoftmaxProblem
from tuner.render import render_variant
from tuner.spaces.cuda_rms_norm import (
    MODES,
    CudaRmsNormSpace,
    col_options,
    cols_needed,
    reg_bytes,
)
from tuner.types import TuneRequest

SPACE = CudaRmsNormSpace()
SYMBOLS = ("tunehub_can_run", "tunehub_workspace_bytes", "tunehub_run", "tunehub_describe")


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_every_variant_renders(dtype: str, arch: str) -> None:
    names = set()
    for params in SPACE.enumerate(dtype, "row", arch):
        variant = render_variant(SPACE, params, dtype, "row", arch, arch_flags(arch), "nvcc")
        assert variant.name not in names
        names.add(variant.name)
        for symbol in SYMBOLS:  # declared by the ABI header, then defined by the template
            assert variant.source.count(f" {symbol}(") >= 2, symbol
        assert f'"{variant.name} ' in variant.source
        assert "{{" not in variant.source and "{%" not in variant.source
        assert "__cluster_dims__" not in variant.source
        kernels = ["rms_norm_in_registers", "rms_norm_two_pass"]
        if params["mode"] == "2pass":
            kernels.reverse()
        assert kernels[0] in variant.source and kernels[1] not in variant.source
    # packs {1, 2, 4, 8} (f32: {1, 2, 4}) x (19 mappings in registers + 7 in two passes)
    assert len(names) == (104 if dtype != "f32" else 78)


def test_names_and_params() -> None:
    params = {"pack": 8, "strategy": "block", "group": 256, "threads": 256, "mode": "reg"}
    assert SPACE.name(params, "f16", "row") == "rms_norm_f16_p8_block_t256_reg"
    group = {"pack": 4, "strategy": "group", "group": 8, "threads": 128, "mode": "reg"}
    assert SPACE.name(group, "bf16", "row") == "rms_norm_bf16_p4_g8_t128_reg"
    strategies = {(p["strategy"], p["mode"]) for p in SPACE.enumerate("f16", "row", "sm_90")}
    assert strategies == {
        ("group", "reg"),
        ("warp", "reg"),
        ("block", "reg"),
        ("warp", "2pass"),
        ("block", "2pass"),
    }
    assert set(MODES) == {"reg", "2pass"}
    assert list(SPACE.enumerate("f16", "nhwc", "sm_90")) == []


def test_register_capacity_mirrors_the_template() -> None:
    assert [reg_bytes(t) for t in (128, 256, 512, 1024)] == [256, 128, 64, 32]
    block = {"pack": 8, "strategy": "block", "group": 256, "threads": 256, "mode": "reg"}
    assert col_options(block, "f16") == [1, 2, 4, 8]
    assert col_options({**block, "pack": 4}, "f32") == [1, 2, 4, 8]
    assert cols_needed(block, 4096) == 2 and cols_needed(block, 4095) == 2
    assert cols_needed(block, 5120) == 4 and cols_needed(block, 7) == 1
    # 256 lanes x 8 packs of 8 halves: 16384 in registers, one more pack does not fit
    assert SPACE.prune(block, RmsNormProblem(m=1, k=16384), "f16", "row") is None
    reason = SPACE.prune(block, RmsNormProblem(m=1, k=16392), "f16", "row")
    assert reason is not None and "registers" in reason and "16384" in reason
    # two passes run any k
    two = {**block, "mode": "2pass"}
    assert SPACE.prune(two, RmsNormProblem(m=1, k=1 << 20), "f16", "row") is None
    rendered = render_variant(SPACE, block, "f16", "row", "sm_90", arch_flags("sm_90"), "nvcc")
    assert "constexpr int kMaxCols = 8;" in rendered.source
    for cols in (1, 2, 4, 8):
        assert f"rms_norm_in_registers<{cols}><<<" in rendered.source


def test_prune_states_idle_lanes_and_layouts() -> None:
    wide = {"pack": 8, "strategy": "block", "group": 1024, "threads": 1024, "mode": "reg"}
    reason = SPACE.prune(wide, RmsNormProblem(m=4, k=4096), "f16", "row")
    assert reason is not None and "idle" in reason
    assert SPACE.prune(wide, RmsNormProblem(m=4, k=8192), "f16", "row") is None
    assert SPACE.prune(wide, RmsNormProblem(m=4, k=8192), "f16", "rcr") is not None
    # the smallest group always stays, so tiny rows keep a candidate
    tiny = {"pack": 8, "strategy": "group", "group": 2, "threads": 128, "mode": "reg"}
    assert SPACE.prune(tiny, SoftmaxProblem(m=4, k=3), "f16", "row") is None


def _first(m: int, k: int, dtype: str = "f16") -> list[str]:
    request = TuneRequest("rms_norm", dtype, "row", RmsNormProblem(m=m, k=k), backend="cuda")
    candidates, _ = candidate_params(request, "sm_90", "cuda")
    return [SPACE.name(p, dtype, "row") for p in candidates]


@pytest.mark.parametrize("m", [1, 8, 32])
def test_decode_order_puts_a_block_per_row_with_one_pack_a_lane_first(m: int) -> None:
    names = _first(m, 4096)
    assert names[:3] == [
        "rms_norm_f16_p8_block_t512_reg",
        "rms_norm_f16_p8_block_t256_reg",
        "rms_norm_f16_p8_block_t128_reg",
    ]
    assert _first(m, 8192)[0] == "rms_norm_f16_p8_block_t1024_reg"
    assert _first(m, 2048)[0] == "rms_norm_f16_p8_block_t256_reg"
    assert _first(m, 4096, "f32")[0] == "rms_norm_f32_p4_block_t1024_reg"


@pytest.mark.parametrize("m", [2048, 16384])
def test_prefill_order_puts_four_packs_a_lane_first(m: int) -> None:
    assert _first(m, 4096)[:2] == [
        "rms_norm_f16_p8_block_t128_reg",
        "rms_norm_f16_p8_block_t256_reg",
    ]
    assert _first(m, 8192)[0] == "rms_norm_f16_p8_block_t256_reg"


def test_order_keeps_registers_before_two_passes_and_every_candidate() -> None:
    names = _first(2048, 4096)
    modes = [name.rsplit("_", 1)[1] for name in names if "_p8_" in name]
    assert modes == sorted(modes, key=lambda mode: mode != "reg")
    assert len(names) == len(set(names))
    # a row too long for any register variant leaves only two passes
    assert all(name.endswith("_2pass") for name in _first(4, 65536))
