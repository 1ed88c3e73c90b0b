"""The PyTorch ops' own view of the machine, checked against tuner's: the device key a worker
registers, the header packages a source build needs; and the source build itself (g++ on the
ABI test fixture, through the ``source`` load policy)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import service.integrations.torch as tunehub_torch  # noqa: E402
from service.integrations import _torch_build  # noqa: E402
from service.integrations._torch_build import BuildError, build_variant, needed_build  # noqa: E402
from service.integrations._torch_device import cpu_device_key, isa_level  # noqa: E402
from tests.service.integrations.torch_helpers import FIXTURE_SOURCE, FakeArtifactClient  # noqa: E402
from tuner.backends import cpu_host  # noqa: E402
from tuner.backends.cpu import CpuBackend  # noqa: E402
from tuner.types import EngineConfig  # noqa: E402

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@needs_gxx
def test_cpu_device_key_is_the_cpu_backends(tmp_path: Path) -> None:
    device = CpuBackend(EngineConfig(cache_dir=str(tmp_path))).device()
    assert cpu_device_key() == f"cpu:{device.name}:{device.arch}:{device.sm_count}"


@pytest.mark.parametrize(
    ("machine", "flags"),
    [
        ("x86_64", ["avx512f", "avx2", "sse4_2"]),
        ("x86_64", ["avx2", "fma", "sse2"]),
        ("x86_64", ["sse2"]),
        ("x86_64", []),
        ("AMD64", ["avx2"]),
        ("aarch64", ["asimd", "sve"]),
        ("", []),
    ],
)
def test_isa_level_follows_tuner(machine: str, flags: list[str]) -> None:
    assert isa_level(machine, flags) == cpu_host.isa_level(machine, flags)


def test_header_packages_are_found_where_tuner_finds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.cutlass_paths import cutlass_include_dirs
    from tuner.errors import ToolchainError
    from tuner.vendor_paths import cublas_paths, cudnn_paths

    try:
        expected = cutlass_include_dirs()
    except ToolchainError:
        with pytest.raises(BuildError, match="nvidia-cutlass"):
            needed_build(["cutlass"])
    else:
        assert needed_build(["cutlass"]).include_dirs == expected
    for need, paths in (("cublas", cublas_paths), ("cudnn", cudnn_paths)):
        try:
            found = paths()
        except ToolchainError:
            with pytest.raises(BuildError, match=need):
                needed_build([need])
        else:
            assert needed_build([need]).include_dirs == (found.include,)
            assert needed_build([need]).lib_dirs == (found.lib,)
    monkeypatch.setattr(_torch_build, "_package_dirs", lambda package: [])
    with pytest.raises(BuildError, match="pip install nvidia-cutlass"):
        needed_build(["cutlass"])
    with pytest.raises(BuildError, match="cannot provide"):
        needed_build(["mystery"])


@dataclass
class FixtureBuildRecord:
    """Test double of VariantBuildOut: the ABI fixture's source as a variant's."""

    op: str = "SOFTMAX"
    variant_id: str = "fixture-softmax"
    flags: list[str] = field(default_factory=lambda: ["-O1", "-std=c++17"])
    build_flags: list[str] = field(default_factory=lambda: ["-shared", "-fPIC"])
    compiler_name: str = "g++"
    compiler: str = "g++ (test)"
    needs: list[str] = field(default_factory=list)
    link: list[str] = field(default_factory=list)
    extra: str = ""

    @property
    def source(self) -> str:
        return f"#define FIXTURE_{self.op}\n{self.extra}" + FIXTURE_SOURCE.read_text()


@needs_gxx
def test_build_variant_builds_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    record = FixtureBuildRecord()
    path, built = build_variant(record, tmp_path)
    assert built and path.is_file() and path.name == "kernel.so"
    # the record's compiler is not this machine's: built anyway, and said
    assert "it was measured with g++ (test)" in caplog.text
    assert build_variant(record, tmp_path) == (path, False)
    assert not list(tmp_path.glob(".build-*"))  # no staging folder left behind

    broken = FixtureBuildRecord(extra="this is not C++;\n", variant_id="broken")
    with pytest.raises(BuildError, match=r"g\+\+ failed \(exit 1\)"):
        build_variant(broken, tmp_path)
    with pytest.raises(BuildError, match="unknown compiler"):
        build_variant(FixtureBuildRecord(compiler_name="/bin/sh"), tmp_path / "other")


def test_missing_compiler_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildError, match="nvcc is not on PATH"):
        build_variant(FixtureBuildRecord(compiler_name="nvcc"), tmp_path / "builds")


class BuildingClient(FakeArtifactClient):
    """The client test double, with build records of the fixture's variants."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, FixtureBuildRecord] = {}
        self.builds_asked = 0

    def variant_build(self, variant_id: str) -> FixtureBuildRecord:
        self.builds_asked += 1
        return self.records[variant_id]


@pytest.fixture
def building_client(tmp_path: Path) -> Iterator[BuildingClient]:
    fake = BuildingClient()
    tunehub_torch.configure(client=fake, cache_dir=tmp_path / "cache", load="source")
    yield fake
    tunehub_torch.reset(configuration=True)


@needs_gxx
def test_source_policy_builds_the_winner(building_client: BuildingClient, tmp_path: Path) -> None:
    from tests.service.integrations.torch_helpers import build_fixture

    library = build_fixture(tmp_path, "SOFTMAX")  # the answer's artifact, never fetched here
    answer = building_client.serve("softmax", "row", {"m": 4, "k": 16}, cpu_device_key(), library)
    building_client.records[answer.variant_id] = FixtureBuildRecord()
    x = torch.randn(4, 16)
    with torch.inference_mode():
        torch.testing.assert_close(tunehub_torch.softmax(x), torch.softmax(x, -1))
        tunehub_torch.reset()  # a later process: the build is reused, the record not asked
        torch.testing.assert_close(tunehub_torch.softmax(x), torch.softmax(x, -1))
    assert building_client.fetches == 0 and building_client.builds_asked == 1
    shape = tunehub_torch.stats().shapes[0]
    assert shape.source == "on-disk cache" and shape.tunehub_calls == 1
