"""The cuBLASLt FP8 builds of scaled_gemm run without a GPU: the discovery build and a run build
rendered for sm_90, linked against the stand-in libcublasLt of test_cublaslt_discovery_fake.py
(``fakes/fake_cublaslt.cpp``: heuristic picks of algorithm 66 with tiles 24, 23, 18, and 20, 24,
23 under a workspace limit of 2 MiB or less; AlgoCheck refuses split-K 8 and accepts 66
otherwise), and called through ctypes as the harness calls them: the answer merges the rankings
at 32 MiB and at 1 MiB (each first pick, then the rest, distinct), then lists the configurations
enumerated beyond them as the f16 discovery does (tests/tuner/test_cublaslt_discovery_fake.py
covers that enumeration itself), and becomes the space's params, vendor default first; a run
build of the first one plans for a shape and refuses the other output dtype and scaling."""

from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.problems import ScaledGemmProblem
from tuner.render import render_variant
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces._vendor_discovery import Discovery
from tuner.spaces.cuda_scaled_gemm import CudaScaledGemmSpace
from tuner.vendor_paths import cublas_paths

pytestmark = pytest.mark.nvcc

FAKE = Path(__file__).parent / "fakes" / "fake_cublaslt.cpp"
SPACE = CudaScaledGemmSpace()
PROBLEM = ScaledGemmProblem(8, 4096, 4096, "bf16", "block")


#: the run build also calls cublasLtMatmul, which the stand-in lacks: this test's own stub
#: (never called here: without a GPU the test stops at planning)
FAKE_MATMUL = """#include <cublasLt.h>
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*,
    const void*, cublasLtMatrixLayout_t, const void*, cublasLtMatrixLayout_t, const void*,
    const void*, cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,
    const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
"""


def _build(tmp: Path, params: dict, stem: str) -> ctypes.CDLL:
    include = require_toolchain(cublas_paths).include
    stub = tmp / "fake_matmul.cpp"
    stub.write_text(FAKE_MATMUL)
    source = tmp / f"{stem}.cu"
    source.write_text(render_variant(SPACE, params, "e4m3", "rcr", "sm_90", (), "nvcc t").source)
    library = tmp / f"{stem}.so"
    command = ["nvcc", "-std=c++17", "-shared", "-Xcompiler", "-fPIC,-Wall", f"-I{include}",
               str(source), str(FAKE), str(stub), "-o", str(library)]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return ctypes.CDLL(str(library))


def _dims(*values: int) -> tuple[ctypes.Array, int]:
    return (ctypes.c_int64 * len(values))(*values), len(values)


def test_discovery_answer_becomes_params_and_a_run_build_plans(tmp_path: Path) -> None:
    (discovery,) = SPACE.discoveries(PROBLEM)
    lib = _build(tmp_path, discovery.params, "discover")
    fn = lib.tunehub_discover
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_size_t]  # fmt: skip
    buf = ctypes.create_string_buffer(1 << 16)
    dims, n = _dims(PROBLEM.m, PROBLEM.n, PROBLEM.k)
    count = fn(dims, n, 16, buf, len(buf))
    found = json.loads(buf.value.decode())
    assert count == len(found) > 4
    picks, extras = found[:4], found[4:]
    assert [item["tile"] for item in picks] == [24, 20, 23, 18]
    assert [item["workspace_limit"] >> 20 for item in picks] == [32, 1, 32, 32]
    assert all(item["source"] == "heuristic" and item["algo"] == 66 for item in picks)
    assert all(item["source"] == "enumerated" for item in extras)
    keys = {tuple(item[key] for key in lt.ATTRIBUTES) for item in found}
    assert len(keys) == len(found), "an enumerated config repeats one already found"
    # around the vendor default: split-K 2 and 4 (8 is refused), the swizzle flipped
    around = {(e["splitk"], e["swizzle"]) for e in extras if (e["tile"], e["custom"]) == (24, 7)}
    assert {(2, 0), (4, 0), (1, 1)} <= around and not any(e["splitk"] == 8 for e in extras)
    assert fn(dims, n, 16, ctypes.create_string_buffer(64), 64) == -1000  # does not fit
    params = SPACE.from_discovery(found, Discovery(discovery.params, "cublas", 16))
    tried = len(params) // 2
    assert tried == 4 + lt.EXTRA_ALGOS
    assert [p["tile"] for p in params[:4]] == [24, 20, 23, 18]
    assert [p["fast_accum"] for p in params] == [0] * tried + [1] * tried
    assert all(SPACE.prune(p, PROBLEM, "e4m3", "rcr") is None for p in params)
    run = _build(tmp_path, params[0], "run")
    assert run.tunehub_can_run(*_dims(8, 4096, 4096, 0, 1)) == 0
    run.tunehub_workspace_bytes.restype = ctypes.c_size_t
    assert run.tunehub_workspace_bytes(*_dims(8, 4096, 4096, 0, 1)) == 0
    assert run.tunehub_can_run(*_dims(8, 4096, 4096, 1, 1)) == 1  # f16 out: another build
    assert run.tunehub_can_run(*_dims(8, 4096, 4096, 0, 0)) == 1  # per-tensor: another build
    assert run.tunehub_can_run(*_dims(8, 4096, 4104, 0, 1)) == 2  # k % 16
