"""1x1 conv2d layers through cuBLASLt on a real GPU: the GEMM's algorithms discovered after
cuDNN's engine configs, built through the conv2d wrapper, verified against the float32 conv2d
reference and timed like any other variant; and the harness's ``fixed_output`` run that
bench/vs_vendor_conv.py uses (run on the H200 host).

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_conv2d_cublaslt.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.backends.cuda import CudaBackend
from tuner.problems import Conv2dProblem
from tuner.registry import load_space
from tuner.types import Outcome, TuneRequest, Variant

pytestmark = GPU_MARKS

#: ConvNeXt-T s1.pwconv1 at batch 8; ResNet-50 l3.conv1 at batch 1; odd channels and rows
PROBLEMS = [
    ("f16", Conv2dProblem(8, 56, 56, 96, 384, 1, 1)),
    ("bf16", Conv2dProblem(1, 14, 14, 1024, 256, 1, 1)),
    ("f16", Conv2dProblem(3, 7, 9, 40, 24, 1, 1)),
]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    yield from module_cuda_backend(str(tmp_path_factory.mktemp("cache")))


def _variant(backend: CudaBackend, params: dict, dtype: str, arch: str) -> Variant:
    return backend.render(load_space("conv2d", "cuda"), params, dtype, "nhwc", arch)


@pytest.mark.parametrize(("dtype", "problem"), PROBLEMS)
def test_discovered_cublaslt_algorithms_of_a_1x1_layer_verify(
    backend: CudaBackend, dtype: str, problem: Conv2dProblem
) -> None:
    request = TuneRequest(op="conv2d", dtype=dtype, layout="nhwc", problem=problem, backend="cuda")
    arch = backend.device().arch
    found = backend.discover(request, arch)
    libraries = [p["library"] for p in found]
    assert "cublaslt" in libraries, "cuBLASLt's heuristic returned no algorithm"
    first_lt = libraries.index("cublaslt")
    assert all(lib == "cudnn" for lib in libraries[:first_lt])  # cuDNN's default stays first
    algos = [p for p in found if p["library"] == "cublaslt"][:3]
    variants = [_variant(backend, params, dtype, arch) for params in algos]
    builds = backend.build(variants)
    for index, variant in enumerate(variants):
        built = builds[variant.id]
        assert built.ok and built.artifact, built.log[-3000:]
        result = backend.run(variant, built.artifact, request)
        if index == 0:  # the heuristic's #0 must run and verify
            assert result.outcome == Outcome.OK, (result.variant_name, result.log)
            assert result.timing is not None and result.timing.median_us > 0
            assert "cublaslt algo=" in result.provenance["harness_describe"]
        else:  # a later one may be refused (workspace, check), never wrong
            assert result.outcome in (Outcome.OK, Outcome.RUNTIME_ERROR), result.log


def test_a_tuning_job_of_a_1x1_layer_tries_cudnn_then_cublaslt(backend: CudaBackend) -> None:
    from tuner.engine import tune
    from tuner.types import Budget

    problem = Conv2dProblem(1, 56, 56, 64, 256, 1, 1)
    request = TuneRequest(
        op="conv2d",
        dtype="f16",
        layout="nhwc",
        problem=problem,
        backend="cuda",
        budget=Budget(max_variants=6),
    )
    result = tune(request, backend, backend.config)
    libraries = [r.params.get("library") for r in result.results]
    assert libraries[0] == "cudnn" and "cublaslt" in libraries, libraries
    assert result.winner is not None and result.winner.ok


def test_fixed_output_run_writes_output_set_0_only(backend: CudaBackend) -> None:
    """The bench's control: every launch writes output set 0; the other sets stay poisoned."""
    import torch

    from tuner.backends.cuda_harness import Harness, probe

    dtype, problem = PROBLEMS[0]
    request = TuneRequest(op="conv2d", dtype=dtype, layout="nhwc", problem=problem, backend="cuda")
    arch = backend.device().arch
    params = next(p for p in backend.discover(request, arch) if p["library"] == "cublaslt")
    variant = _variant(backend, params, dtype, arch)
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact, built.log[-3000:]
    harness = Harness(probe())
    req = {
        "cmd": "run",
        "artifact": built.artifact,
        "op": "conv2d",
        "dtype": dtype,
        "layout": "nhwc",
        "problem": problem.dims(),
        "seed": 0,
        "warmup_s": 0.01,
        "bench_s": 0.02,
        "abort_us": None,
    }
    answer = harness.run({**req, "fixed_output": True})
    assert answer["outcome"] == "ok", answer["log"]
    assert answer["provenance"]["fixed_output"] is True
    outputs = harness.workload.outputs
    assert len(outputs) > 1
    assert bool(torch.isfinite(outputs[0].float()).all())
    assert not bool(torch.isfinite(outputs[-1].float()).any())  # still the poison
    rotated = harness.run(req)
    assert rotated["outcome"] == "ok" and rotated["provenance"]["fixed_output"] is False
    assert bool(torch.isfinite(outputs[-1].float()).all())
