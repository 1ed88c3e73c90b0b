"""Fixtures of the PyTorch op tests (test_torch_*.py): a folder for the compiled ABI test
libraries, the op library configured with an in-memory artifact client (a test double), and
the test setting that lets CPU fixtures stand in for CUDA-only artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.integrations.torch_helpers import FakeArtifactClient


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where a module's ABI test libraries are built (``torch_helpers.build_fixture``)."""
    return tmp_path_factory.mktemp("abi-fixtures")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[FakeArtifactClient]:
    """The op library answering from ``FakeArtifactClient``, its state reset afterwards."""
    import service.integrations.torch as tunehub_torch  # only the torch op tests ask for this

    fake = FakeArtifactClient()
    tunehub_torch.configure(client=fake, cache_dir=tmp_path / "cache", load="artifact")
    yield fake
    tunehub_torch.reset(configuration=True)


@pytest.fixture
def cpu_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test setting: the CUDA-only ops (scaled_gemm, grouped_gemm) resolve and launch for CPU
    tensors, so a CPU ABI fixture stands in for a CUDA artifact."""
    from service.integrations import _torch_ops  # only the torch op tests ask for this

    monkeypatch.setattr(_torch_ops, "CUDA_ONLY", set())
