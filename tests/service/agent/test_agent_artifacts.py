"""The worker agent's artifact step (service.agent.artifacts) against a scripted client and a fake
backend: after the final upload the winner's artifact goes up with its record; a stored best
without one that this lease verified goes up too; one named already is not built again; a
failed build or upload is logged and never fails the task."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from service.client import ApiError
from service.schemas.artifacts import ArtifactRef, ArtifactUploadOut, VariantBuildIn
from service.schemas.configs import BestConfigOut, ConfigQuery
from service.schemas.jobs import WinnerSummary
from service.schemas.worker import ResultsIn, ResultsOut
from tests.service.agent.test_worker import FakeBackend, ScriptedClient, lease, make_agent
from tuner.errors import ToolchainError
from tuner.types import BuildRecord, EngineConfig, Variant


class ArtifactBackend(FakeBackend):
    """FakeBackend whose artifacts are small files (or a ToolchainError)."""

    def __init__(self, config: EngineConfig, folder: Path, fail: bool = False) -> None:
        super().__init__(config)
        self.folder = folder
        self.fail = fail
        self.built: list[str] = []

    def artifact(self, variant: Variant) -> tuple[str, BuildRecord]:
        self.built.append(variant.id)
        if self.fail:
            raise ToolchainError("g++ exploded")
        path = self.folder / f"{variant.id}.so"
        path.write_bytes(variant.id.encode())
        record = BuildRecord(
            variant_id=variant.id,
            name=variant.name,
            op=variant.op,
            source=variant.source,
            flags=variant.flags,
            build_flags=("-shared", "-fPIC"),
            compiler="fake-cc 1.0",
            compiler_name="fake-cc",
            template_version="tpl123",
            variant_source=variant.source,
        )
        return str(path), record


class ArtifactClient(ScriptedClient):
    """Answers the final upload with the fastest variant as the winner, the best lookup with
    ``stored_best(winner, measured)``, and records artifact uploads."""

    def __init__(self, stored_best: Any = None, fail_upload: bool = False, **kwargs: Any):
        super().__init__([lease()], **kwargs)
        self.stored_best = stored_best
        self.fail_upload = fail_upload
        self.measured: dict[str, dict[str, Any]] = {}
        self.winner: str | None = None
        self.queries: list[ConfigQuery] = []
        self.artifacts: list[tuple[str, VariantBuildIn, bytes]] = []

    def upload_results(self, lease_id: str, results: ResultsIn) -> ResultsOut:
        super().upload_results(lease_id, results)
        for m in results.measurements:
            self.measured[m.variant_id] = m.model_dump()
        if not results.final:
            return ResultsOut(stored=len(results.measurements))
        fastest = min(self.measured.values(), key=lambda m: m["median_us"])
        self.winner = fastest["variant_id"]
        summary = WinnerSummary.model_validate({**fastest, "variant_name": fastest["variant_name"]})
        return ResultsOut(stored=len(results.measurements), winner=summary, task_status="done")

    def best_config(self, query: ConfigQuery) -> BestConfigOut:
        self.queries.append(query)
        if self.stored_best is None:
            raise ApiError(404, "not tuned yet", "GET", "/v1/configs/best")
        return _best(*self.stored_best(self.winner, self.measured))

    def upload_artifact(self, lease_id: str, build: VariantBuildIn, path: str) -> ArtifactUploadOut:
        if self.fail_upload:
            raise ApiError(413, "artifact over the limit", "PUT", "/v1/leases/x/artifacts/y")
        data = Path(path).read_bytes()
        self.artifacts.append((lease_id, build, data))
        return ArtifactUploadOut(artifact=_ref(build.variant_id), stored=True, detail="stored")


def _ref(variant_id: str) -> ArtifactRef:
    return ArtifactRef(
        sha256="a" * 64, size=1, variant_id=variant_id, arch="x86_64-fake",
        toolchain="fake-cc 1.0|tpl=tpl123", backend="cpu", url="/v1/artifacts/" + "a" * 64,
    )  # fmt: skip


def _best(variant_id: str, with_artifact: bool) -> BestConfigOut:
    return BestConfigOut.model_validate(
        {
            "op": "reduce", "dtype": "f32", "layout": "row", "problem": {}, "tuned_problem": {},
            "exact": True, "distance": 0.0, "variant_id": variant_id, "variant_name": "v",
            "params": {}, "median_us": 1.0, "p20_us": 1.0, "p80_us": 1.0, "throughput": None,
            "throughput_unit": "", "device": {"backend": "cpu"}, "toolchain": {},
            "measured_at": datetime.now(UTC),
            "artifact": _ref(variant_id).model_dump() if with_artifact else None,
        }
    )  # fmt: skip


def _agent(client: ArtifactClient, tmp_path: Path, **kwargs: Any) -> Any:
    config = EngineConfig(cache_dir=str(tmp_path), compile_workers=2)
    backend = ArtifactBackend(config, tmp_path, fail=kwargs.pop("fail_build", False))
    agent, _ = make_agent(client, backend, **kwargs)
    return agent, backend


def test_the_winners_artifact_goes_up_after_the_final_upload(tmp_path: Path) -> None:
    client = ArtifactClient()
    agent, backend = _agent(client, tmp_path)
    assert agent.run_once() is True
    assert backend.built == [client.winner]
    [(lease_id, build, data)] = client.artifacts
    assert lease_id == "L1" and build.variant_id == client.winner
    assert data == str(client.winner).encode() and build.compiler_name == "fake-cc"
    assert client.uploads[-1]["final"] is True  # the task's answer went first
    query = client.queries[0]
    assert (
        query.device == "cpu:Fake CPU:x86_64-fake:4" and query.toolchain == "fake-cc 1.0|tpl=tpl123"
    )


def test_a_stored_best_without_an_artifact_goes_up_too(tmp_path: Path) -> None:
    def incumbent(winner: str, measured: dict[str, Any]) -> tuple[str, bool]:
        return next(v for v in measured if v != winner), False  # another verified variant

    client = ArtifactClient(stored_best=incumbent)
    agent, backend = _agent(client, tmp_path)
    assert agent.run_once() is True
    uploaded = [build.variant_id for _, build, _ in client.artifacts]
    assert uploaded[0] == client.winner and len(uploaded) == 2 and len(set(uploaded)) == 2


def test_an_artifact_the_best_answer_names_is_not_built_again(tmp_path: Path) -> None:
    client = ArtifactClient(stored_best=lambda winner, _measured: (winner, True))
    agent, backend = _agent(client, tmp_path)
    assert agent.run_once() is True
    assert backend.built == [] and client.artifacts == []


@pytest.mark.parametrize("failure", ["fail_build", "fail_upload"])
def test_a_failed_build_or_upload_is_logged_and_never_fails_the_task(
    tmp_path: Path, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = ArtifactClient(fail_upload=failure == "fail_upload")
    agent, backend = _agent(client, tmp_path, fail_build=failure == "fail_build")
    with caplog.at_level(logging.WARNING, logger="service.agent.artifacts"):
        assert agent.run_once() is True
    assert backend.built == [client.winner]
    assert client.uploads[-1]["final"] is True and client.uploads[-1].get("error") is None
    assert [u["final"] for u in client.uploads].count(True) == 1  # no second (failure) upload
    assert "no artifact for" in caplog.text
    assert ("g++ exploded" if failure == "fail_build" else "HTTP 413") in caplog.text
    assert agent.run_once() is False  # the worker goes on


def test_artifacts_can_be_turned_off(tmp_path: Path) -> None:
    client = ArtifactClient()
    agent, backend = _agent(client, tmp_path, upload_artifacts=False)
    assert agent.run_once() is True
    assert backend.built == [] and client.queries == [] and client.artifacts == []
