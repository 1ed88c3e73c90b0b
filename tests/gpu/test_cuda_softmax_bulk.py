"""The bulk-copy softmax family on a real sm_90 GPU, each case verified by the harness against
torch.softmax in float32 (output poisoned first; no timing is asserted):

    TUNEHUB_GPU_TEST_CACHE=$PWD/.cache/tunehub \
        python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_softmax_bulk.py

- a cluster per row ("bulk": 2-16 CTAs, 16 a non-portable cluster size) on few long rows
  (M = 1-8, K = 128256-256001), odd and aligned, spread one CTA per SM where they are no more
  CTAs than SMs, and on many rows;
- the persistent grid with two buffers per CTA ("bulkp") on a vocabulary row (K = 50257, odd:
  a scalar head and tail per row) over thousands of rows, so that every cluster walks many rows
  and the double buffer turns over;
- rows shorter than a cluster (ranks that copy nothing), each dtype.

Build the variants beforehand into the carried cache (no GPU needed) with
``python -c "from tests.gpu.test_cuda_softmax_bulk import build_all; build_all('.cache/tunehub')"``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.backends.cuda import CudaBackend
from tuner.problems import SoftmaxProblem
from tuner.spaces.cuda_softmax import CudaSoftmaxSpace
from tuner.types import EngineConfig, Outcome, TuneRequest, Variant

pytestmark = GPU_MARKS

SPACE = CudaSoftmaxSpace()
_PACK = {"f16": 8, "bf16": 8, "f32": 4}


def _p(dtype: str, mode: str, ctas: int, threads: int) -> dict[str, Any]:
    return {
        "pack": _PACK[dtype],
        "strategy": "cluster",
        "group": ctas,
        "threads": threads,
        "mode": mode,
    }


#: (dtype, dims, params)
CASES: list[tuple[str, dict[str, int], dict[str, Any]]] = [
    # many vocabulary rows: the persistent grid walks them, double-buffered
    ("f16", {"m": 5341, "k": 50257}, _p("f16", "bulkp", 1, 512)),
    ("f16", {"m": 5341, "k": 50257}, _p("f16", "bulkp", 2, 256)),
    ("bf16", {"m": 2003, "k": 50257}, _p("bf16", "bulkp", 1, 256)),
    ("f32", {"m": 1001, "k": 50257}, _p("f32", "bulkp", 2, 512)),
    ("f32", {"m": 3000, "k": 8192}, _p("f32", "bulkp", 1, 256)),
    ("f16", {"m": 67, "k": 50257}, _p("f16", "bulkp", 2, 512)),
    # a cluster per row: few long rows, aligned and odd (with no more CTAs than SMs each CTA
    # takes over half an SM's shared memory; the same variant at 64 rows first, so that the
    # library's opt-in has to grow between launches)
    ("f16", {"m": 64, "k": 256000}, _p("f16", "bulk", 16, 512)),
    ("f16", {"m": 4, "k": 256000}, _p("f16", "bulk", 16, 512)),
    ("f16", {"m": 2, "k": 255992}, _p("f16", "bulk", 16, 512)),
    ("f16", {"m": 4, "k": 256000}, _p("f16", "bulk", 8, 256)),
    ("f16", {"m": 4, "k": 256000}, _p("f16", "bulk", 4, 256)),
    ("f16", {"m": 4, "k": 256001}, _p("f16", "bulk", 16, 256)),
    ("bf16", {"m": 1, "k": 128256}, _p("bf16", "bulk", 8, 512)),
    ("bf16", {"m": 8, "k": 128257}, _p("bf16", "bulk", 16, 512)),
    ("f32", {"m": 4, "k": 256000}, _p("f32", "bulk", 16, 256)),
    ("f32", {"m": 3, "k": 99991}, _p("f32", "bulk", 8, 256)),
    # a cluster per row over many rows
    ("f16", {"m": 1766, "k": 151936}, _p("f16", "bulk", 4, 512)),
    ("f16", {"m": 2001, "k": 4096}, _p("f16", "bulk", 2, 256)),
    ("f16", {"m": 997, "k": 50257}, _p("f16", "bulk", 2, 512)),
    # rows shorter than the cluster: ranks with no packs, edges only
    ("f16", {"m": 5, "k": 21}, _p("f16", "bulk", 16, 256)),
    ("f32", {"m": 7, "k": 3}, _p("f32", "bulkp", 2, 256)),
]


def _variant(backend: CudaBackend, dtype: str, params: dict, arch: str) -> Variant:
    return backend.render(SPACE, params, dtype, "row", arch)


def build_all(cache_dir: str, arch: str = "sm_90") -> None:
    """Build every case's variant into ``cache_dir`` (no GPU: the carried compile cache)."""
    backend = CudaBackend(EngineConfig(cache_dir=cache_dir, compile_timeout_s=900))
    variants = {}
    for dtype, _dims, params in CASES:
        variant = _variant(backend, dtype, params, arch)
        variants[variant.id] = variant
    results = backend.build(list(variants.values()))
    failed = [v.name for v in variants.values() if not results[v.id].ok]
    if failed:
        raise RuntimeError(f"builds failed: {failed}")


def _case_id(dtype: str, dims: dict, params: dict) -> str:
    mapping = f"c{params['group']}_t{params['threads']}_{params['mode']}"
    return f"{dtype}-{dims['m']}x{dims['k']}-{mapping}"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    cache = os.environ.get("TUNEHUB_GPU_TEST_CACHE") or str(tmp_path_factory.mktemp("cache"))
    yield from module_cuda_backend(cache)


@pytest.mark.parametrize(("dtype", "dims", "params"), CASES, ids=[_case_id(*c) for c in CASES])
def test_softmax_bulk_verify(backend: CudaBackend, dtype: str, dims: dict, params: dict) -> None:
    arch = backend.device().arch
    if not arch.startswith("sm_") or int(arch[3:]) < 90:
        pytest.skip(f"the bulk-copy family needs sm_90 (this device: {arch})")
    variant = _variant(backend, dtype, params, arch)
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact, built.log[-2000:]
    request = TuneRequest(
        op="softmax", dtype=dtype, layout="row", problem=SoftmaxProblem(**dims), backend="cuda"
    )
    result = backend.run(variant, built.artifact, request)
    assert result.outcome is Outcome.OK, result.log
