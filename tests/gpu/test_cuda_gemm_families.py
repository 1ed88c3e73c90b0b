"""cuBLASLt, skinny and swap-AB GEMM variants on a real GPU: discovered, built, verified and
timed like any other variant (run on the H200 host).

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_gemm_families.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.backends.cuda import CudaBackend
from tuner.engine import tune
from tuner.problems import GemmProblem
from tuner.registry import load_space
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces._cublaslt_extras import SOURCE_ENUMERATED, SOURCE_HEURISTIC
from tuner.types import Budget, Outcome, TuneRequest

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    yield from module_cuda_backend(str(tmp_path_factory.mktemp("cache")))


def _request(dtype: str, layout: str, m: int, n: int, k: int, **kw) -> TuneRequest:
    return TuneRequest(
        op="gemm", dtype=dtype, layout=layout, problem=GemmProblem(m, n, k), backend="cuda", **kw
    )


def _run(backend: CudaBackend, request: TuneRequest, params: dict):
    arch = backend.device().arch
    variant = backend.render(
        load_space("gemm", "cuda"), params, request.dtype, request.layout, arch
    )
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact, built.log[-3000:]
    return backend.run(variant, built.artifact, request)


@pytest.mark.parametrize(
    ("dtype", "layout", "dims"),
    [("f16", "rcr", (64, 4096, 4096)), ("bf16", "rrr", (1000, 1000, 1000))],
)
def test_discovered_cublaslt_algorithms_verify(
    backend: CudaBackend, dtype: str, layout: str, dims: tuple[int, int, int]
) -> None:
    request = _request(dtype, layout, *dims)
    found = backend.discover(request, backend.device().arch)
    assert found, "cublasLtMatmulAlgoGetHeuristic returned no algorithm"
    assert all(p["library"] == "cublaslt" for p in found)
    picks = [d for d in backend.last_discovery if d.get("source") == SOURCE_HEURISTIC]
    assert 1 <= len(picks) <= len(found)
    # the vendor default and the heuristic's last (the enumerated extras follow it)
    for params in (found[0], found[len(picks) - 1]):
        result = _run(backend, request, params)
        assert result.outcome == Outcome.OK, (result.variant_name, result.log)
        assert result.timing is not None and result.timing.median_us > 0
        assert "cublaslt algo=" in result.provenance["harness_describe"]


def _enumerated_sample(backend: CudaBackend, found: list[dict]) -> list[dict]:
    """A few of ``found`` that only the enumeration found: the best ranked, the first split-K
    one, the first of an algorithm id the heuristic did not pick."""

    def key(item: dict) -> tuple:
        return tuple(item[k] for k in lt.ATTRIBUTES)

    answer = backend.last_discovery
    heuristic = {key(d) for d in answer if d.get("source", SOURCE_HEURISTIC) == SOURCE_HEURISTIC}
    enumerated = {key(d) for d in answer if d.get("source") == SOURCE_ENUMERATED}
    extras = [p for p in found if key(p) in enumerated and key(p) not in heuristic]
    picked_ids = {k[0] for k in heuristic}
    sample = extras[:2]
    for wanted in (
        lambda p: p["splitk"] > 1,
        lambda p: p["algo"] not in picked_ids,
    ):
        sample += [p for p in extras if wanted(p) and p not in sample][:1]
    return sample


@pytest.mark.parametrize(
    ("dtype", "layout", "dims"),
    [("f16", "rcr", (64, 4096, 4096)), ("bf16", "rcr", (2048, 4608, 3584))],
)
def test_enumerated_cublaslt_algorithms_verify(
    backend: CudaBackend, dtype: str, layout: str, dims: tuple[int, int, int]
) -> None:
    """Algorithms beyond the heuristic (cublasLtMatmulAlgoGetIds, the picks' knobs varied) come
    after the heuristic's, each passed by cublasLtMatmulAlgoCheck, and compute the reference."""
    request = _request(dtype, layout, *dims)
    found = backend.discover(request, backend.device().arch)
    sources = [d.get("source") for d in backend.last_discovery]
    heuristic_count = sources.count(SOURCE_HEURISTIC)
    assert heuristic_count >= 1 and SOURCE_ENUMERATED in sources, sources[:5]
    assert sources[:heuristic_count] == [SOURCE_HEURISTIC] * heuristic_count
    assert len(found) <= heuristic_count + lt.EXTRA_ALGOS
    sample = _enumerated_sample(backend, found)
    assert len(sample) >= 2, "the enumeration added fewer than two algorithms"
    for params in sample:
        result = _run(backend, request, params)
        assert result.outcome == Outcome.OK, (result.variant_name, result.log)
        assert result.timing is not None and result.timing.median_us > 0


@pytest.mark.parametrize(
    ("dtype", "dims", "overrides"),
    [
        ("f16", (1, 4096, 4096), {"m_tile": 1, "splits": 1, "slices": 1}),
        ("bf16", (3, 3584, 18944), {"m_tile": 4, "splits": 2, "slices": 4}),
        ("f16", (1, 4608, 3584), {"m_tile": 1, "slices": 8, "unroll": 8}),
        ("f16", (64, 4608, 3584), {"m_tile": 16, "unroll": 2}),
    ],
)
def test_skinny_variants_verify(
    backend: CudaBackend, dtype: str, dims: tuple[int, int, int], overrides: dict
) -> None:
    space = load_space("gemm", "cuda")
    params = next(
        p
        for p in space.enumerate(dtype, "rcr", backend.device().arch)
        if p["family"] == "skinny" and all(p[k] == v for k, v in overrides.items())
    )
    result = _run(backend, _request(dtype, "rcr", *dims), params)
    assert result.outcome == Outcome.OK, (result.variant_name, result.log)


@pytest.mark.parametrize(
    ("dtype", "dims", "overrides"),
    [
        # n not a multiple of 16 (W rows clamped), k not a multiple of 32 (the tail chunk)
        ("f16", (1, 4099, 3592), {"m_tile": 8, "w_tiles": 1, "slices": 1, "splits": 1}),
        ("bf16", (3, 4104, 1000), {"m_tile": 8, "slices": 2, "splits": 2, "unroll": 4}),
        ("f16", (4, 4608, 3584), {"m_tile": 8, "w_tiles": 2, "slices": 4, "unroll": 4}),
        ("bf16", (16, 4099, 3592), {"m_tile": 16, "splits": 4, "unroll": 2}),
        ("f16", (40, 1000, 18952), {"m_tile": 64, "w_tiles": 2, "slices": 2, "splits": 1}),
        ("f16", (64, 4104, 4096), {"m_tile": 64, "w_tiles": 1, "unroll": 2, "slices": 1}),
    ],
)
def test_swapab_variants_verify(
    backend: CudaBackend, dtype: str, dims: tuple[int, int, int], overrides: dict
) -> None:
    space = load_space("gemm", "cuda")
    params = next(
        (
            p
            for p in space.enumerate(dtype, "rcr", backend.device().arch)
            if p["family"] == "swapab" and all(p[k] == v for k, v in overrides.items())
        ),
        None,
    )
    assert params is not None, f"no swapab variant with {overrides} in the space"
    request = _request(dtype, "rcr", *dims)
    assert space.prune(params, request.problem, dtype, "rcr") is None
    result = _run(backend, request, params)
    assert result.outcome == Outcome.OK, (result.variant_name, result.log)


def test_a_tuning_job_starts_with_the_vendor_default(backend: CudaBackend) -> None:
    request = _request("f16", "rcr", 4, 4096, 4096, budget=Budget(max_variants=4))
    result = tune(request, backend, backend.config)
    assert result.results[0].params["library"] == "cublaslt"
    assert result.results[0].outcome == Outcome.OK
    assert result.winner is not None and result.winner.params["library"] in ("cublaslt", "tunehub")
