"""CPU artifacts: one standalone shared object per variant that exports the tunehub C ABI.

Each test builds a real artifact with g++, loads it with ctypes as a client would and checks it
against tuner.reference; the record is checked as the service checks an uploaded one.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.abi_loader import TunehubLibrary
from tests.tuner.cpu_helpers import module_backend
from tuner.artifacts import build_artifact, file_sha256, record_problem
from tuner.backends.cpu import CpuBackend
from tuner.backends.cpu_artifact import BUILD_FLAGS, standalone_source
from tuner.problems import GemmProblem, ReduceProblem, SoftmaxProblem
from tuner.reference import from_storage, make_inputs, reference, tolerance
from tuner.registry import load_space
from tuner.render import TEMPLATES_DIR
from tuner.types import BuiltArtifact, Variant

ABI_CODE = re.compile(r"^\s*(TUNEHUB_[A-Z_]+) = (\d+),", re.MULTILINE)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuBackend]:
    yield from module_backend(tmp_path_factory, "artifact-cache")


def render(backend: CpuBackend, op: str, params: dict, dtype: str = "f32", layout: str = "row"):
    space = load_space(op, "cpu")
    return backend.render(space, params, dtype, layout, backend.device().arch)


@pytest.fixture(scope="module")
def reduce_variant(backend: CpuBackend) -> Variant:
    return render(backend, "reduce", {"pack": 4, "acc": 2, "unroll": 2})


@pytest.fixture(scope="module")
def reduce_artifact(backend: CpuBackend, reduce_variant: Variant) -> BuiltArtifact:
    return build_artifact(backend, reduce_variant)


def test_reason_codes_are_the_cuda_headers(tmp_path: Path) -> None:
    cpu = dict(ABI_CODE.findall((TEMPLATES_DIR / "cpu" / "_tunehub_abi.h").read_text()))
    cuda = dict(ABI_CODE.findall((TEMPLATES_DIR / "cuda" / "_tunehub_abi.cuh").read_text()))
    assert cpu == cuda and len(cpu) == 7


def test_the_artifact_is_a_file_with_its_digest_and_record(
    reduce_artifact: BuiltArtifact, reduce_variant: Variant
) -> None:
    built = reduce_artifact
    assert built.backend == "cpu"
    assert (built.sha256, built.size) == file_sha256(built.path)
    record = built.record
    assert record.variant_id == reduce_variant.id and record.name == reduce_variant.name
    assert record.variant_source == reduce_variant.source
    assert record.flags == reduce_variant.flags and record.build_flags == BUILD_FLAGS
    assert record.compiler_name == "g++" and record.needs == () and record.link == ()
    assert '#include "' not in record.source  # tunehub's own headers are inlined
    assert record_problem(record, "cpu") is None


def test_reduce_through_the_abi_matches_the_reference(reduce_artifact: BuiltArtifact) -> None:
    lib = TunehubLibrary(reduce_artifact.path)
    assert lib.describe() == reduce_artifact.record.name
    rng = np.random.default_rng(7)
    for kind, code in (("sum", 0), ("max", 1), ("mean", 2)):
        problem = ReduceProblem(m=33, k=1000, kind=kind)
        inputs = make_inputs(problem, "f32", "row", rng)
        dims = [33, 1000, code]
        assert lib.can_run(dims) == 0 and lib.workspace_bytes(dims) == 0
        y = np.full(33, np.nan, dtype=np.float32)
        assert lib.run([inputs["x"]], y, dims) == 0
        rtol, atol = tolerance("f32", 1000)
        np.testing.assert_allclose(y, reference(problem, "f32", "row", inputs), rtol, atol)


def test_can_run_refuses_what_the_template_refuses(reduce_artifact: BuiltArtifact) -> None:
    lib = TunehubLibrary(reduce_artifact.path)
    assert lib.can_run([4, 16]) == 1  # a dim missing
    assert lib.can_run([4, -16, 0]) == 1  # a negative dim
    assert lib.can_run([4, 16, 3]) == 3  # th_buffer_bytes: no kind code 3
    assert lib.can_run([4, 0, 0]) == 3  # th_buffer_bytes: k must be >= 1
    y = np.zeros(4, dtype=np.float32)
    x = np.ones((4, 16), dtype=np.float32)
    assert lib.run([x], y, [4, 16, 3]) == 3
    assert not y.any()  # refused: nothing written


def test_softmax_through_the_abi(backend: CpuBackend) -> None:
    variant = render(backend, "softmax", next(iter(load_space("softmax", "cpu").enumerate(
        "f32", "row", backend.device().arch))))  # fmt: skip
    lib = TunehubLibrary(build_artifact(backend, variant).path)
    problem = SoftmaxProblem(m=5, k=300)
    inputs = make_inputs(problem, "f32", "row", np.random.default_rng(3))
    y = np.empty((5, 300), dtype=np.float32)
    assert lib.run([inputs["x"]], y, [5, 300]) == 0
    np.testing.assert_allclose(y, reference(problem, "f32", "row", inputs), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gemm_prepares_again_when_the_dims_change(backend: CpuBackend, dtype: str) -> None:
    space = load_space("gemm", "cpu")
    params = next(iter(space.enumerate(dtype, "rrr", backend.device().arch)))
    variant = render(backend, "gemm", params, dtype, "rrr")
    lib = TunehubLibrary(build_artifact(backend, variant).path)
    rng = np.random.default_rng(5)
    for m, n, k in ((8, 16, 32), (40, 24, 64), (8, 16, 32)):  # larger, then smaller again
        problem = GemmProblem(m=m, n=n, k=k)
        inputs = make_inputs(problem, dtype, "rrr", rng)
        out = np.zeros((m, n), dtype=inputs["a"].dtype)
        assert lib.run([inputs["a"], inputs["b"]], out, [m, n, k]) == 0
        rtol, atol = tolerance(dtype, k)
        expected = reference(problem, dtype, "rrr", inputs)
        np.testing.assert_allclose(from_storage(out, dtype), expected, rtol, atol)


def test_a_second_build_is_a_cache_hit(
    backend: CpuBackend, reduce_variant: Variant, reduce_artifact: BuiltArtifact
) -> None:
    again = build_artifact(backend, reduce_variant)
    assert again.path == reduce_artifact.path and again.sha256 == reduce_artifact.sha256


def test_the_record_rebuilds_the_artifact_with_its_own_flags(
    reduce_artifact: BuiltArtifact, tmp_path: Path
) -> None:
    record = reduce_artifact.record
    (tmp_path / "unit.cpp").write_text(record.source)
    argv = [record.compiler_name, *record.build_flags, *record.flags, "unit.cpp", "-o", "re.so"]
    subprocess.run(argv, cwd=tmp_path, check=True, timeout=120, capture_output=True)
    lib = TunehubLibrary(str(tmp_path / "re.so"))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.zeros(3, dtype=np.float32)
    assert lib.run([x], y, [3, 4, 0]) == 0
    np.testing.assert_allclose(y, x.sum(axis=1))


def test_record_problem_names_what_does_not_add_up(reduce_artifact: BuiltArtifact) -> None:
    record = reduce_artifact.record
    other_flags = dataclasses.replace(record, flags=(*record.flags, "-g"))
    assert "hash to" in (record_problem(other_flags, "cpu") or "")
    assert record.variant_source is not None
    tampered = record.source.replace("return TUNEHUB_OK;", 'system("true"); return 0;', 1)
    assert record_problem(dataclasses.replace(record, source=tampered), "cpu") is not None
    no_wrapped = dataclasses.replace(record, variant_source=None)
    assert record_problem(no_wrapped, "cpu") is not None  # the unit does not hash to the id
    other_version = dataclasses.replace(record, template_version="0123456789ab")
    assert record_problem(other_version, "cpu") is not None  # no longer hashes to the id


def test_standalone_source_is_deterministic(reduce_variant: Variant) -> None:
    one = standalone_source(
        reduce_variant.name, reduce_variant.id, reduce_variant.source, TEMPLATES_DIR / "cpu"
    )
    two = standalone_source(
        reduce_variant.name, reduce_variant.id, reduce_variant.source, TEMPLATES_DIR / "cpu"
    )
    assert one == two and reduce_variant.id in one
