"""CPU gemm: the space's legality and pruning, and real variants compiled, run and verified."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tuner.cpu_helpers import module_backend
from tuner.backends.cpu import CpuBackend
from tuner.engine import candidate_params, tune
from tuner.errors import InvalidRequestError
from tuner.problems import GemmProblem, ReduceProblem
from tuner.render import render_variant
from tuner.spaces.base import Params
from tuner.spaces.cpu_gemm import GEMM_LAYOUTS, MAX_TILE_FLOATS_AVX2, CpuGemmSpace
from tuner.types import Budget, Outcome, TuneRequest

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SPACE = CpuGemmSpace()
AVX512 = "x86_64-avx512"


def params_of(dtype: str, layout: str, arch: str = AVX512) -> list[Params]:
    return list(SPACE.enumerate(dtype, layout, arch))


def test_space_is_a_few_dozen_legal_unique_variants() -> None:
    for dtype in ("f32", "f16", "bf16"):
        for layout in GEMM_LAYOUTS:
            params = [p for p in params_of(dtype, layout) if "epilogue" not in p]  # plain ones
            assert 20 <= len(params) <= 60
            names = [SPACE.name(p, dtype, layout) for p in params]
            assert len(set(names)) == len(names)
            for p in params:
                assert p["mc"] % p["mr"] == 0 and p["nc"] % p["nr"] == 0
            assert any(not p["packed"] for p in params)


def test_name_is_procedural() -> None:
    params = {"mr": 6, "nr": 16, "mc": 96, "kc": 256, "nc": 2048, "packed": True}
    assert SPACE.name(params, "f32", "rcr") == "gemm_f32_rcr_mr6_nr16_mc96_kc256_packed"


def test_narrow_isa_drops_tiles_that_would_spill() -> None:
    wide = params_of("f32", "rcr", AVX512)
    narrow = params_of("f32", "rcr", "x86_64-avx2")
    assert len(narrow) < len(wide)
    assert all(p["mr"] * p["nr"] <= MAX_TILE_FLOATS_AVX2 for p in narrow)


def test_unknown_dtype_or_layout_is_a_request_error() -> None:
    with pytest.raises(InvalidRequestError) as err:
        params_of("f64", "rcr")
    assert err.value.field == "dtype"
    with pytest.raises(InvalidRequestError) as err:
        params_of("f32", "nhwc")
    assert err.value.field == "layout"


def test_prune_drops_blocks_that_act_like_a_smaller_one() -> None:
    small = GemmProblem(m=40, n=300, k=64)
    kept = [p for p in params_of("f32", "rcr") if SPACE.prune(p, small, "f32", "rcr") is None]
    packed = [p for p in kept if p["packed"]]
    assert {p["kc"] for p in packed} == {128}
    mcs = {(p["mr"], p["mc"]) for p in packed}
    assert (4, 64) in mcs and (4, 96) not in mcs and (4, 192) not in mcs
    assert (6, 96) in mcs and (6, 192) not in mcs  # 64 is not a multiple of 6
    reason = SPACE.prune(
        {"mr": 4, "nr": 8, "mc": 192, "kc": 128, "nc": 2048, "packed": True}, small, "f32", "rcr"
    )
    assert reason is not None and "mc=64" in reason
    assert any(not p["packed"] for p in kept)


def test_prune_keeps_everything_on_a_large_problem() -> None:
    big = GemmProblem(m=1024, n=1024, k=1024)
    assert all(SPACE.prune(p, big, "f32", "rcr") is None for p in params_of("f32", "rcr"))
    assert SPACE.prune(params_of("f32", "rcr")[0], ReduceProblem(m=4, k=4), "f32", "rcr")


def test_every_variant_renders_for_every_dtype_and_layout() -> None:
    for dtype in ("f32", "f16", "bf16"):
        for layout in GEMM_LAYOUTS:
            for p in params_of(dtype, layout):
                v = render_variant(SPACE, p, dtype, layout, AVX512, ("-O3",), "g++ test")
                assert f"constexpr int MR = {p['mr']};" in v.source
                a_row = "true" if layout[0] == "r" else "false"
                assert f"constexpr bool A_ROW_MAJOR = {a_row};" in v.source
                assert "-ffp-contract=fast" in v.flags


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuBackend]:
    # fewer, shorter timings than quick_config's: these modules check outputs, not speed
    yield from module_backend(
        tmp_path_factory,
        "gemm-cache",
        bench_seconds=0.005,
        warmup_seconds=0.0,
        min_reps=2,
        max_reps=5,
    )


# ragged everywhere (not multiples of any tile or block), a 1x1x1, and one k over two KC blocks
SHAPES = [(37, 29, 61), (1, 1, 1), (13, 70, 64), (9, 17, 150)]
CASES = [
    ("f32", "rcr", {"mr": 6, "nr": 16, "mc": 96, "kc": 128, "nc": 2048, "packed": True}),
    ("f16", "rrr", {"mr": 8, "nr": 8, "mc": 64, "kc": 128, "nc": 2048, "packed": True}),
    ("bf16", "crr", {"mr": 4, "nr": 8, "mc": 64, "kc": 128, "nc": 2048, "packed": True}),
    ("f32", "ccr", {"mr": 4, "nr": 8, "mc": 96, "kc": 256, "nc": 2048, "packed": False}),
    ("bf16", "rcr", {"mr": 6, "nr": 16, "mc": 96, "kc": 256, "nc": 2048, "packed": False}),
]


@pytest.mark.parametrize(
    ("dtype", "layout", "params"), CASES, ids=[SPACE.name(p, d, lay) for d, lay, p in CASES]
)
def test_one_build_verifies_on_every_shape(
    backend: CpuBackend, dtype: str, layout: str, params: Params
) -> None:
    arch = backend.device().arch
    variant = backend.render(SPACE, params, dtype, layout, arch)
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log
    assert built.artifact is not None
    for m, n, k in SHAPES:
        request = TuneRequest(
            op="gemm", dtype=dtype, layout=layout, problem=GemmProblem(m=m, n=n, k=k)
        )
        result = backend.run(variant, built.artifact, request)
        assert result.outcome is Outcome.OK, (m, n, k, result.log)
        assert result.timing is not None and result.timing.median_us > 0
        assert result.throughput_unit == "TFLOP/s"
    assert Path(built.artifact).exists()


def test_tune_end_to_end_picks_a_verified_winner(backend: CpuBackend) -> None:
    request = TuneRequest(
        op="gemm",
        dtype="f32",
        layout="rcr",
        problem=GemmProblem(m=20, n=24, k=32),
        strategy="random",
        budget=Budget(max_variants=2),
        seed=1,
    )
    kept, pruned = candidate_params(request, backend.device().arch, "cpu")
    assert pruned and kept
    result = tune(request, backend, backend.config)
    assert len(result.results) == 2
    assert result.winner is not None and result.winner.ok
    assert result.winner.variant_name.startswith("gemm_f32_rcr_")
