"""The softmax variants of issue 22 on a real GPU, each verified against the float32 reference
(run on the H200 host; no timing is asserted):

    TUNEHUB_GPU_TEST_CACHE=$PWD/.cache/tunehub \
        python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_softmax_rows.py

- the aligned instantiations (EDGES = false: k a multiple of the pack, rows Vec-aligned) at
  K = 64, 96, 128 and 1000, in registers and streamed, f16 / bf16 / f32;
- the any-k ones (odd K: a scalar head and tail per row) at K = 4095 and 50257;
- the split row in shared memory (a cluster of CTAs per row, each holding its share), on odd,
  aligned and very short rows (CTAs holding no pack), and few long rows (M = 4, K = 256000);
- the grid split (few rows over every SM in one cooperative launch, a grid-wide barrier between
  the (max, sum) exchange and the writes), which also checks that the launch is captured in
  the harness's CUDA graph (a refused capture fails the run).

Build the variants beforehand into the carried cache (no GPU needed) with
``python -c "from tests.gpu.test_cuda_softmax_rows import build_all; build_all('.cache/tunehub')"``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.backends.cuda import CudaBackend
from tuner.problems import ReduceProblem, SoftmaxProblem
from tuner.registry import load_space
from tuner.types import EngineConfig, Outcome, TuneRequest, Variant

pytestmark = GPU_MARKS


def _p(pack: int, strategy: str, group: int, threads: int, mode: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"pack": pack, "strategy": strategy, "group": group}
    params["threads"] = threads
    if mode:
        params["mode"] = mode
    return params


#: (op, dtype, dims, params)
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    # aligned rows: the plain vector loop
    ("softmax", "f16", {"m": 4099, "k": 64}, _p(8, "group", 4, 128, "reg")),
    ("softmax", "f16", {"m": 4099, "k": 64}, _p(8, "group", 8, 256, "stream")),
    ("softmax", "f16", {"m": 3001, "k": 96}, _p(8, "group", 4, 128, "reg")),
    ("softmax", "bf16", {"m": 3001, "k": 96}, _p(8, "group", 4, 128, "reg")),
    ("softmax", "f32", {"m": 3001, "k": 96}, _p(4, "group", 8, 128, "reg")),
    ("softmax", "f16", {"m": 2049, "k": 128}, _p(8, "group", 8, 128, "reg")),
    ("softmax", "f16", {"m": 2049, "k": 128}, _p(2, "group", 16, 128, "reg")),
    ("softmax", "f16", {"m": 1001, "k": 1000}, _p(8, "warp", 32, 128, "reg")),
    ("softmax", "f16", {"m": 70001, "k": 1000}, _p(8, "warp", 32, 256, "stream")),
    ("reduce", "f16", {"m": 3001, "k": 96, "kind": "sum"}, _p(8, "group", 4, 128, None)),
    ("reduce", "f16", {"m": 1001, "k": 1000, "kind": "max"}, _p(8, "warp", 32, 256, None)),
    # odd K: head, vector body, tail
    ("softmax", "f16", {"m": 301, "k": 4095}, _p(8, "block", 256, 256, "reg")),
    ("softmax", "f16", {"m": 301, "k": 4095}, _p(8, "block", 512, 512, "pipe")),
    ("softmax", "f16", {"m": 67, "k": 50257}, _p(8, "block", 1024, 1024, "smem")),
    # the split row in shared memory: odd, aligned, shorter than the cluster, few long rows
    ("softmax", "f16", {"m": 67, "k": 50257}, _p(8, "cluster", 4, 256, "smem")),
    ("softmax", "f16", {"m": 67, "k": 50257}, _p(8, "cluster", 2, 512, "smem")),
    ("softmax", "bf16", {"m": 33, "k": 50257}, _p(8, "cluster", 8, 256, "smem")),
    ("softmax", "f32", {"m": 33, "k": 50257}, _p(4, "cluster", 2, 512, "smem")),
    ("softmax", "f16", {"m": 33, "k": 4096}, _p(8, "cluster", 2, 256, "smem")),
    ("softmax", "f16", {"m": 5, "k": 21}, _p(8, "cluster", 8, 256, "smem")),
    ("softmax", "f16", {"m": 4, "k": 256000}, _p(8, "cluster", 8, 256, "smem")),
    ("softmax", "f16", {"m": 4, "k": 256000}, _p(8, "cluster", 8, 512, "reg")),
    ("softmax", "f16", {"m": 1766, "k": 151936}, _p(8, "cluster", 4, 512, "smem")),
    # the grid split (a cooperative launch over every SM): few long rows, odd and aligned
    ("softmax", "f16", {"m": 4, "k": 256000}, _p(8, "grid", 256, 256, "reg")),
    ("softmax", "f16", {"m": 4, "k": 256000}, _p(8, "grid", 512, 512, "reg")),
    ("softmax", "f16", {"m": 1, "k": 128256}, _p(8, "grid", 256, 256, "reg")),
    ("softmax", "f16", {"m": 8, "k": 256001}, _p(8, "grid", 256, 256, "reg")),
    ("softmax", "bf16", {"m": 3, "k": 50257}, _p(8, "grid", 512, 512, "reg")),
    ("softmax", "f32", {"m": 2, "k": 65537}, _p(4, "grid", 256, 256, "reg")),
]


def _variant(backend: CudaBackend, op: str, dtype: str, params: dict, arch: str) -> Variant:
    return backend.render(load_space(op, "cuda"), params, dtype, "row", arch)


def build_all(cache_dir: str, arch: str = "sm_90") -> None:
    """Build every case's variant into ``cache_dir`` (no GPU: the carried compile cache)."""
    backend = CudaBackend(EngineConfig(cache_dir=cache_dir, compile_timeout_s=900))
    variants = {}
    for op, dtype, _dims, params in CASES:
        variant = _variant(backend, op, dtype, params, arch)
        variants[variant.id] = variant
    results = backend.build(list(variants.values()))
    failed = [v.name for v in variants.values() if not results[v.id].ok]
    if failed:
        raise RuntimeError(f"builds failed: {failed}")


def _case_id(op: str, dtype: str, dims: dict, params: dict) -> str:
    mapping = f"{params['strategy']}{params['group']}_t{params['threads']}"
    return (
        f"{op}-{dtype}-{dims['m']}x{dims['k']}-p{params['pack']}_{mapping}_{params.get('mode', '')}"
    )


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    cache = os.environ.get("TUNEHUB_GPU_TEST_CACHE") or str(tmp_path_factory.mktemp("cache"))
    yield from module_cuda_backend(cache)


@pytest.mark.parametrize(
    ("op", "dtype", "dims", "params"),
    CASES,
    ids=[_case_id(*case) for case in CASES],
)
def test_softmax_rows_verify(
    backend: CudaBackend, op: str, dtype: str, dims: dict, params: dict
) -> None:
    variant = _variant(backend, op, dtype, params, backend.device().arch)
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact, built.log[-2000:]
    problem = ReduceProblem(**dims) if op == "reduce" else SoftmaxProblem(**dims)
    request = TuneRequest(op=op, dtype=dtype, layout="row", problem=problem, backend="cuda")
    result = backend.run(variant, built.artifact, request)
    assert result.outcome is Outcome.OK, result.log
