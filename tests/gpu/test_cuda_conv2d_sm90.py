"""A CUTLASS 3.x sm90 conv2d variant on a real Hopper GPU: built, verified against the float32
reference and timed like any other variant (run on the H200 host).

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_conv2d_sm90.py
"""

from __future__ import annotations

import os
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
    # a cache precompiled elsewhere with the same nvcc saves the ~2 min CUTLASS build
    cache = os.environ.get("TUNEHUB_GPU_TEST_CACHE") or str(tmp_path_factory.mktemp("cache"))
    yield from module_cuda_backend(cache, compile_timeout_s=600.0)


def test_an_sm90_conv_variant_verifies(backend: CudaBackend) -> None:
    arch = backend.device().arch
    if arch != "sm_90":
        pytest.skip(f"the sm90 conv family needs sm_90, not {arch}")
    space = load_space("conv2d", "cuda")
    params = next(
        p
        for p in space.enumerate("f16", "nhwc", arch)
        if p["family"] == "sm90" and (p["tile_m"], p["tile_n"], p["cluster_m"]) == (128, 64, 2)
    )
    for problem in (
        Conv2dProblem(8, 28, 28, 128, 128, 3, 3, pad=1),
        Conv2dProblem(1, 56, 56, 64, 128, 3, 3, stride=2, pad=1),
    ):
        request = TuneRequest(
            op="conv2d", dtype="f16", layout="nhwc", problem=problem, backend="cuda"
        )
        variant = backend.render(space, params, "f16", "nhwc", arch)  # fmt: skip
        built = backend.build([variant])[variant.id]
        assert built.ok and built.artifact, built.log[-3000:]
        result = backend.run(variant, built.artifact, request)
        assert result.outcome == Outcome.OK, (result.variant_name, result.log)
