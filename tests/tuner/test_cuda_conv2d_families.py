"""The conv2d space's families: CUTLASS 2.x implicit GEMM and cuDNN engine configs (found on
the device); their params, pruning, order and rendering (no nvcc, no GPU)."""

from __future__ import annotations

import pytest

from tuner.acceptance import variant_rejection
from tuner.backends.cuda import CudaBackend
from tuner.engine import candidate_params
from tuner.errors import InvalidRequestError
from tuner.problems import Conv2dProblem
from tuner.render import render_variant
from tuner.spaces import cuda_conv2d_cudnn as dnn
from tuner.spaces.cuda_conv2d import DEFAULT_MAX_VARIANTS, CudaConv2dSpace
from tuner.types import CompileResult, EngineConfig, TuneRequest

FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
#: what the discovery build writes for engine configs (heuristic modes A, INSTANT, B, fallback)
FOUND = [
    {"engine": 41, "source": "heur_a", "rank": 0, "knobs": {"2": 7, "14": 4, "27": 1, "28": 1}},
    {"engine": 41, "source": "heur_a", "rank": 1, "knobs": {"2": 3, "14": 3, "27": 1, "28": 2}},
    {"engine": 0, "source": "fallback", "rank": 0, "knobs": {}},
]
#: an answer where mode INSTANT's #0 (torch's pick) is not in mode A's list
FOUND_INSTANT = [
    *FOUND[:2],
    {"engine": 58, "source": "heur_instant", "rank": 0, "knobs": {"25": 1}},
    {"engine": 45, "source": "heur_b", "rank": 2, "knobs": {"2": 5}},
    FOUND[2],
]
BATCH1_7X7 = Conv2dProblem(1, 7, 7, 512, 512, 3, 3, pad=1)
BATCH32_56 = Conv2dProblem(32, 56, 56, 64, 64, 3, 3, pad=1)


def test_heuristic_lists_merge_by_rank_and_the_fallback_goes_last() -> None:
    params = CudaConv2dSpace().from_discovery(FOUND_INSTANT)
    assert [p["engine"] for p in params] == [41, 58, 41, 45, 0]
    assert params[0]["k2"] == 7 and params[2]["k2"] == 3  # mode A's #0, then INSTANT's #0


def test_discovery_answer_becomes_engine_and_knob_params_in_its_order() -> None:
    space = CudaConv2dSpace()
    params = space.from_discovery([*FOUND, FOUND[0], {**FOUND[1], "engine": -3}])
    assert len(params) == 3  # the duplicate and the malformed one are dropped
    assert params[0] == {
        "library": "cudnn",
        "family": "cudnn",
        "engine": 41,
        "k2": 7,
        "k14": 4,
        "k27": 1,
        "k28": 1,
    }
    assert "workspace" not in params[0] and "rank" not in params[0]  # not the engine's name
    assert (
        space.name(params[0], "f16", "nhwc") == "conv2d_f16_nhwc_cudnn_e41_k2x7_k14x4_k27x1_k28x1"
    )
    assert space.name(params[2], "bf16", "nhwc") == "conv2d_bf16_nhwc_cudnn_e0"


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"engine": "41"}, "engine must be an int"),
        ({"engine": True}, "engine must be an int"),
        ({"k2": 2**40}, "32-bit int"),
        ({"k99": 1}, "unknown cuDNN param"),
        ({"k02": 1}, "unknown cuDNN param"),
        ({"tile": 1}, "unknown cuDNN param"),
    ],
)
def test_malformed_cudnn_params_are_pruned(change: dict, fragment: str) -> None:
    space = CudaConv2dSpace()
    params = {**space.from_discovery(FOUND)[0], **change}
    reason = space.prune(params, BATCH32_56, "f16", "nhwc")
    assert reason is not None and fragment in reason


def test_cudnn_variant_renders_its_engine_and_knobs() -> None:
    space = CudaConv2dSpace()
    variant = render_variant(space, space.from_discovery(FOUND)[0], "bf16", "nhwc", "sm_90",
                             FLAGS, "nvcc test")  # fmt: skip
    assert "const int64_t index = 41;" in variant.source
    assert "{ 2, 7 }, { 14, 4 }, { 27, 1 }, { 28, 1 }, { -1, 0 }" in variant.source
    assert "CUDNN_DATA_BFLOAT16" in variant.source
    assert "tunehub_discover" not in variant.source
    discovery = render_variant(space, space.discovery_params, "f16", "nhwc", "sm_90", FLAGS,
                               "nvcc test")  # fmt: skip
    assert "TUNEHUB_EXPORT int tunehub_discover" in discovery.source
    assert (
        "CUDNN_HEUR_MODE_A" in discovery.source and "CUDNN_HEUR_MODE_FALLBACK" in discovery.source
    )


def _ordered(problem: Conv2dProblem) -> list[dict]:
    request = TuneRequest(op="conv2d", dtype="f16", layout="nhwc", problem=problem, backend="cuda")
    kept, _ = candidate_params(request, "sm_90", "cuda", CudaConv2dSpace().from_discovery(FOUND))
    return kept


@pytest.mark.parametrize("problem", [BATCH1_7X7, BATCH32_56])
def test_the_vendor_default_comes_first_then_the_cutlass_head(problem: Conv2dProblem) -> None:
    kept = _ordered(problem)
    assert kept[0] == CudaConv2dSpace().from_discovery(FOUND)[0]  # heuristic #0: every budget
    libraries = [p["library"] for p in kept[:DEFAULT_MAX_VARIANTS]]
    assert libraries[:3] == ["cudnn"] * 3  # the #0 of each heuristic mode (here: 2 + fallback)
    assert libraries[3:6] == ["cutlass"] * 3
    assert libraries.count("cudnn") == 3


def test_small_batch_puts_small_tiles_first() -> None:
    """Batch 1 at 7x7 is M = 49 rows: one 128-row tile and 4 columns of 128 fill 4 of 132 SMs,
    64x64 tiles fill 8 with a quarter of the work each."""
    head = [p for p in _ordered(BATCH1_7X7) if p["library"] == "cutlass"][:3]
    assert all(p["tile_m"] * p["tile_n"] <= 64 * 64 for p in head)
    big = [p for p in _ordered(BATCH32_56) if p["library"] == "cutlass"][:3]
    # measured on the H200 (docs/benchmarks/h200.md): 128x64x32 wins this shape
    assert (big[0]["tile_m"], big[0]["tile_n"], big[0]["tile_k"]) == (128, 64, 32)


def test_cudnn_params_need_16_byte_channel_rows() -> None:
    space = CudaConv2dSpace()
    params = space.from_discovery(FOUND)[0]
    assert space.prune(params, Conv2dProblem(1, 56, 56, 3, 64, 7, 7), "f16", "nhwc") is not None
    assert space.prune(params, BATCH32_56, "f16", "nhwc") is None


def test_discovered_cudnn_params_are_checked_by_form() -> None:
    """What the service asks of an uploaded cuDNN measurement (enumerate cannot list it)."""
    space = CudaConv2dSpace()
    found = space.from_discovery(FOUND)[1]
    assert space.discovered_reason(found, "f16", "nhwc", "sm_90") is None
    assert "unknown" in (space.discovered_reason({**found, "x": 1}, "f16", "nhwc", "sm_90") or "")
    cutlass = next(iter(space.enumerate("f16", "nhwc", "sm_90")))
    assert "enumerate" in (space.discovered_reason(cutlass, "f16", "nhwc", "sm_90") or "")
    with pytest.raises(InvalidRequestError):
        space.discovered_reason(found, "f16", "nchw", "sm_90")
    name = space.name(found, "f16", "nhwc")
    args = ("conv2d", "cuda", "f16", "nhwc", "sm_90", BATCH32_56)
    assert variant_rejection(*args, found, name) is None
    assert variant_rejection(*args, found, name + "_x") is not None


def test_backend_discovery_asks_the_harness_for_engine_configs(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tuner.backends.cuda.cudnn_paths", lambda: None)
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path)), nvcc="nvcc")
    backend._identity = "nvcc test"
    sent: list[dict] = []
    built: list[str] = []

    def build(variants):
        built.extend(v.params["family"] for v in variants)
        return {v.id: CompileResult(v.id, True, "/x/kernel.so", 0.0, True) for v in variants}

    def request(payload, timeout_s):
        sent.append(payload)
        return {"algos": FOUND}

    backend.build = build  # type: ignore[method-assign]
    backend.request = request  # type: ignore[method-assign]
    request_ = TuneRequest(
        op="conv2d", dtype="f16", layout="nhwc", problem=BATCH1_7X7, backend="cuda"
    )
    assert backend.discover(request_, "sm_90") == CudaConv2dSpace().from_discovery(FOUND)
    assert built == [dnn.DISCOVERY_FAMILY]
    assert sent[0]["requested"] == dnn.REQUESTED_CONFIGS and sent[0]["op"] == "conv2d"


def test_sm90_cutlass3_kernels_are_on_sm90_only_and_ordered_last() -> None:
    space = CudaConv2dSpace()
    sm90 = [p for p in space.enumerate("f16", "nhwc", "sm_90") if p["family"] == "sm90"]
    assert len(sm90) == 12 and all(p["library"] == "cutlass" for p in sm90)
    assert not any(p["family"] == "sm90" for p in space.enumerate("f16", "nhwc", "sm_80"))
    kept = _ordered(BATCH1_7X7)
    first = next(i for i, p in enumerate(kept) if p["family"] == "sm90")
    assert all(p["family"] == "sm90" for p in kept[first:])  # not yet measured: last
    assert kept[first]["tile_m"] * kept[first]["tile_n"] == 64 * 64  # SM-fill order inside
    params = sm90[0]
    assert space.name(params, "bf16", "nhwc") == "conv2d_bf16_nhwc_sm90_128x128x64_c1x1"
    variant = render_variant(space, params, "bf16", "nhwc", "sm_90", FLAGS, "nvcc test")
    assert "cutlass::conv::collective::CollectiveBuilder" in variant.source
    assert "Shape<_128, _128, Shape<_64>>" in variant.source
    assert "cutlass::bfloat16_t" in variant.source
    assert space.prune(params, Conv2dProblem(1, 56, 56, 4, 64, 3, 3), "f16", "nhwc") is not None
    assert space.prune(params, BATCH32_56, "f16", "nhwc") is None
