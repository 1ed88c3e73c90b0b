"""CPU conv2d NHWC: the space's pruning, and real variants compiled, run and verified."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.tuner.cpu_helpers import module_backend
from tuner.backends.cpu import CpuBackend
from tuner.errors import InvalidRequestError
from tuner.problems import Conv2dProblem, GemmProblem
from tuner.render import render_variant
from tuner.spaces.base import Params
from tuner.spaces.cpu_conv2d import C_BLOCKS, CpuConv2dSpace
from tuner.types import Outcome, TuneRequest

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SPACE = CpuConv2dSpace()
ARCH = "x86_64-avx512"


def params_of(dtype: str = "f32") -> list[Params]:
    return list(SPACE.enumerate(dtype, "nhwc", ARCH))


def test_space_has_both_algorithms_and_unique_names() -> None:
    params = params_of()
    algos = {p["algo"] for p in params}
    assert algos == {"implicit", "direct"}
    names = [SPACE.name(p, "f32", "nhwc") for p in params]
    assert len(set(names)) == len(names)
    assert "conv2d_f32_nhwc_implicit_bk16_bc32" in names
    assert "conv2d_f32_nhwc_direct_vc8_uk4" in names


def test_only_nhwc_and_known_dtypes() -> None:
    with pytest.raises(InvalidRequestError):
        params_of("f64")
    with pytest.raises(InvalidRequestError):
        list(SPACE.enumerate("f32", "nchw", ARCH))


def test_prune_keeps_one_of_the_blocks_that_cover_small_c() -> None:
    problem = Conv2dProblem(n=1, h=8, w=8, c=20, k=16, r=3, s=3, pad=1)
    kept = [p for p in params_of() if SPACE.prune(p, problem, "f32", "nhwc") is None]
    implicit_bc = {p["bc"] for p in kept if p["algo"] == "implicit"}
    assert implicit_bc == {16, 32}  # 32 covers c=20; 64 and 128 would run the same loops
    direct_vc = {p["vc"] for p in kept if p["algo"] == "direct"}
    assert direct_vc == {4, 8, 16}

    tiny_c = Conv2dProblem(n=1, h=8, w=8, c=3, k=16, r=3, s=3, pad=1)
    kept = [p for p in params_of() if SPACE.prune(p, tiny_c, "f32", "nhwc") is None]
    assert {p["vc"] for p in kept if p["algo"] == "direct"} == {4}
    assert {p["bc"] for p in kept if p["algo"] == "implicit"} == {min(C_BLOCKS)}


def test_prune_keeps_everything_on_a_wide_layer() -> None:
    layer = Conv2dProblem(n=1, h=14, w=14, c=256, k=256, r=3, s=3, pad=1)
    assert all(SPACE.prune(p, layer, "f32", "nhwc") is None for p in params_of())
    assert SPACE.prune(params_of()[0], GemmProblem(m=1, n=1, k=1), "f32", "nhwc")


def test_every_variant_renders_for_every_dtype() -> None:
    for dtype in ("f32", "f16", "bf16"):
        for p in params_of(dtype):
            v = render_variant(SPACE, p, dtype, "nhwc", ARCH, ("-O3",), "g++ test")
            assert SPACE.name(p, dtype, "nhwc") in v.source


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuBackend]:
    # fewer, shorter timings than quick_config's: these modules check outputs, not speed
    yield from module_backend(
        tmp_path_factory,
        "conv-cache",
        bench_seconds=0.005,
        warmup_seconds=0.0,
        min_reps=2,
        max_reps=5,
    )


SHAPES = [
    # ragged channels, stride 2, pad 1, dilation 2
    Conv2dProblem(n=2, h=9, w=11, c=19, k=21, r=3, s=2, stride=2, pad=1, dilation=2),
    # 1x1 filter, single pixel
    Conv2dProblem(n=1, h=1, w=1, c=5, k=3, r=1, s=1),
    # channels over one C-block, K not a multiple of any K-block
    Conv2dProblem(n=1, h=5, w=6, c=40, k=37, r=3, s=3, pad=1),
]
CASES = [
    ("f32", {"algo": "implicit", "bk": 16, "bc": 16, "tm": 6}),
    ("f16", {"algo": "implicit", "bk": 32, "bc": 32, "tm": 4}),
    ("bf16", {"algo": "implicit", "bk": 8, "bc": 16, "tm": 6}),
    ("f32", {"algo": "direct", "vc": 8, "uk": 4}),
    ("f16", {"algo": "direct", "vc": 16, "uk": 1}),
]


@pytest.mark.parametrize(
    ("dtype", "params"), CASES, ids=[SPACE.name(p, d, "nhwc") for d, p in CASES]
)
def test_one_build_verifies_on_every_shape(backend: CpuBackend, dtype: str, params: Params) -> None:
    arch = backend.device().arch
    variant = backend.render(SPACE, params, dtype, "nhwc", arch)
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log
    assert built.artifact is not None
    for problem in SHAPES:
        request = TuneRequest(op="conv2d", dtype=dtype, layout="nhwc", problem=problem)
        result = backend.run(variant, built.artifact, request)
        assert result.outcome is Outcome.OK, (problem, result.log)
        assert result.timing is not None and result.timing.median_us > 0
