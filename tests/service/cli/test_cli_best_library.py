"""`tunehub best` on a GEMM shape names the library that won (cutlass, cublaslt, tunehub)."""

from __future__ import annotations

import datetime as dt

from service.cli.output import best_answer_lines
from service.schemas.artifacts import ArtifactRef
from service.schemas.common import DeviceOut, ToolchainOut
from service.schemas.configs import BestConfigOut

LT = {"library": "cublaslt", "family": "cublaslt", "algo": 66, "tile": 18, "stages": 35,
      "splitk": 1, "reduction": 0, "swizzle": 0, "custom": 0, "inner_shape": 0,
      "cluster_shape": 2}  # fmt: skip


def _answer(params: dict) -> BestConfigOut:
    problem = {"m": 1, "n": 4096, "k": 4096}
    return BestConfigOut(
        op="gemm",
        dtype="f16",
        layout="rcr",
        problem=problem,
        tuned_problem=problem,
        exact=True,
        distance=0.0,
        variant_id="ab" * 32,
        variant_name="gemm_f16_rcr_lt_a66_t18_s35_k1_r0_w0_c0_i0_cl2",
        params=params,
        median_us=9.5,
        p20_us=9.4,
        p80_us=9.6,
        throughput=3.5,
        throughput_unit="TFLOP/s",
        device=DeviceOut(backend="cuda", name="NVIDIA H200", arch="sm_90"),
        toolchain=ToolchainOut(compiler="nvcc 13.0", template_version="x"),
        measured_at=dt.datetime(2026, 12, 4, tzinfo=dt.UTC),
    )


def test_best_names_the_library_and_every_attribute() -> None:
    lines = best_answer_lines(_answer(LT))
    assert "  library     [bold]cublaslt[/bold]" in lines
    params = next(line for line in lines if line.startswith("  params"))
    for key, value in LT.items():
        assert f"'{key}': {value!r}" in params


def test_best_without_a_library_keeps_its_lines() -> None:
    lines = best_answer_lines(_answer({"pack": 4}))
    assert not any("library" in line for line in lines)


def test_best_names_a_cudnn_engine_config() -> None:
    params = {"library": "cudnn", "family": "cudnn", "engine": 62, "k2": 5, "k27": 2, "k28": 4}
    lines = best_answer_lines(_answer(params))
    assert "  library     [bold]cudnn[/bold]" in lines
    line = next(line for line in lines if line.startswith("  params"))
    assert "'engine': 62" in line and "'k27': 2" in line


def test_best_names_its_artifact_or_says_there_is_none() -> None:
    assert "  artifact    none uploaded yet" in best_answer_lines(_answer(LT))
    sha = "cd" * 32
    ref = ArtifactRef(
        sha256=sha, size=4096, variant_id="ab" * 32, arch="sm_90", toolchain="nvcc 13.0|tpl=x",
        backend="cuda", url=f"/v1/artifacts/{sha}",
    )  # fmt: skip
    lines = best_answer_lines(_answer(LT).model_copy(update={"artifact": ref}))
    assert f"  artifact    /v1/artifacts/{sha} (4096 bytes, tunehub-1)" in lines
