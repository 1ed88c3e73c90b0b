"""Shared pieces of the PyTorch-ops tests: the compiled ABI test fixture and a test double
of the client (answers from a dict, fixture files served as artifacts)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.client import ApiError, Cached, ClientError, ConnectionFailed
from service.schemas.configs import ConfigQuery
from tuner.problems import OPS

FIXTURE_SOURCE = Path(__file__).parent / "torch_fixtures" / "abi_fixture.cpp"
FIXTURE_OPS = (
    "GEMM_RCR",
    "GEMM_RRR",
    "SUM",
    "SOFTMAX",
    "RMS_NORM",
    "CONV2D",
    "SCALED_GEMM",
    "GROUPED_GEMM",
)
#: whether this tunehub's schemas know the rms_norm op (until then it falls back, saying so)
RMS_NORM_KNOWN = "rms_norm" in OPS


def build_fixture(folder: Path, op: str, **macros: int | bool) -> Path:
    """g++ builds the ABI test fixture for ``op`` (one of FIXTURE_OPS) into ``folder``."""
    defines = [f"-DFIXTURE_{op}"]
    for name, value in sorted(macros.items()):
        defines.append(f"-DFIXTURE_{name.upper()}" + ("" if value is True else f"={value}"))
    tag = hashlib.sha256(" ".join(defines).encode()).hexdigest()[:12]
    output = folder / f"fixture-{op.lower()}-{tag}.so"
    if not output.exists():
        compiler = shutil.which("g++")
        assert compiler is not None, "the torch op tests need g++"
        argv = [compiler, "-O1", "-shared", "-fPIC", "-std=c++17", *defines,
                str(FIXTURE_SOURCE), "-o", str(output)]  # fmt: skip
        subprocess.run(argv, check=True, timeout=120, capture_output=True)
    return output


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class FakeArtifactRef:
    """Test double of service.schemas ArtifactRef."""

    sha256: str
    size: int
    variant_id: str
    backend: str = "cpu"
    arch: str = ""
    toolchain: str = ""
    url: str = ""
    abi: str = "tunehub-1"


@dataclass
class FakeAnswer:
    """Test double of BestConfigOut with the fields the ops read."""

    variant_name: str
    variant_id: str
    artifact: FakeArtifactRef | None
    exact: bool = True
    distance: float = 0.0
    tuned_problem: dict[str, Any] = field(default_factory=dict)


def _key(query: ConfigQuery) -> tuple[Any, ...]:
    return (query.op, query.layout, tuple(sorted(query.problem.items())), query.device)


class FakeArtifactClient:
    """Test double of TunehubClient for the ops: ``serve()`` stores an answer whose artifact
    is a fixture file; ``down`` makes the service unreachable (the "disk" cache still
    answers); every call is counted."""

    def __init__(self) -> None:
        self.answers: dict[tuple[Any, ...], FakeAnswer] = {}
        self.disk: dict[tuple[Any, ...], FakeAnswer] = {}
        self.files: dict[str, Path] = {}
        self.down = False
        self.best_calls = 0
        #: every query best() got (its dtype is not part of the answers' key)
        self.asked: list[ConfigQuery] = []
        self.fetches = 0
        self.corrupt = False

    def serve(
        self, op: str, layout: str, problem: dict[str, Any], device: str, library: Path,
        **answer: Any,
    ) -> FakeAnswer:  # fmt: skip
        digest = sha256_of(library)
        name = f"{op}_{library.stem}"
        ref = FakeArtifactRef(digest, library.stat().st_size, f"v-{digest[:16]}")
        self.files[digest] = library
        found = FakeAnswer(name, ref.variant_id, ref, **answer)
        self.answers[(op, layout, tuple(sorted(problem.items())), device)] = found
        return found

    def best(self, query: ConfigQuery) -> Cached[Any]:
        self.best_calls += 1
        self.asked.append(query)
        if self.down:
            raise ConnectionFailed("http://fake", "down")
        found = self.answers.get(_key(query))
        if found is None:
            raise ApiError(404, "not tuned yet")
        self.disk[_key(query)] = found
        return Cached(found, False, None)  # type: ignore[arg-type]

    def best_from_cache(self, query: ConfigQuery) -> Cached[Any] | None:
        found = self.disk.get(_key(query))
        return Cached(found, False, None) if found is not None else None  # type: ignore[arg-type]

    def fetch_artifact(self, ref: FakeArtifactRef, dest_dir: Path) -> Path:
        self.fetches += 1
        target = dest_dir / f"{ref.sha256}.so"
        data = self.files[ref.sha256].read_bytes()
        if self.corrupt:
            data = data + b"tampered"
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise ClientError(f"artifact {ref.sha256[:12]}: sha256 mismatch, refused")
        target.write_bytes(data)
        return target

    def variant_build(self, variant_id: str) -> Any:
        raise ApiError(404, f"no build record for {variant_id}")
