"""CpuBackend: device and toolchain identity, and every failing outcome from a REAL variant."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tuner.cpu_helpers import BROKEN_ROOT, BrokenSpace, quick_config
from tuner.backends.cpu import CpuBackend, harness_dims
from tuner.problems import ReduceProblem, SoftmaxProblem
from tuner.render import render_variant
from tuner.spaces.cpu_reduce import CpuReduceSpace
from tuner.types import Outcome, TuneRequest, Variant


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cpu-cache")


@pytest.fixture()
def backend(cache_dir: Path) -> Iterator[CpuBackend]:
    b = CpuBackend(quick_config(cache_dir, run_timeout_s=2.0))
    yield b
    b.close()


def broken_variant(backend: CpuBackend, mode: str) -> Variant:
    arch = backend.device().arch
    return render_variant(
        BrokenSpace(mode),
        {"mode": mode},
        "f32",
        "row",
        arch,
        backend.base_flags(arch),
        backend.compiler_identity(),
        root=BROKEN_ROOT,
    )


def reduce_request(m: int = 4, k: int = 100, kind: str = "sum") -> TuneRequest:
    return TuneRequest("reduce", "f32", "row", ReduceProblem(m=m, k=k, kind=kind))


def test_device_names_the_host_isa(backend: CpuBackend) -> None:
    device = backend.device()
    assert device.backend == "cpu"
    assert device.name
    assert device.sm_count >= 1
    assert re.fullmatch(r"x86_64-(avx512|avx2|sse)|x86_64|[\w-]+", device.arch)
    assert isinstance(device.extra["flags"], list)
    assert device.key().startswith("cpu:")


def test_compiler_identity_and_toolchain(backend: CpuBackend) -> None:
    identity = backend.compiler_identity()
    assert "g++" in identity and "native=" in identity
    flags = backend.base_flags(backend.device().arch)
    assert flags[:4] == ("-O3", "-march=native", "-std=c++17", "-fno-math-errno")
    toolchain = backend.toolchain(CpuReduceSpace())
    assert toolchain.compiler.startswith("g++ ")
    assert len(toolchain.template_version) == 12


def test_harness_dims_append_the_reduce_kind() -> None:
    assert harness_dims(ReduceProblem(m=3, k=5, kind="max")) == [3, 5, 1]
    assert harness_dims(ReduceProblem(m=3, k=5, kind="mean")) == [3, 5, 2]
    assert harness_dims(SoftmaxProblem(m=3, k=5)) == [3, 5]


def test_compile_error_is_data_and_cached(backend: CpuBackend) -> None:
    variant = broken_variant(backend, "does_not_compile")
    first = backend.build([variant])[variant.id]
    assert not first.ok and first.artifact is None and not first.timed_out
    assert "this_is_not_declared" in first.log
    again = backend.build([variant])[variant.id]
    assert again.cached and not again.ok


def test_crash_is_runtime_error(backend: CpuBackend) -> None:
    variant = broken_variant(backend, "crashes")
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact
    result = backend.run(variant, built.artifact, reduce_request())
    assert result.outcome is Outcome.RUNTIME_ERROR
    assert result.timing is None
    assert "SIGSEGV" in result.log or "signal" in result.log


def test_wrong_answer_discards_timing(backend: CpuBackend) -> None:
    variant = broken_variant(backend, "wrong")
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact
    result = backend.run(variant, built.artifact, reduce_request())
    assert result.outcome is Outcome.WRONG_RESULT
    assert result.timing is None and not result.ok
    assert "expected" in result.log


def test_hang_is_timeout(backend: CpuBackend) -> None:
    variant = broken_variant(backend, "hangs")
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact
    result = backend.run(variant, built.artifact, reduce_request())
    assert result.outcome is Outcome.TIMEOUT
    assert result.timing is None


def test_missing_executable_is_runtime_error(backend: CpuBackend, tmp_path: Path) -> None:
    variant = broken_variant(backend, "wrong")
    result = backend.run(variant, str(tmp_path / "nope"), reduce_request())
    assert result.outcome is Outcome.RUNTIME_ERROR


def test_inputs_are_reused_across_variants(backend: CpuBackend) -> None:
    request = reduce_request(m=2, k=64)
    first = backend._problem_data(request)
    assert backend._problem_data(request) is first
    other = backend._problem_data(reduce_request(m=2, k=65))
    assert other is not first
    assert all(Path(p).exists() for p in first.paths + other.paths)


def test_ok_and_aborted_runs(backend: CpuBackend) -> None:
    space = CpuReduceSpace()
    arch = backend.device().arch
    variant = render_variant(
        space,
        {"pack": 4, "acc": 1, "unroll": 1},
        "f32",
        "row",
        arch,
        backend.base_flags(arch),
        backend.compiler_identity(),
    )
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact
    request = reduce_request(m=16, k=1024)
    ok = backend.run(variant, built.artifact, request)
    assert ok.outcome is Outcome.OK and ok.timing is not None
    assert ok.throughput is not None and ok.throughput > 0 and ok.throughput_unit == "GB/s"
    assert ok.provenance["hostname"] and "loadavg_1m_before" in ok.provenance
    # a threshold below the real time: stops by min reps, once the CI lies above it (after two
    # when a loaded machine makes every sample "far" slower), and keeps its partial time
    aborted = backend.run(
        variant, built.artifact, request, abort_above_us=ok.timing.median_us * 0.6
    )
    assert aborted.outcome is Outcome.ABORTED_SLOW
    assert aborted.timing is not None and 2 <= aborted.timing.reps <= backend.config.min_reps
    # far below any real time: every sample over twice the threshold stops it after two
    far = backend.run(variant, built.artifact, request, abort_above_us=1e-6)
    assert far.outcome is Outcome.ABORTED_SLOW
    assert far.timing is not None and far.timing.reps == 2


def test_a_batch_keeps_every_variant_isolated(tmp_path: Path) -> None:
    """One compiler invocation for the batch; a compile error, a crash and a wrong answer stay
    the outcome of their own variant and a good one in the same batch still runs."""
    backend = CpuBackend(quick_config(tmp_path, compile_workers=1, run_timeout_s=5.0))
    try:
        arch = backend.device().arch
        good = render_variant(
            CpuReduceSpace(),
            {"pack": 4, "acc": 2, "unroll": 1},
            "f32",
            "row",
            arch,
            backend.base_flags(arch),
            backend.compiler_identity(),
        )
        crash, wrong = broken_variant(backend, "crashes"), broken_variant(backend, "wrong")
        builds = backend.build([crash, good, wrong])
        assert all(b.ok and b.artifact for b in builds.values())
        inodes = {Path(b.artifact).stat().st_ino for b in builds.values() if b.artifact}
        assert len(inodes) == 1  # one shared object serves the whole batch
        request = reduce_request(m=8, k=256)
        outcomes = {
            v.name: backend.run(v, builds[v.id].artifact or "", request).outcome
            for v in (crash, good, wrong)
        }
        assert outcomes == {
            crash.name: Outcome.RUNTIME_ERROR,
            good.name: Outcome.OK,
            wrong.name: Outcome.WRONG_RESULT,
        }
        # a variant that does not compile splits its batch: the others still build
        broken = broken_variant(backend, "does_not_compile")
        other = render_variant(
            CpuReduceSpace(),
            {"pack": 2, "acc": 1, "unroll": 1},
            "f32",
            "row",
            arch,
            backend.base_flags(arch),
            backend.compiler_identity(),
        )
        split = backend.build([broken, other])
        assert not split[broken.id].ok and "this_is_not_declared" in split[broken.id].log
        assert split[other.id].ok and not split[other.id].cached
        assert backend.run(other, split[other.id].artifact or "", request).outcome is Outcome.OK
    finally:
        backend.close()


def test_measurement_reports_reps_spread_and_cpu_share(backend: CpuBackend) -> None:
    variant = render_variant(
        CpuReduceSpace(),
        {"pack": 8, "acc": 2, "unroll": 1},
        "f32",
        "row",
        backend.device().arch,
        backend.base_flags(backend.device().arch),
        backend.compiler_identity(),
    )
    built = backend.build([variant])[variant.id]
    assert built.artifact
    result = backend.run(variant, built.artifact, reduce_request(m=64, k=2048))
    assert result.ok and result.timing is not None
    assert result.timing.reps >= backend.config.min_reps
    prov = result.provenance
    # CPU time over wall time, both read where the window ends: a short window on a loaded host
    # still reads a little over 1 (at most 1.15 in 300 runs beside a CPU hog), while CPU time
    # counted past the wall window read 2.75 in a CI run and up to 1.38 in that test
    assert 0.0 < prov["cpu_share"] <= 1.5
    assert prov["median_ci_rel"] >= 0.0 and prov["spread"] == result.timing.spread
    assert result.suspect == (prov["cpu_share"] < backend.config.min_cpu_share)


def test_a_new_window_is_a_new_runner(backend: CpuBackend) -> None:
    variant = render_variant(
        CpuReduceSpace(),
        {"pack": 8, "acc": 2, "unroll": 1},
        "f32",
        "row",
        backend.device().arch,
        backend.base_flags(backend.device().arch),
        backend.compiler_identity(),
    )
    built = backend.build([variant])[variant.id]
    assert built.artifact
    request = reduce_request(m=33, k=1000)
    first = backend.run(variant, built.artifact, request)
    data = backend._problem_data(request)
    assert first.ok and first.provenance["window"] == 0 and data.server is not None
    pid = data.server.pid
    for window in (1, 2, 3):
        backend.new_window(request)
        again = backend.run(variant, built.artifact, request)
        # verified and timed in a runner of its own
        assert again.ok and again.provenance["window"] == window, again.log
        assert data.server is not None and data.server.pid != pid
        pid = data.server.pid
