"""CUDA artifacts on a real GPU: the artifact a worker would upload (a copy named by its sha256,
as a client keeps it) loads with ctypes and runs through the tunehub C ABI on torch tensors, on
torch's current stream, with workspace from torch's allocator; a rebuild from the build record
gives the same answers (run on the H200 host).

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_artifacts.py
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.artifacts import build_artifact, file_sha256
from tuner.backends.cuda import CudaBackend
from tuner.problems import GemmProblem
from tuner.registry import load_space
from tuner.types import BuiltArtifact, TuneRequest

pytestmark = GPU_MARKS
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    yield from module_cuda_backend(str(tmp_path_factory.mktemp("cache")))


def _kept(built: BuiltArtifact, folder: Path) -> Path:
    """The artifact as a client keeps it: ``<sha256>.so``, its digest checked."""
    path = folder / f"{built.sha256}.so"
    shutil.copyfile(built.path, path)
    assert file_sha256(path) == (built.sha256, built.size)
    return path


def _load(path: Path) -> Any:
    lib = ctypes.CDLL(str(path))
    lib.tunehub_can_run.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
    lib.tunehub_workspace_bytes.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
    lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
    lib.tunehub_run.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
    ]  # fmt: skip
    lib.tunehub_describe.restype = ctypes.c_char_p
    return lib


def _run(lib: Any, inputs: list[Any], output: Any, dims: list[int]) -> None:
    c_dims = (ctypes.c_int64 * len(dims))(*dims)
    assert lib.tunehub_can_run(c_dims, len(dims)) == 0
    ws_bytes = int(lib.tunehub_workspace_bytes(c_dims, len(dims)))
    workspace = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
    pointers = (ctypes.c_void_p * len(inputs))(*(t.data_ptr() for t in inputs))
    stream = torch.cuda.current_stream().cuda_stream
    code = lib.tunehub_run(
        pointers, output.data_ptr(), c_dims, len(dims), workspace.data_ptr(), ws_bytes, stream
    )
    assert code == 0
    torch.cuda.current_stream().synchronize()


def test_a_reduce_artifact_runs_and_its_record_rebuilds_it(
    backend: CudaBackend, tmp_path: Path
) -> None:
    arch = backend.device().arch
    params = {"pack": 8, "strategy": "group", "group": 4, "threads": 256}
    variant = backend.render(load_space("reduce", "cuda"), params, "f16", "row", arch)
    built = build_artifact(backend, variant)
    lib = _load(_kept(built, tmp_path))
    assert lib.tunehub_describe().decode().startswith(variant.name)
    x = torch.randn(1000, 4096, device="cuda", dtype=torch.float16)
    y = torch.full((1000,), float("nan"), device="cuda", dtype=torch.float16)
    _run(lib, [x], y, [1000, 4096, 0])
    torch.testing.assert_close(y.float(), x.float().sum(dim=1), rtol=1e-2, atol=1e-1)

    record = built.record
    assert record.needs == () and record.link == ()
    (tmp_path / "kernel.cu").write_text(record.source)
    argv = [record.compiler_name, *record.flags, *record.build_flags, "kernel.cu", "-o", "own.so"]
    subprocess.run(argv, cwd=tmp_path, check=True, timeout=600, capture_output=True)
    again = torch.empty_like(y)
    _run(_load(tmp_path / "own.so"), [x], again, [1000, 4096, 0])
    torch.testing.assert_close(again, y, rtol=0, atol=0)


def test_a_cublaslt_artifact_runs_the_algorithm_it_was_built_for(
    backend: CudaBackend, tmp_path: Path
) -> None:
    arch = backend.device().arch
    m, n, k = 64, 4096, 4096
    request = TuneRequest(
        op="gemm", dtype="f16", layout="rcr", problem=GemmProblem(m, n, k), backend="cuda"
    )
    found = backend.discover(request, arch)
    assert found, "cuBLASLt offered no algorithm"
    variant = backend.render(load_space("gemm", "cuda"), found[0], "f16", "rcr", arch)
    built = build_artifact(backend, variant)
    assert built.record.needs == ("cublas",) and built.record.link
    lib = _load(_kept(built, tmp_path))
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)  # rcr: B stored [n, k]
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    _run(lib, [a, b], c, [m, n, k])
    torch.testing.assert_close(c.float(), (a.float() @ b.float().T), rtol=2e-2, atol=2e-1)
