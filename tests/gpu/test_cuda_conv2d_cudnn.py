"""cuDNN conv2d engine configs on a real GPU: discovered, built, verified against the float32
reference and timed like any other variant (run on the H200 host).

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_conv2d_cudnn.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.backends.cuda import CudaBackend
from tuner.problems import Conv2dProblem
from tuner.registry import load_space
from tuner.types import Outcome, TuneRequest

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    yield from module_cuda_backend(str(tmp_path_factory.mktemp("cache")))


@pytest.mark.parametrize(
    ("dtype", "problem"),
    [
        ("f16", Conv2dProblem(8, 28, 28, 128, 128, 3, 3, pad=1)),
        ("bf16", Conv2dProblem(1, 56, 56, 64, 128, 3, 3, stride=2, pad=1)),
    ],
)
def test_discovered_cudnn_engine_configs_verify(
    backend: CudaBackend, dtype: str, problem: Conv2dProblem
) -> None:
    request = TuneRequest(op="conv2d", dtype=dtype, layout="nhwc", problem=problem, backend="cuda")
    arch = backend.device().arch
    found = backend.discover(request, arch)
    assert found, "cuDNN's heuristics returned no engine config"
    assert all(p["library"] == "cudnn" for p in found)
    space = load_space("conv2d", "cuda")
    for params in (found[0], found[-1]):  # the vendor default and the last config found
        variant = backend.render(space, params, dtype, "nhwc", arch)
        built = backend.build([variant])[variant.id]
        assert built.ok and built.artifact, built.log[-3000:]
        result = backend.run(variant, built.artifact, request)
        if params is found[0]:  # heuristic #0 must run; a fallback config may not finalize
            assert result.outcome == Outcome.OK, (result.variant_name, result.log)
            assert result.timing is not None and result.timing.median_us > 0
            assert "cudnn engine=" in result.provenance["harness_describe"]
        else:
            assert result.outcome in (Outcome.OK, Outcome.RUNTIME_ERROR), result.log
