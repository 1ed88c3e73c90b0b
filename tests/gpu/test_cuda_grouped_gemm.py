"""Grouped GEMM on a real GPU (issue 26 item 2): one variant of each family (the CUTLASS sm90
pointer-array grouped kernel and our decode kernel), built and run through the harness, which
verifies it against per-expert torch matmuls in f32 (``tuner.backends.cuda_workload``) before
any timing counts; and both against ``torch._grouped_mm`` on a skewed batch with an empty
expert, outside the harness. Run on the H200 host:

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_grouped_gemm.py
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.abi import abi_dims
from tuner.backends.cuda import CudaBackend
from tuner.problems import GroupedGemmProblem
from tuner.registry import load_space
from tuner.types import Outcome, TuneRequest

pytestmark = GPU_MARKS

SPACE = load_space("grouped_gemm", "cuda")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    yield from module_cuda_backend(str(tmp_path_factory.mktemp("cache")), compile_timeout_s=600.0)


def _pick(problem: GroupedGemmProblem, dtype: str, family: str, **match: Any) -> dict[str, Any]:
    return next(
        p
        for p in SPACE.enumerate(dtype, "rcr", "sm_90")
        if p["family"] == family
        and all(p.get(k) == v for k, v in match.items())
        and SPACE.prune(p, problem, dtype, "rcr") is None
    )


def _built(backend: CudaBackend, params: dict[str, Any], dtype: str) -> tuple[Any, str]:
    variant = backend.render(SPACE, params, dtype, "rcr", backend.device().arch)
    built = backend.build([variant])[variant.id]
    assert built.ok and built.artifact, built.log[-3000:]
    return variant, str(built.artifact)


CASES = [
    # (family, match, problem, dtype): OLMoE-like decode, Mixtral-like mid bucket
    ("decode", {"tokens_per_pass": 1, "rows": 2, "warps": 4}, (64, 1024, 2048, 8, 8), "bf16"),
    ("decode", {"tokens_per_pass": 4, "rows": 4, "warps": 8}, (8, 4096, 1024, 32, 2), "f16"),
    ("sm90", {"tile_m": 128, "tile_n": 256, "schedule": "coop"}, (8, 4096, 1024, 512, 2), "bf16"),
    (
        "sm90",
        {"tile_m": 64, "tile_n": 128, "schedule": "pingpong"},
        (64, 1024, 2048, 256, 4),
        "f16",
    ),
]


@pytest.mark.parametrize(("family", "match", "dims", "dtype"), CASES)
def test_one_variant_of_each_family_verifies_in_the_harness(
    backend: CudaBackend, family: str, match: dict[str, Any], dims: tuple, dtype: str
) -> None:
    problem = GroupedGemmProblem(*dims)
    request = TuneRequest(
        op="grouped_gemm", dtype=dtype, layout="rcr", problem=problem, backend="cuda"
    )
    variant, artifact = _built(backend, _pick(problem, dtype, family, **match), dtype)
    result = backend.run(variant, artifact, request)
    assert result.outcome is Outcome.OK, (variant.name, result.log[-2000:])
    assert result.timing is not None and result.timing.median_us > 0


@pytest.mark.parametrize(
    ("family", "match"),
    [("decode", {"tokens_per_pass": 2, "rows": 1, "warps": 4}), ("sm90", {"tile_m": 128})],
)
def test_a_real_batch_matches_torch_grouped_mm(
    backend: CudaBackend, family: str, match: dict[str, Any]
) -> None:
    """Any counts up to the bucket's tokens, an empty expert among them, against
    torch._grouped_mm (bf16; offsets are the cumulative counts)."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    counts = [5, 0, 17, 1, 3, 0, 9, 2]
    problem = GroupedGemmProblem(experts=8, n=512, k=256, tokens=sum(counts), skew=4)
    variant, artifact = _built(backend, _pick(problem, "bf16", family, **match), "bf16")
    lib = ctypes.CDLL(artifact)
    lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(problem.tokens, 256, device="cuda", generator=gen).bfloat16()
    w = torch.randn(8, 512, 256, device="cuda", generator=gen).bfloat16()
    d = torch.full((problem.tokens, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
    dims = abi_dims(problem)[:5] + counts
    arr = (ctypes.c_int64 * len(dims))(*dims)
    assert lib.tunehub_can_run(arr, len(dims)) == 0
    space = torch.empty(
        int(lib.tunehub_workspace_bytes(arr, len(dims))) + 1, dtype=torch.uint8, device="cuda"
    )
    inputs = (ctypes.c_void_p * 2)(a.data_ptr(), w.data_ptr())
    stream = torch.cuda.current_stream().cuda_stream
    code = lib.tunehub_run(
        inputs,
        ctypes.c_void_p(d.data_ptr()),
        arr,
        len(dims),
        ctypes.c_void_p(space.data_ptr()),
        ctypes.c_size_t(space.numel()),
        ctypes.c_void_p(stream),
    )
    assert code == 0
    torch.cuda.synchronize()
    rows = sum(counts)
    offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    expected = torch._grouped_mm(a[:rows], w.transpose(-2, -1), offs=offs)
    torch.testing.assert_close(d[:rows].float(), expected.float(), rtol=2e-2, atol=2e-1)
