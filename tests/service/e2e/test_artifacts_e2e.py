"""The whole artifact loop over real HTTP, on both databases: a live server, the worker agent
tuning a small CPU reduce with g++, its winner's artifact built and uploaded; then a client
fetches it (sha256 checked), loads it with ctypes and runs it through the tunehub C ABI on numpy
arrays against numpy. A transport that tampers with the bytes (a test double) is refused by the
client before anything is kept."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.agent import WorkerAgent
from service.cli.serve import create_token_in_db, ensure_admin_token
from service.client import ApiError, ArtifactMismatch, TunehubClient
from service.schemas.artifacts import VariantBuildIn
from service.schemas.configs import BestConfigOut, ConfigQuery
from service.schemas.jobs import JobCreate
from service.settings import Settings
from tests.abi_loader import TunehubLibrary
from tests.service.conftest import LiveService
from tuner.types import EngineConfig

PROBLEM = {"m": 64, "k": 1024, "kind": "sum"}


@dataclass
class Tuned:
    url: str
    settings: Settings
    read_token: str
    answer: BestConfigOut


class TamperingTransport(httpx.BaseTransport):
    """TEST DOUBLE: forwards to the real server, but flips one byte of every artifact it
    serves (a corrupted download or a hostile proxy); counts the artifact downloads."""

    def __init__(self, tamper: bool = True) -> None:
        self.inner = httpx.HTTPTransport()
        self.tamper = tamper
        self.downloads = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if not request.url.path.startswith("/v1/artifacts/"):
            return response
        self.downloads += 1
        body = bytearray(response.read())
        if self.tamper and body:
            body[len(body) // 2] ^= 0xFF
        return httpx.Response(response.status_code, headers=response.headers, content=bytes(body))


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifact-compile-cache")


@pytest.fixture
def tuned(settings: Settings, compile_cache: Path) -> Iterator[Tuned]:
    """A live server whose reduce problem a real CPU worker tuned (and shared its artifact)."""
    settings = settings.model_copy(update={"verify_variants": True})
    settings.ensure_dirs()
    admin = ensure_admin_token(settings).read_text().strip()
    worker_token = create_token_in_db(settings.database_url, "artifact-worker", ["worker"])
    read_token = create_token_in_db(settings.database_url, "artifact-reader", ["read"])
    service = LiveService(settings).start()
    try:
        user = TunehubClient(service.url, admin)
        user.submit_job(
            JobCreate.model_validate(
                {
                    "op": "reduce",
                    "dtype": "f32",
                    "problems": [PROBLEM],
                    "device": {"backend": "cpu"},
                    "budget": {"max_variants": 3},
                }
            )
        )
        config = EngineConfig(
            cache_dir=str(compile_cache), compile_workers=2, bench_seconds=0.02,
            warmup_seconds=0.005,
        )  # fmt: skip
        agent = WorkerAgent(TunehubClient(service.url, worker_token), config, ("cpu",))
        assert agent.run_once() is True
        agent.close()
        query = ConfigQuery(op="reduce", dtype="f32", problem=PROBLEM, backend="cpu")
        yield Tuned(service.url, settings, read_token, user.best_config(query))
    finally:
        service.stop()


def test_the_winner_runs_from_its_fetched_artifact(tuned: Tuned, tmp_path: Path) -> None:
    answer = tuned.answer
    ref = answer.artifact
    assert ref is not None, "the worker shared no artifact"
    assert ref.variant_id == answer.variant_id and ref.backend == "cpu"
    assert ref.toolchain == answer.toolchain.key and ref.arch == answer.device.arch
    counting = TamperingTransport(tamper=False)
    reader = TunehubClient(tuned.url, tuned.read_token, transport=counting)
    path = reader.fetch_artifact(ref, tmp_path / "artifacts")
    assert path == tmp_path / "artifacts" / f"{ref.sha256}.so"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ref.sha256
    assert path.stat().st_size == ref.size
    assert reader.fetch_artifact(ref, tmp_path / "artifacts") == path
    assert counting.downloads == 1  # the second call found the checked file

    lib = TunehubLibrary(str(path))
    assert lib.describe() == answer.variant_name
    rng = np.random.default_rng(11)
    for m, k, code, expect in (
        (64, 1024, 0, lambda x: x.sum(axis=1)),
        (7, 333, 1, lambda x: x.max(axis=1)),  # one variant serves every shape and kind
        (5, 64, 2, lambda x: x.mean(axis=1)),
    ):
        x = rng.standard_normal((m, k), dtype=np.float32)
        y = np.full(m, np.nan, dtype=np.float32)
        assert lib.can_run([m, k, code]) == 0
        assert lib.run([x], y, [m, k, code]) == 0
        np.testing.assert_allclose(y, expect(x.astype(np.float64)), rtol=1e-5, atol=1e-4)
    assert lib.can_run([64, 1024]) == 1  # the ABI's bad-dims code: the kind is missing

    # a careful team rebuilds from the record instead: the same kernel, the same answers
    build = reader.variant_build(ref.variant_id)
    assert build.variant_id == ref.variant_id and build.compiler_name == "g++"
    assert build.variant_source is not None and '#include "' not in build.source
    (tmp_path / "unit.cpp").write_text(build.source)
    argv = [build.compiler_name, *build.build_flags, *build.flags, "unit.cpp", "-o", "own.so"]
    subprocess.run(argv, cwd=tmp_path, check=True, timeout=120, capture_output=True)
    own = TunehubLibrary(str(tmp_path / "own.so"))
    x = rng.standard_normal((9, 100), dtype=np.float32)
    mine, theirs = np.empty(9, np.float32), np.empty(9, np.float32)
    assert own.run([x], mine, [9, 100, 0]) == 0 == lib.run([x], theirs, [9, 100, 0])
    np.testing.assert_array_equal(mine, theirs)


def test_a_tampered_download_is_refused_and_nothing_is_kept(tuned: Tuned, tmp_path: Path) -> None:
    ref = tuned.answer.artifact
    assert ref is not None
    reader = TunehubClient(tuned.url, tuned.read_token, transport=TamperingTransport())
    dest = tmp_path / "artifacts"
    dest.mkdir()
    with pytest.raises(ArtifactMismatch) as caught:
        reader.fetch_artifact(ref, dest)
    assert caught.value.expected_sha256 == ref.sha256 and caught.value.sha256 != ref.sha256
    assert list(dest.iterdir()) == []  # no partial file, no temporary file
    # a damaged file already at the destination is fetched again (here: refused again)
    dest.joinpath(f"{ref.sha256}.so").write_bytes(b"damaged")
    with pytest.raises(ArtifactMismatch):
        reader.fetch_artifact(ref, dest)
    assert list(dest.iterdir()) == []
    honest = TunehubClient(tuned.url, tuned.read_token)
    assert honest.fetch_artifact(ref, dest).read_bytes() != b"damaged"


def test_a_read_token_cannot_upload(tuned: Tuned, tmp_path: Path) -> None:
    ref = tuned.answer.artifact
    assert ref is not None
    reader = TunehubClient(tuned.url, tuned.read_token)
    path = reader.fetch_artifact(ref, tmp_path)
    build = reader.variant_build(ref.variant_id)
    record = VariantBuildIn.model_validate(
        build.model_dump(include=set(VariantBuildIn.model_fields))
    )
    with pytest.raises(ApiError) as caught:
        reader.upload_artifact("0" * 32, record, path)
    assert caught.value.status == 403
