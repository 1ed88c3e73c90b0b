"""The GEMM space's families beside CUTLASS: cuBLASLt algorithms (found on the device) and the
hand-written skinny and swap-AB kernels; their params, pruning, order and rendering (no nvcc, no
GPU)."""

from __future__ import annotations

import pytest

from tuner.engine import candidate_params
from tuner.errors import InvalidRequestError
from tuner.problems import GemmProblem, ReduceProblem
from tuner.registry import load_space
from tuner.render import render_variant
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces.cuda_gemm import DEFAULT_MAX_VARIANTS, CudaGemmSpace
from tuner.types import TuneRequest

FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
#: what the discovery build writes for one algorithm (a real H200 answer's shape)
FOUND = [
    {"algo": 66, "tile": 18, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 0,
     "custom": 0, "inner_shape": 0, "cluster_shape": 2, "workspace": 0, "waves": 0.9,
     "exact": True},
    {"algo": 66, "tile": 20, "stages": 22, "splitk": 4, "reduction": 2, "swizzle": 1,
     "custom": 3, "inner_shape": 1, "cluster_shape": 13, "workspace": 65536, "waves": 1.7,
     "exact": True},
]  # fmt: skip


def _render(params: dict, dtype: str = "f16", layout: str = "rcr"):
    return render_variant(CudaGemmSpace(), params, dtype, layout, "sm_90", FLAGS, "nvcc test")


def _family(family: str, **overrides) -> dict:
    space = CudaGemmSpace()
    for p in space.enumerate("f16", "rcr", "sm_90"):
        if p["family"] == family and all(p[k] == v for k, v in overrides.items()):
            return p
    raise AssertionError(f"no {family} params with {overrides}")


def _skinny(**overrides) -> dict:
    return _family("skinny", **overrides)


def test_discovery_answer_becomes_attribute_params_in_its_order() -> None:
    params = CudaGemmSpace().from_discovery([*FOUND, FOUND[0], {**FOUND[1], "tile": -1}])
    assert len(params) == 2  # the duplicate and the malformed one are dropped
    assert params[0] == {
        "library": "cublaslt",
        "family": "cublaslt",
        **{k: FOUND[0][k] for k in lt.ATTRIBUTES},
    }
    assert "workspace" not in params[0] and "waves" not in params[0]  # not the kernel's name
    name = CudaGemmSpace().name(params[1], "bf16", "rrr")
    assert name == "gemm_bf16_rrr_lt_a66_t20_s22_k4_r2_w1_c3_i1_cl13"


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"tile": "18"}, "tile must be an int"),
        ({"splitk": 0}, "splitk must be at least 1"),
        ({"swizzle": True}, "swizzle must be an int"),
        ({"algo": 10**9}, "algo must be an int"),
        ({"heuristic_index": 0}, "unknown cuBLASLt attributes"),
    ],
)
def test_malformed_cublaslt_params_are_pruned(change: dict, fragment: str) -> None:
    space = CudaGemmSpace()
    good = space.from_discovery(FOUND)[0]
    problem = GemmProblem(16, 4096, 4096)
    assert space.prune(good, problem, "f16", "rcr") is None
    assert fragment in (space.prune({**good, **change}, problem, "f16", "rcr") or "")


@pytest.mark.parametrize(("dtype", "layout"), [("f16", "rcr"), ("bf16", "rrr")])
def test_cublaslt_variant_renders_its_attributes(dtype: str, layout: str) -> None:
    params = CudaGemmSpace().from_discovery(FOUND)[1]
    source = _render(params, dtype, layout).source
    assert "{{" not in source and "{%" not in source
    assert "cublasLtMatmulAlgoInit(" in source and "cublasLtMatmul(" in source
    for attribute, value in (
        ("TILE_ID", "20u"),
        ("STAGES_ID", "22u"),
        ("SPLITK_NUM", "4"),
        ("REDUCTION_SCHEME", "2u"),
        ("CTA_SWIZZLING", "1u"),
        ("CUSTOM_OPTION", "3u"),
        ("INNER_SHAPE_ID", "1"),
        ("CLUSTER_SHAPE_ID", "13"),
    ):
        assert f"CUBLASLT_ALGO_CONFIG_{attribute}, {value});" in source, attribute
    assert ("CUDA_R_16F;" if dtype == "f16" else "CUDA_R_16BF;") in source
    assert ("CUBLAS_OP_T" in source) == (layout == "rcr")
    assert "tunehub_discover" not in source


def test_discovery_build_renders_from_the_same_template() -> None:
    space = CudaGemmSpace()
    variant = _render(space.discovery_params)
    assert variant.name == "gemm_f16_rcr_lt_discover"
    assert space.template_for(space.discovery_params) == lt.TEMPLATE
    assert "cublasLtMatmulAlgoGetHeuristic(" in variant.source
    assert "TUNEHUB_EXPORT int tunehub_discover(" in variant.source
    assert "tunehub_can_run" in variant.source  # the ABI is complete (it refuses to run)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_every_skinny_variant_renders(dtype: str) -> None:
    space = CudaGemmSpace()
    skinny = [p for p in space.enumerate(dtype, "rcr", "sm_90") if p["family"] == "skinny"]
    variants = [_render(p, dtype) for p in skinny]
    assert len({v.id for v in variants}) == len({v.name for v in variants}) == len(skinny)
    element = "__half" if dtype == "f16" else "__nv_bfloat16"
    for v in variants:
        assert v.params["library"] == "tunehub"
        assert f"using Element = {element};" in v.source
        assert f"constexpr int kMTile = {v.params['m_tile']};" in v.source
        assert ("sum_splits<<<" in v.source) and (f"kSplits = {v.params['splits']};" in v.source)
        assert f"constexpr int kSlices = {v.params['slices']};" in v.source
        assert "{{" not in v.source


def test_skinny_prune() -> None:
    space = CudaGemmSpace()
    p = _skinny(m_tile=1, pack=8, lanes=32, warps=4, splits=1, unroll=4)
    assert space.prune(p, GemmProblem(1, 4096, 4096), "f16", "rcr") is None
    assert "m=65" in (space.prune(p, GemmProblem(65, 4096, 4096), "f16", "rcr") or "")
    assert "rcr" in (space.prune(p, GemmProblem(1, 4096, 4096), "f16", "rrr") or "")
    assert "pack 8" in (space.prune(p, GemmProblem(1, 4096, 4100), "f16", "rcr") or "")
    assert "m_tile 1" in (space.prune(p, GemmProblem(16, 4096, 4096), "f16", "rcr") or "")
    cut = _skinny(m_tile=1, lanes=32, warps=8, slices=8, splits=2, unroll=8)
    assert space.prune(cut, GemmProblem(1, 4096, 32768), "f16", "rcr") is None
    assert "cut 16 ways" in (space.prune(cut, GemmProblem(1, 4096, 4096), "f16", "rcr") or "")
    skinny = [p for p in space.enumerate("f16", "rcr", "sm_90") if p["family"] == "skinny"]
    # 16 rows of A with 4 loads in flight took all 255 registers and spilled: not in the space
    assert all(p["m_tile"] * p["unroll"] <= 32 for p in skinny)
    assert all(p["slices"] <= p["warps"] * 32 // p["lanes"] for p in skinny)


def _ordered(problem: GemmProblem, layout: str = "rcr") -> list[dict]:
    request = TuneRequest(op="gemm", dtype="f16", layout=layout, problem=problem, backend="cuda")
    discovered = CudaGemmSpace().from_discovery(FOUND)
    kept, _ = candidate_params(request, "sm_90", "cuda", discovered)
    return kept


@pytest.mark.parametrize(
    "problem",
    [
        GemmProblem(1, 4096, 4096),
        GemmProblem(4, 4608, 3584),
        GemmProblem(64, 3584, 18944),
        GemmProblem(2048, 4608, 3584),
    ],
)
def test_the_vendor_default_comes_first_then_the_families(problem: GemmProblem) -> None:
    kept = _ordered(problem)
    vendor_default = CudaGemmSpace().from_discovery(FOUND)[0]
    assert kept[0] == vendor_default  # heuristic #0: in every budget
    head = kept[:DEFAULT_MAX_VARIANTS]
    libraries = [p["library"] for p in head]
    families = [p["family"] for p in head]
    assert libraries.count("cublaslt") == 2
    if problem.m == 1:  # the skinny kernel streams W at the copy rate there
        assert families[1:7] == ["skinny"] * 6
        assert "swapab" not in families[:7]
    elif problem.m <= 16:  # the swap-AB head right after the vendor default
        assert families[1:7] == ["swapab"] * 6
        assert ("skinny" in families[7:13]) == (problem.m <= 4)
    else:  # measured: swap-AB ran at 0.46-0.65x cuBLAS at m = 64: behind every algorithm
        assert libraries[1:4] == ["cutlass"] * 3
        if "tunehub" in libraries:
            assert libraries.index("tunehub") > max(
                i for i, lib in enumerate(libraries) if lib == "cublaslt"
            )
    assert ("cutlass" in libraries) == (problem.m > 16)


def test_rrr_has_no_skinny_but_keeps_the_vendor_default() -> None:
    kept = _ordered(GemmProblem(4, 4096, 4096), layout="rrr")
    assert kept[0]["library"] == "cublaslt"
    assert not any(p["library"] == "tunehub" for p in kept)


SWAPAB_CONSTANTS = {
    "m_tile": "kMTile",
    "w_tiles": "kWTiles",
    "warps": "kWarps",
    "slices": "kSlices",
    "splits": "kSplits",
    "unroll": "kUnroll",
}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_every_swapab_variant_renders(dtype: str) -> None:
    space = CudaGemmSpace()
    swapab = [p for p in space.enumerate(dtype, "rcr", "sm_90") if p["family"] == "swapab"]
    assert {p["m_tile"] for p in swapab} == {8, 16, 32, 64}
    variants = [_render(p, dtype) for p in swapab]
    assert len({v.id for v in variants}) == len({v.name for v in variants}) == len(swapab)
    mma = "f32.f16.f16.f32" if dtype == "f16" else "f32.bf16.bf16.f32"
    for v in variants:
        assert v.params["library"] == "tunehub"
        assert v.name.startswith(f"gemm_{dtype}_rcr_swapab_m{v.params['m_tile']}_")
        assert f'#define TUNEHUB_MMA_AB "{mma[4:-4]}"' in v.source
        assert "mma.sync.aligned.m16n8k16.row.col.f32." in v.source
        assert "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}" in v.source  # Jinja left it alone
        for key, constant in SWAPAB_CONSTANTS.items():
            assert f"constexpr int {constant} = {v.params[key]};" in v.source, (v.name, key)
        assert "{{" not in v.source and "{% " not in v.source


def test_swapab_prune() -> None:
    space = CudaGemmSpace()
    p = _family("swapab", m_tile=16, w_tiles=1, warps=4, slices=4, splits=1, unroll=4)
    assert space.prune(p, GemmProblem(16, 4096, 4096), "f16", "rcr") is None
    assert space.prune(p, GemmProblem(9, 4099, 3592), "f16", "rcr") is None  # odd n, k % 32
    assert "m=65" in (space.prune(p, GemmProblem(65, 4096, 4096), "f16", "rcr") or "")
    assert "rcr" in (space.prune(p, GemmProblem(16, 4096, 4096), "f16", "rrr") or "")
    assert "multiple of 8" in (space.prune(p, GemmProblem(16, 4096, 4100), "f16", "rcr") or "")
    # W is streamed once: only the smallest m tile that holds every row of A
    assert "m_tile 16" in (space.prune(p, GemmProblem(8, 4096, 4096), "f16", "rcr") or "")
    assert "m_tile 16" in (space.prune(p, GemmProblem(17, 4096, 4096), "f16", "rcr") or "")
    # 4 slices of 4 chunks of 32: k = 512 is the shortest K it cuts
    assert space.prune(p, GemmProblem(16, 4096, 512), "f16", "rcr") is None
    assert "cut 4 ways" in (space.prune(p, GemmProblem(16, 4096, 480), "f16", "rcr") or "")
    one = _family("swapab", m_tile=8)
    assert space.prune(one, GemmProblem(1, 4096, 4096), "f16", "rcr") is None  # runs at m = 1


@pytest.mark.parametrize(
    ("problem", "head"),
    [
        # deep K parts and few rows of W: 8 chunks in flight, 8 warps
        (GemmProblem(16, 3584, 18944), "gemm_f16_rcr_swapab_m16_t1_w8_u8_s4"),
        (GemmProblem(4, 4096, 4096), "gemm_f16_rcr_swapab_m8_t1_w8_u8_s4"),
        # 8-chunk groups would pad 28 chunks a slice to 32: 4 chunks, 4 warps
        (GemmProblem(4, 4608, 3584), "gemm_f16_rcr_swapab_m8_t1_w4_u4_s4"),
        # many rows of W: 4 chunks, 4 warps
        (GemmProblem(16, 28672, 4096), "gemm_f16_rcr_swapab_m16_t1_w4_u4_s4"),
        # m_tile 64: two W tiles share each load of A
        (GemmProblem(64, 28672, 4096), "gemm_f16_rcr_swapab_m64_t2_w4_u2_s4"),
    ],
)
def test_swapab_order_puts_the_measured_winner_first(problem: GemmProblem, head: str) -> None:
    space = CudaGemmSpace()
    kept = [
        p
        for p in space.enumerate("f16", "rcr", "sm_90")
        if p["family"] == "swapab" and space.prune(p, problem, "f16", "rcr") is None
    ]
    ordered = space.order(kept, problem, "f16", "rcr")
    assert space.name(ordered[0], "f16", "rcr") == head
    assert sorted(map(str, ordered)) == sorted(map(str, kept))  # a permutation


def test_swapab_is_in_the_sm80_class_space_too() -> None:
    space = CudaGemmSpace()
    for arch in ("sm_80", "sm_86", "sm_89"):
        families = {p["family"] for p in space.enumerate("bf16", "rcr", arch)}
        assert {"sm80", "skinny", "swapab"} <= families
    assert space.template_for(_family("swapab")) == "cuda/gemm_swapab.cu.j2"


def test_without_discovery_the_space_still_has_candidates() -> None:
    request = TuneRequest(
        op="gemm", dtype="bf16", layout="rcr", problem=GemmProblem(4, 4096, 4096), backend="cuda"
    )
    kept, _ = candidate_params(request, "sm_90", "cuda")
    assert kept[0]["library"] == "tunehub"
    assert {p["library"] for p in kept} == {"tunehub", "cutlass"}


class _FakeHarnessBackend:
    """CudaBackend.discover with the build and the harness replaced (no nvcc, no GPU)."""

    def __init__(self, tmp_path, answer) -> None:
        from tuner.backends.cuda import CudaBackend
        from tuner.types import CompileResult, EngineConfig

        self.backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path)), nvcc="nvcc")
        self.backend._identity = "nvcc test"
        self.sent: list[dict] = []

        def build(variants):
            return {v.id: CompileResult(v.id, True, "/x/kernel.so", 0.0, True) for v in variants}

        def request(payload, timeout_s):
            self.sent.append(payload)
            if isinstance(answer, Exception):
                raise answer
            return answer

        self.backend.build = build  # type: ignore[method-assign]
        self.backend.request = request  # type: ignore[method-assign]


def _gemm_request() -> TuneRequest:
    return TuneRequest(
        op="gemm", dtype="f16", layout="rcr", problem=GemmProblem(4, 4608, 3584), backend="cuda"
    )


def test_backend_discovery_asks_the_harness_and_returns_params(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tuner.backends.cuda.cublas_paths", lambda: None)
    fake = _FakeHarnessBackend(tmp_path, {"algos": FOUND})
    found = fake.backend.discover(_gemm_request(), "sm_90")
    assert found == CudaGemmSpace().from_discovery(FOUND)
    (sent,) = fake.sent
    assert sent["cmd"] == "discover" and sent["problem"] == {"m": 4, "n": 4608, "k": 3584}
    assert sent["requested"] == lt.REQUESTED_ALGOS
    assert fake.backend.last_discovery == FOUND


def test_a_failed_discovery_leaves_the_other_families(tmp_path, monkeypatch) -> None:
    from tuner.backends.cuda_process import HarnessTimeout

    monkeypatch.setattr("tuner.backends.cuda.cublas_paths", lambda: None)
    for answer in ({"outcome": "runtime_error", "log": "status -7"}, HarnessTimeout("hung")):
        assert (
            _FakeHarnessBackend(tmp_path, answer).backend.discover(_gemm_request(), "sm_90") == []
        )
    reduce = TuneRequest(
        op="reduce", dtype="f16", layout="row", problem=ReduceProblem(8, 64), backend="cuda"
    )
    assert _FakeHarnessBackend(tmp_path, {"algos": FOUND}).backend.discover(reduce, "sm_90") == []


def test_discovered_params_are_checked_by_form_not_by_enumeration() -> None:
    """What the service asks of an uploaded cuBLASLt measurement (enumerate cannot list it)."""
    space = CudaGemmSpace()
    found = space.from_discovery(FOUND)[1]
    assert space.discovered_reason(found, "f16", "rcr", "sm_90") is None
    assert "splitk" in (
        space.discovered_reason({**found, "splitk": 0}, "f16", "rcr", "sm_90") or ""
    )
    skinny = _skinny(m_tile=1)
    assert "enumerate" in (space.discovered_reason(skinny, "f16", "rcr", "sm_90") or "")
    with pytest.raises(InvalidRequestError):
        space.discovered_reason(found, "f32", "rcr", "sm_90")
    assert load_space("reduce", "cuda").discovered_reason({}, "f16", "row", "sm_90") is not None
