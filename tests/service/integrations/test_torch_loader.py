"""The ctypes loader of the tunehub ABI against real compiled code: the test fixture library
(tests/service/integrations/torch_fixtures/abi_fixture.cpp, built here with g++)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from service.integrations._torch_loader import (  # noqa: E402
    LoadError,
    file_sha256,
    int64_array,
    load_library,
    reason_text,
)
from tests.service.integrations.torch_helpers import build_fixture  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("abi-fixtures")


def run(library, inputs, output, dims, workspace=None, workspace_bytes=0):  # type: ignore[no-untyped-def]
    import ctypes

    pointers = (ctypes.c_void_p * len(inputs))(*[t.data_ptr() for t in inputs])
    return library.run(
        pointers, output.data_ptr(), int64_array(dims), len(dims), workspace, workspace_bytes, None
    )


def test_loads_and_calls_every_abi_function(fixtures: Path) -> None:
    library = load_library(build_fixture(fixtures, "GEMM_RCR", k_multiple=4, workspace=64))
    assert library.describe() == "fixture gemm"
    assert library.can_run([3, 5, 8]) == 0
    assert library.can_run([3, 5, 6]) == 2  # k not a multiple of 4
    assert reason_text(library.can_run([3, 5, 6])) == "misaligned (2)"
    assert library.can_run([3, 5]) == 1  # wrong number of dims
    assert library.workspace_bytes([3, 5, 8]) == 64

    a, b = torch.randn(3, 8), torch.randn(5, 8)
    out = torch.full((3, 5), float("nan"))
    workspace = torch.empty(64, dtype=torch.uint8)
    assert run(library, (a, b), out, [3, 5, 8], workspace.data_ptr(), 64) == 0
    torch.testing.assert_close(out, a @ b.T)
    assert bool((workspace == 0x5A).all())  # the kernel wrote the workspace it was given
    # no workspace where one is needed: the kernel says so instead of writing through null
    assert run(library, (a, b), out, [3, 5, 8]) == 6


def test_one_library_per_content(fixtures: Path, tmp_path: Path) -> None:
    path = build_fixture(fixtures, "SOFTMAX")
    copy = tmp_path / "copy.so"
    shutil.copyfile(path, copy)
    first = load_library(path)
    assert load_library(copy) is first
    assert load_library(copy, file_sha256(path)) is first
    assert first.sha256 == file_sha256(copy)


def test_wrong_sha256_is_refused_before_loading(fixtures: Path, tmp_path: Path) -> None:
    path = tmp_path / "tampered.so"
    shutil.copyfile(build_fixture(fixtures, "SUM", workspace=8), path)
    expected = file_sha256(path)
    with path.open("ab") as handle:
        handle.write(b"\0extra")
    with pytest.raises(LoadError, match="refused, not loaded"):
        load_library(path, expected)
    from service.integrations import _torch_loader

    assert file_sha256(path) not in _torch_loader._LIBRARIES


def test_a_library_without_the_abi_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "other.cpp"
    source.write_text('extern "C" int something_else(void) { return 1; }\n')
    output = tmp_path / "other.so"
    subprocess.run(
        ["g++", "-shared", "-fPIC", str(source), "-o", str(output)],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    with pytest.raises(LoadError, match="does not export the tunehub ABI"):
        load_library(output)
    with pytest.raises(LoadError, match="cannot read"):
        load_library(tmp_path / "missing.so")
    (tmp_path / "garbage.so").write_bytes(b"not an ELF file")
    with pytest.raises(LoadError, match="cannot load"):
        load_library(tmp_path / "garbage.so")
