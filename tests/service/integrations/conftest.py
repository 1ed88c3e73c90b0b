"""Fixtures of the PyTorch op tests (test_torch_*.py): a folder for the compiled ABI test
libraries, and the op library configured with an in-memory artifact client (a test double)."""

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
