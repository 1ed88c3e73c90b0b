"""Every CUTLASS variant renders; the spaces order, prune and name as documented (no nvcc)."""

from __future__ import annotations

import re

import pytest

from tuner.engine import candidate_params
from tuner.errors import InvalidRequestError
from tuner.problems import Conv2dProblem, GemmProblem
from tuner.registry import load_space
from tuner.render import render_variant
from tuner.spaces.cuda_conv2d import CudaConv2dSpace
from tuner.spaces.cuda_gemm import DEFAULT_MAX_VARIANTS, CudaGemmSpace
from tuner.types import TuneRequest

SM90_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
ABI_SYMBOLS = ("tunehub_can_run", "tunehub_workspace_bytes", "tunehub_run", "tunehub_describe")


def _cutlass(space, dtype: str, layout: str, arch: str) -> list:
    """The space's plain CUTLASS params (the gemm space also holds the skinny family, and
    fused variants: tests/tuner/test_cuda_epilogue_compile.py covers those)."""
    return [
        p
        for p in space.enumerate(dtype, layout, arch)
        if p.get("family") in ("sm90", "sm80", None) and "epilogue" not in p
    ]


def _render_all(space, dtype: str, layout: str, arch: str) -> list:
    return [
        render_variant(space, params, dtype, layout, arch, SM90_FLAGS, "nvcc test")
        for params in _cutlass(space, dtype, layout, arch)
    ]


def _check_sources(variants: list) -> None:
    assert variants
    assert len({v.name for v in variants}) == len(variants), "names must be unique"
    assert len({v.id for v in variants}) == len(variants), "ids must be unique"
    for v in variants:
        assert "{{" not in v.source and "{%" not in v.source, v.name
        assert '#include "' not in v.source.split("namespace tunehub")[0], "ABI is inlined"
        for symbol in ABI_SYMBOLS:
            assert f" {symbol}(" in v.source, (v.name, symbol)
        assert v.name in v.source  # tunehub_describe names the variant


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("layout", ["rcr", "rrr"])
def test_every_sm90_gemm_variant_renders(dtype: str, layout: str) -> None:
    variants = _render_all(CudaGemmSpace(), dtype, layout, "sm_90")
    _check_sources(variants)
    element = "cutlass::half_t" if dtype == "f16" else "cutlass::bfloat16_t"
    for v in variants:
        assert "KernelTmaWarpSpecialized" in v.source or "KernelScheduleAuto" in v.source
        assert f"using Element = {element};" in v.source
        b_layout = "ColumnMajor" if layout == "rcr" else "RowMajor"
        assert f"using LayoutB = cutlass::layout::{b_layout};" in v.source
        streamk = "cutlass::gemm::StreamKScheduler" in v.source
        assert streamk == (v.params["scheduler"] == "streamk"), v.name
        splits = v.params["splits"]
        assert (f"args.scheduler.splits = {splits};" in v.source) == (splits > 1), v.name
        assert ("DecompositionMode::SplitK" in v.source) == (splits > 1), v.name
        if splits > 1:
            assert streamk and v.params["schedule"] != "pingpong", v.name
            assert v.name.endswith(f"_splitk{splits}"), v.name
            assert f"splits={splits}" in v.source  # tunehub_describe


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_every_sm80_class_gemm_variant_renders(arch: str) -> None:
    for dtype, layout in (("f16", "rcr"), ("bf16", "rrr")):
        variants = _render_all(CudaGemmSpace(), dtype, layout, arch)
        _check_sources(variants)
        for v in variants:
            assert "cutlass::gemm::device::GemmUniversal<" in v.source
            assert "wgmma" not in v.source and "Sm90" not in v.source


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_every_conv2d_variant_renders(arch: str) -> None:
    variants = _render_all(CudaConv2dSpace(), "f16", "nhwc", arch)
    _check_sources(variants)
    for v in variants:
        if v.params["family"] == "sm90":  # CUTLASS 3.x on sm_90 only
            assert arch == "sm_90" and "conv::collective::CollectiveBuilder" in v.source
        else:
            assert "DefaultConv2dFprop" in v.source


def test_template_follows_arch() -> None:
    space = CudaGemmSpace()
    sm90 = next(iter(space.enumerate("f16", "rcr", "sm_90")))
    sm80 = next(iter(space.enumerate("f16", "rcr", "sm_80")))
    assert space.template_for(sm90) == "cuda/gemm_sm90.cu.j2"
    assert space.template_for(sm80) == "cuda/gemm_sm80.cu.j2"
    assert isinstance(load_space("gemm", "cuda"), CudaGemmSpace)
    assert isinstance(load_space("conv2d", "cuda"), CudaConv2dSpace)


def test_sm90_order_puts_the_anchors_first() -> None:
    space = CudaGemmSpace()
    names = [space.name(p, "f16", "rcr") for p in space.enumerate("f16", "rcr", "sm_90")]
    assert names[0] == "gemm_f16_rcr_128x256x64_c2x1_coop"
    assert "gemm_f16_rcr_64x128x64_c1x1_pingpong" in names[:2]
    head = names[:DEFAULT_MAX_VARIANTS]
    assert any("streamk" in n for n in head), "a capped search must still try stream-K"
    assert not any(re.search(r"_r[mn](_|$)|_sw\d", n) for n in head[:8]), "raster/swizzle later"
    assert len(names) > 1000  # the whole space is enumerated, not only the head


def test_sm90_space_holds_only_buildable_schedules() -> None:
    for p in _cutlass(CudaGemmSpace(), "bf16", "rcr", "sm_90"):
        tile_mn = p["tile_m"] * p["tile_n"]
        if p["schedule"] == "coop":
            assert p["tile_m"] >= 128 and tile_mn <= 128 * 256
        if p["schedule"] == "pingpong":
            assert tile_mn <= 128 * 128
            assert p["scheduler"] != "streamk"
        assert 2 * (p["tile_m"] + p["tile_n"]) * p["tile_k"] * 2 <= 227 * 1024


def test_sm86_uses_the_smaller_shared_memory() -> None:
    space = CudaGemmSpace()
    sm80 = _cutlass(space, "f16", "rcr", "sm_80")
    sm86 = _cutlass(space, "f16", "rcr", "sm_86")
    assert len(sm86) < len(sm80)
    for p in sm86:
        assert p["stages"] * (p["tile_m"] + p["tile_n"]) * p["tile_k"] * 2 <= 99 * 1024


def test_gemm_prune_by_alignment() -> None:
    space = CudaGemmSpace()
    params = next(iter(space.enumerate("f16", "rcr", "sm_90")))
    assert space.prune(params, GemmProblem(4096, 4096, 4096), "f16", "rcr") is None
    assert space.prune(params, GemmProblem(17, 4096, 4096), "f16", "rcr") is None  # m is free
    assert "k=4100" in (space.prune(params, GemmProblem(64, 64, 4100), "f16", "rcr") or "")
    assert "n=4001" in (space.prune(params, GemmProblem(64, 4001, 64), "f16", "rrr") or "")


def test_sm80_split_k_is_pruned_on_short_k() -> None:
    space = CudaGemmSpace()
    split = next(p for p in space.enumerate("f16", "rcr", "sm_80") if p["split_k"] == 4)
    assert space.prune(split, GemmProblem(128, 128, 64), "f16", "rcr") is not None
    assert space.prune(split, GemmProblem(128, 128, 8192), "f16", "rcr") is None


def test_sm90_split_k_axis() -> None:
    params = _cutlass(CudaGemmSpace(), "f16", "rcr", "sm_90")
    split = [p for p in params if p["splits"] > 1]
    assert {p["splits"] for p in split} == {2, 4, 8}
    # every cooperative stream-K kernel of the default raster/swizzle comes in each split
    base = [
        p
        for p in params
        if p["scheduler"] == "streamk"
        and p["splits"] == 1
        and p["raster"] == "auto"
        and p["swizzle"] == 1
    ]
    assert len(split) == 3 * len(base)
    for tile in ((128, 64), (128, 128)):
        assert any(
            (p["tile_m"], p["tile_n"]) == tile
            and p["schedule"] == "coop"
            and p["cluster_m"] * p["cluster_n"] == 1
            for p in split
        ), tile


def test_sm90_split_k_is_pruned_on_short_k() -> None:
    space = CudaGemmSpace()
    split8 = next(
        p for p in _cutlass(space, "f16", "rcr", "sm_90") if p["splits"] == 8 and p["tile_k"] == 64
    )
    # 15 k-tiles of 64 cannot feed 8 splits two k-tiles each
    reason = space.prune(split8, GemmProblem(16, 4096, 960), "f16", "rcr")
    assert reason is not None and "split 8 ways" in reason
    assert space.prune(split8, GemmProblem(16, 4096, 1024), "f16", "rcr") is None


def _ordered_names(problem: GemmProblem, space: CudaGemmSpace | None = None) -> list[str]:
    space = space or CudaGemmSpace()
    kept = [
        p
        for p in _cutlass(space, "f16", "rcr", "sm_90")
        if space.prune(p, problem, "f16", "rcr") is None
    ]
    ordered = space.order(kept, problem, "f16", "rcr")
    assert sorted(map(id, ordered)) == sorted(map(id, kept)), "order is a permutation"
    return [space.name(p, "f16", "rcr") for p in ordered]


def _small_m_friendly(name: str) -> bool:
    return "_64x" in name or "_streamk" in name or "_splitk" in name


def test_sm90_order_for_a_skinny_shape_fills_the_sms() -> None:
    names = _ordered_names(GemmProblem(16, 4096, 4096))
    head = names[:8]
    assert all(_small_m_friendly(n) for n in head), head
    assert any("_splitk" in n for n in head), head
    assert any("_64x" in n and "pingpong" in n for n in head), head
    # the big-shape seed leaves only 16 tiles of 132 SMs busy at m=16: not in a capped search
    assert names.index("gemm_f16_rcr_128x256x64_c2x1_coop") >= DEFAULT_MAX_VARIANTS


def test_sm90_order_for_large_shapes_keeps_the_seeds() -> None:
    for problem in (GemmProblem(8192, 8192, 8192), GemmProblem(4096, 11008, 4096)):
        names = _ordered_names(problem)
        assert names[0] == "gemm_f16_rcr_128x256x64_c2x1_coop"
        head = names[:DEFAULT_MAX_VARIANTS]
        assert not any("_splitk" in n for n in head), head
        assert not any(re.search(r"_r[mn](_|$)|_sw\d", n) for n in head[:8]), head


def test_sm90_order_is_deterministic_and_follows_the_sm_count() -> None:
    problem = GemmProblem(1024, 1024, 1024)
    first = _ordered_names(problem)
    assert first == _ordered_names(problem)
    assert _ordered_names(problem, CudaGemmSpace(sm_count=132)) == first
    assert CudaGemmSpace(sm_count=78).sm_count == 78
    assert _ordered_names(problem, CudaGemmSpace(sm_count=8)) != first
    with pytest.raises(ValueError):
        CudaGemmSpace(sm_count=0)


def test_candidate_params_uses_the_space_order() -> None:
    problem = GemmProblem(16, 4096, 4096)
    request = TuneRequest(op="gemm", dtype="f16", layout="rcr", problem=problem, backend="cuda")
    kept, pruned = candidate_params(request, "sm_90", "cuda")
    space = CudaGemmSpace()
    cutlass = [space.name(p, "f16", "rcr") for p in kept if p["library"] == "cutlass"]
    assert cutlass == _ordered_names(problem)
    assert not [p for p, _ in pruned if p["library"] == "cutlass"]  # aligned, k deep enough


def test_the_default_order_keeps_the_candidates() -> None:
    space = load_space("gemm", "cpu")
    params = list(space.enumerate("f32", "rcr", "x86_64-avx2"))[:5]
    assert space.order(params, GemmProblem(64, 64, 64), "f32", "rcr") == params
    sm80 = CudaGemmSpace()
    params = _cutlass(sm80, "f16", "rcr", "sm_80")[:5]
    assert sm80.order(params, GemmProblem(64, 64, 64), "f16", "rcr") == params


def test_names_follow_the_design() -> None:
    space = CudaGemmSpace()
    params = {
        "family": "sm90",
        "tile_m": 128,
        "tile_n": 256,
        "tile_k": 64,
        "cluster_m": 2,
        "cluster_n": 1,
        "schedule": "coop",
        "scheduler": "streamk",
        "raster": "n",
        "swizzle": 4,
        "splits": 1,
    }
    assert space.name(params, "f16", "rcr") == "gemm_f16_rcr_128x256x64_c2x1_coop_streamk_rn_sw4"
    split = {**params, "cluster_m": 1, "raster": "auto", "swizzle": 1, "splits": 4}
    assert space.name(split, "f16", "rcr") == "gemm_f16_rcr_128x256x64_c1x1_coop_splitk4"


def test_conv2d_prune_by_channels() -> None:
    space = CudaConv2dSpace()
    params = list(space.enumerate("f16", "nhwc", "sm_90"))
    wide = next(p for p in params if p["align"] == 8)
    narrow = next(p for p in params if p["align"] == 4)
    resnet = Conv2dProblem(32, 56, 56, 64, 64, 3, 3, pad=1)
    odd = Conv2dProblem(8, 32, 32, 12, 12, 3, 3, pad=1)
    assert space.prune(wide, resnet, "f16", "nhwc") is None
    assert space.prune(narrow, resnet, "f16", "nhwc") is not None  # 16-byte loads are possible
    assert "c=12" in (space.prune(wide, odd, "f16", "nhwc") or "")
    assert space.prune(narrow, odd, "f16", "nhwc") is None
    assert params[0]["align"] == 8 and params[0]["iterator"] == "opt"


@pytest.mark.parametrize(
    ("space", "dtype", "layout", "arch"),
    [
        (CudaGemmSpace(), "f32", "rcr", "sm_90"),
        (CudaGemmSpace(), "f16", "crr", "sm_90"),
        (CudaGemmSpace(), "f16", "rcr", "sm_75"),
        (CudaGemmSpace(), "f16", "rcr", "hopper"),
        (CudaConv2dSpace(), "f16", "nhwc", "sm_70"),
    ],
)
def test_unsupported_requests_are_client_errors(space, dtype, layout, arch) -> None:
    with pytest.raises(InvalidRequestError):
        list(space.enumerate(dtype, layout, arch))
