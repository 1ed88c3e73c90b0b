"""Real runs of the CUDA backend on a GPU (run on the H200 host).

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_backend.py

``--noconftest``: the GPU host has torch but not the service's dependencies. Each test builds
its kernels with the host's nvcc into a temporary cache, or into ``TUNEHUB_GPU_TEST_CACHE``
when set (a cache precompiled elsewhere with the same nvcc, so that device time is not spent
compiling).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS
from tuner.backends.cuda import CudaBackend
from tuner.problems import ReduceProblem, SoftmaxProblem
from tuner.registry import load_space
from tuner.render import TEMPLATES_DIR
from tuner.types import EngineConfig, Outcome, TuneRequest, Variant

pytestmark = GPU_MARKS

ABI = (TEMPLATES_DIR / "cuda" / "_tunehub_abi.cuh").read_text()


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[CudaBackend]:
    config = EngineConfig(
        cache_dir=os.environ.get("TUNEHUB_GPU_TEST_CACHE") or str(tmp_path / "cache"),
        run_timeout_s=20.0,
        bench_seconds=0.02,
        warmup_seconds=0.01,
    )
    cuda = CudaBackend(config, harness_python=sys.executable)
    yield cuda
    cuda.close()


@pytest.fixture(scope="module")
def rows_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    """One harness for the row-kernel cases below (a harness start costs seconds of device
    time each)."""
    config = EngineConfig(
        cache_dir=os.environ.get("TUNEHUB_GPU_TEST_CACHE")
        or str(tmp_path_factory.mktemp("rows") / "cache"),
        run_timeout_s=20.0,
        bench_seconds=0.02,
        warmup_seconds=0.01,
    )
    cuda = CudaBackend(config, harness_python=sys.executable)
    yield cuda
    cuda.close()


def _request(op: str, dtype: str, dims: dict) -> TuneRequest:
    problem = ReduceProblem(**dims) if op == "reduce" else SoftmaxProblem(**dims)
    return TuneRequest(op=op, dtype=dtype, layout="row", problem=problem, backend="cuda")


def _space_variant(backend: CudaBackend, op: str, dtype: str, params: dict) -> Variant:
    arch = backend.device().arch
    return backend.render(load_space(op, "cuda"), params, dtype, "row", arch)


def _raw_variant(backend: CudaBackend, name: str, body: str) -> Variant:
    """A reduce-ABI kernel with a hand-written launch body (for failure tests)."""
    source = (
        ABI
        + f"""
__global__ void broken(float* y, int64_t m) {{ {body} }}
TUNEHUB_EXPORT int tunehub_can_run(const int64_t*, int n) {{ return n == 3 ? 0 : 1; }}
TUNEHUB_EXPORT size_t tunehub_workspace_bytes(const int64_t*, int) {{ return 0; }}
TUNEHUB_EXPORT int tunehub_run(const void* const*, void* out, const int64_t* dims, int,
                               void*, size_t, cudaStream_t stream) {{
  broken<<<1, 32, 0, stream>>>(static_cast<float*>(out), dims[0]);
  return tunehub::launch_status();
}}
TUNEHUB_EXPORT const char* tunehub_describe(void) {{ return "{name}"; }}
"""
    )
    flags = backend.base_flags(backend.device().arch)
    digest = hashlib.sha256((source + "".join(flags)).encode()).hexdigest()
    return Variant("reduce", name, {}, source, flags, digest)


def _build(backend: CudaBackend, variant: Variant) -> str:
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log
    assert built.artifact is not None
    return built.artifact


def test_device_is_described(backend: CudaBackend) -> None:
    device = backend.device()
    assert device.backend == "cuda"
    assert device.arch.startswith("sm_")
    assert device.sm_count > 0 and device.memory_bytes > 0
    assert device.extra.get("l2_bytes", 0) > 0


@pytest.mark.parametrize(
    ("op", "dtype", "dims", "params"),
    [
        (
            "reduce",
            "f16",
            {"m": 4097, "k": 1024, "kind": "sum"},
            {"pack": 8, "strategy": "group", "group": 4, "threads": 256},
        ),
        (
            "reduce",
            "bf16",
            {"m": 333, "k": 520, "kind": "max"},
            {"pack": 4, "strategy": "block", "group": 128, "threads": 128},
        ),
        (
            "softmax",
            "f16",
            {"m": 1001, "k": 2048},
            {"pack": 8, "strategy": "warp", "group": 32, "threads": 128, "mode": "reg"},
        ),
        (
            "softmax",
            "f32",
            {"m": 77, "k": 50000},
            {"pack": 4, "strategy": "block", "group": 512, "threads": 512, "mode": "2pass"},
        ),
    ],
)
def test_variant_verifies_and_is_timed(
    backend: CudaBackend, op: str, dtype: str, dims: dict, params: dict
) -> None:
    variant = _space_variant(backend, op, dtype, params)
    result = backend.run(variant, _build(backend, variant), _request(op, dtype, dims))
    assert result.outcome is Outcome.OK, result.log
    assert result.timing is not None and result.timing.reps >= 10
    assert result.throughput and result.throughput > 0 and result.throughput_unit == "GB/s"
    assert result.provenance["input_sets"] >= 1


def test_refused_shape_is_a_runtime_error(backend: CudaBackend) -> None:
    variant = _space_variant(
        backend,
        "softmax",
        "f16",
        {"pack": 8, "strategy": "warp", "group": 32, "threads": 128, "mode": "reg"},
    )
    # k = 65536 does not fit in registers: the kernel's tunehub_can_run says so
    result = backend.run(
        variant, _build(backend, variant), _request("softmax", "f16", {"m": 4, "k": 65536})
    )
    assert result.outcome is Outcome.RUNTIME_ERROR
    assert "tunehub_can_run" in result.log


def test_untouched_output_is_a_wrong_result(backend: CudaBackend) -> None:
    variant = _raw_variant(backend, "writes_nothing", "")
    result = backend.run(
        variant,
        _build(backend, variant),
        _request("reduce", "f32", {"m": 64, "k": 64, "kind": "sum"}),
    )
    assert result.outcome is Outcome.WRONG_RESULT
    assert "non-finite" in result.log


def test_fault_is_reported_and_the_harness_recovers(backend: CudaBackend) -> None:
    fault = _raw_variant(backend, "faults", "y[(int64_t)1 << 40] = 1.0f;")
    request = _request("reduce", "f32", {"m": 64, "k": 64, "kind": "sum"})
    result = backend.run(fault, _build(backend, fault), request)
    assert result.outcome is Outcome.RUNTIME_ERROR
    good = _space_variant(
        backend, "reduce", "f32", {"pack": 4, "strategy": "warp", "group": 32, "threads": 128}
    )
    assert backend.run(good, _build(backend, good), request).outcome is Outcome.OK


def test_hang_times_out_and_the_harness_recovers(tmp_path: Path) -> None:
    config = EngineConfig(
        cache_dir=os.environ.get("TUNEHUB_GPU_TEST_CACHE") or str(tmp_path / "cache"),
        run_timeout_s=4.0,
        bench_seconds=0.02,
        warmup_seconds=0.01,
    )
    backend = CudaBackend(config, harness_python=sys.executable)
    try:
        # spins 10 s of wall time (bounded, so a kill that waits for the kernel still ends)
        hang = _raw_variant(
            backend,
            "hangs",
            """
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do { __nanosleep(1000); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); }
  while (now - start < 10000000000ULL);
  y[threadIdx.x] = 0.0f;""",
        )
        request = _request("reduce", "f32", {"m": 32, "k": 32, "kind": "sum"})
        good = _space_variant(
            backend, "reduce", "f32", {"pack": 1, "strategy": "group", "group": 2, "threads": 128}
        )
        good_artifact = _build(backend, good)
        assert backend.run(hang, _build(backend, hang), request).outcome is Outcome.TIMEOUT
        assert backend.run(good, good_artifact, request).outcome is Outcome.OK
    finally:
        backend.close()


#: split rows (a cluster of CTAs per row, sm_90): odd and misaligned rows, a row longer than
#: one CTA's registers or shared memory, and rows so short that some CTAs hold no pack; then the
#: streamed and pipelined single-CTA modes
SPLIT_ROW_CASES = [
    (
        "softmax",
        {"m": 3, "k": 151937},
        {"pack": 8, "strategy": "cluster", "group": 8, "threads": 512, "mode": "reg"},
    ),
    (
        "softmax",
        {"m": 67, "k": 50257},
        {"pack": 8, "strategy": "cluster", "group": 4, "threads": 256, "mode": "reg"},
    ),
    (
        "softmax",
        {"m": 5, "k": 21},
        {"pack": 8, "strategy": "cluster", "group": 8, "threads": 128, "mode": "reg"},
    ),
    (
        "reduce",
        {"m": 3, "k": 128257, "kind": "sum"},
        {"pack": 8, "strategy": "cluster", "group": 8, "threads": 256},
    ),
    (
        "reduce",
        {"m": 9, "k": 1009, "kind": "max"},
        {"pack": 4, "strategy": "cluster", "group": 2, "threads": 128},
    ),
    (
        "reduce",
        {"m": 4, "k": 21, "kind": "mean"},
        {"pack": 8, "strategy": "cluster", "group": 8, "threads": 128},
    ),
    # short rows streamed (persistent grid, next row prefetched; more rows than groups), and
    # rows in two pipelined shared-memory buffers (more rows than resident blocks)
    (
        "softmax",
        {"m": 70001, "k": 1009},
        {"pack": 8, "strategy": "group", "group": 16, "threads": 256, "mode": "stream"},
    ),
    (
        "softmax",
        {"m": 1031, "k": 32003},
        {"pack": 8, "strategy": "block", "group": 512, "threads": 512, "mode": "pipe"},
    ),
]


@pytest.mark.parametrize(
    ("op", "dims", "params"),
    [
        # odd k: every row after the first starts off the vector boundary (head + body + tail)
        (
            "reduce",
            {"m": 37, "k": 50257, "kind": "sum"},
            {"pack": 8, "strategy": "block", "group": 256, "threads": 256},
        ),
        (
            "reduce",
            {"m": 301, "k": 1009, "kind": "max"},
            {"pack": 8, "strategy": "group", "group": 4, "threads": 128},
        ),
        (
            "softmax",
            {"m": 129, "k": 1009},
            {"pack": 8, "strategy": "warp", "group": 32, "threads": 128, "mode": "reg"},
        ),
        (
            "softmax",
            {"m": 19, "k": 50257},
            {"pack": 8, "strategy": "block", "group": 1024, "threads": 1024, "mode": "smem"},
        ),
        (
            "softmax",
            {"m": 5, "k": 151937},
            {"pack": 4, "strategy": "block", "group": 512, "threads": 512, "mode": "2pass"},
        ),
        (
            "softmax",
            {"m": 3, "k": 5},  # shorter than one pack: head and tail only
            {"pack": 8, "strategy": "group", "group": 2, "threads": 128, "mode": "reg"},
        ),
        *SPLIT_ROW_CASES,
    ],
)
def test_any_k_vector_variants_verify(
    rows_backend: CudaBackend, op: str, dims: dict, params: dict
) -> None:
    variant = _space_variant(rows_backend, op, "f16", params)
    result = rows_backend.run(variant, _build(rows_backend, variant), _request(op, "f16", dims))
    assert result.outcome is Outcome.OK, result.log
