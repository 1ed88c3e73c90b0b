"""CUDA artifacts with the local nvcc (no GPU): the variant's own kernel.so from the compile cache
is its artifact, and its record names the rendered source, the flags, the headers and libraries
a rebuild needs. tests/gpu/test_cuda_artifacts.py runs one through its ABI on the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.artifacts import build_artifact, file_sha256, record_problem
from tuner.backends.cuda import CudaBackend
from tuner.backends.cuda_artifact import BUILD_FLAGS, needs_of
from tuner.spaces.cuda_gemm import CudaGemmSpace
from tuner.spaces.cuda_reduce import CudaReduceSpace
from tuner.types import EngineConfig
from tuner.vendor_paths import cublas_paths

pytestmark = pytest.mark.nvcc

REDUCE = {"pack": 8, "strategy": "group", "group": 4, "threads": 256}
LT_ALGO = {"algo": 66, "tile": 18, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 0,
           "custom": 0, "inner_shape": 0, "cluster_shape": 2}  # fmt: skip


def _backend(tmp_path: Path) -> CudaBackend:
    return CudaBackend(EngineConfig(cache_dir=str(tmp_path), compile_workers=2))


def test_a_reduce_artifact_is_its_cached_build(tmp_path: Path) -> None:
    require_toolchain(lambda: None)
    backend = _backend(tmp_path)
    variant = backend.render(CudaReduceSpace(), REDUCE, "f16", "row", "sm_90")
    cached = backend.build([variant])[variant.id]
    built = build_artifact(backend, variant)
    assert built.backend == "cuda" and built.path == cached.artifact
    assert (built.sha256, built.size) == file_sha256(built.path)
    record = built.record
    assert record.source == variant.source and record.variant_source is None
    assert record.flags == variant.flags and record.build_flags == BUILD_FLAGS
    assert record.compiler_name == "nvcc" and record.compiler == backend.compiler_identity()
    assert record.needs == () and record.link == ()
    assert record_problem(record, "cuda") is None


def test_a_cublaslt_artifact_links_the_library_by_soname(tmp_path: Path) -> None:
    paths = require_toolchain(cublas_paths)
    backend = _backend(tmp_path)
    space = CudaGemmSpace()
    variant = backend.render(space, space.from_discovery([LT_ALGO])[0], "bf16", "rrr", "sm_90")
    built = build_artifact(backend, variant)
    assert built.record.needs == ("cublas",)
    assert built.record.link == (paths.lt_library,)
    assert "algo" in variant.params and str(LT_ALGO["algo"]) in built.record.source


def test_needs_name_the_external_headers_of_each_family() -> None:
    space = CudaGemmSpace()
    backend = CudaBackend(EngineConfig(cache_dir="/nonexistent"), nvcc="nvcc")
    backend._identity = "nvcc test"  # rendering only: no compiler is run
    by_family: dict[str, tuple[str, ...]] = {}
    for params in space.enumerate("f16", "rcr", "sm_90"):
        family = str(params.get("family"))
        if family not in by_family:
            by_family[family] = needs_of(
                backend.render(space, params, "f16", "rcr", "sm_90").source
            )
    assert by_family["skinny"] == ()
    assert by_family["sm90"] == ("cutlass",)
    lt = backend.render(space, space.from_discovery([LT_ALGO])[0], "f16", "rcr", "sm_90")
    assert needs_of(lt.source) == ("cublas",)
