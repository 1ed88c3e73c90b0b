"""rms_norm variants on a real GPU (run on the H200 host): every class verified against the
float32 reference on odd and even k, the ABI called directly on torch tensors (misaligned
views, other eps, CUDA graph capture), and a short tuning of a decode shape.

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_cuda_rms_norm.py

Builds go to ``TUNEHUB_GPU_TEST_CACHE`` when set (a cache precompiled with the same nvcc).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS, module_cuda_backend
from tuner.abi import RMS_NORM_EPS, abi_dims
from tuner.backends.cuda import CudaBackend
from tuner.engine import tune
from tuner.problems import RmsNormProblem
from tuner.spaces.cuda_rms_norm import CudaRmsNormSpace
from tuner.types import Budget, Outcome, TuneRequest, Variant

pytestmark = GPU_MARKS

SPACE = CudaRmsNormSpace()
#: one variant per class at the dtype's widest (16-byte) pack, sized so that the register
#: classes hold k = 4096-5120 where their lanes allow it (a group of 8 lanes does not: its
#: tunehub_can_run refuses those rows, as the space's prune says)
CLASSES = [
    {"strategy": "block", "group": 256, "threads": 256, "mode": "reg"},
    {"strategy": "warp", "group": 32, "threads": 128, "mode": "reg"},
    {"strategy": "group", "group": 8, "threads": 128, "mode": "reg"},
    {"strategy": "block", "group": 512, "threads": 512, "mode": "2pass"},
    {"strategy": "warp", "group": 32, "threads": 256, "mode": "2pass"},
]
KS = (4096, 5120, 4095, 96, 128)
MS = (1, 7, 2048)
WIDEST = {"f16": 8, "bf16": 8, "f32": 4}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaBackend]:
    cache = os.environ.get("TUNEHUB_GPU_TEST_CACHE") or str(tmp_path_factory.mktemp("cache"))
    yield from module_cuda_backend(cache)


def _built(backend: CudaBackend, dtype: str, params_list: list[dict]) -> list[tuple[Variant, str]]:
    arch = backend.device().arch
    variants = [backend.render(SPACE, p, dtype, "row", arch) for p in params_list]
    builds = backend.build(variants)
    out = []
    for variant in variants:
        built = builds[variant.id]
        assert built.ok and built.artifact, built.log[-3000:]
        out.append((variant, built.artifact))
    return out


def _fits(params: dict, problem: RmsNormProblem, dtype: str) -> bool:
    reason = SPACE.prune(params, problem, dtype, "row")
    return reason is None or "idle" in reason  # idle lanes are slow, not wrong


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_every_class_verifies_on_odd_and_even_k(backend: CudaBackend, dtype: str) -> None:
    params_list = [{**c, "pack": WIDEST[dtype]} for c in CLASSES]
    built = _built(backend, dtype, params_list)
    failures = []
    for m in MS:
        for k in KS:
            problem = RmsNormProblem(m=m, k=k)
            request = TuneRequest("rms_norm", dtype, "row", problem, backend="cuda")
            for (variant, artifact), params in zip(built, params_list, strict=True):
                result = backend.run(variant, artifact, request)
                if _fits(params, problem, dtype):
                    ok = result.outcome is Outcome.OK and result.throughput_unit == "GB/s"
                else:  # the Python prune and the kernel's tunehub_can_run agree
                    ok = result.outcome is Outcome.RUNTIME_ERROR and (
                        "tunehub_can_run" in result.log
                    )
                if not ok:
                    failures.append((variant.name, m, k, result.outcome, result.log[-300:]))
    assert not failures, failures


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_narrow_packs_verify(backend: CudaBackend, dtype: str) -> None:
    params_list = [
        {"pack": 1, "strategy": "block", "group": 128, "threads": 128, "mode": "reg"},
        {"pack": 2, "strategy": "group", "group": 16, "threads": 256, "mode": "reg"},
        {"pack": 4, "strategy": "block", "group": 1024, "threads": 1024, "mode": "2pass"},
    ]
    built = _built(backend, dtype, params_list)
    for m, k in ((5, 1), (7, 4095), (33, 1000)):
        problem = RmsNormProblem(m=m, k=k)
        request = TuneRequest("rms_norm", dtype, "row", problem, backend="cuda")
        for variant, artifact in built:
            result = backend.run(variant, artifact, request)
            if _fits(variant.params, problem, dtype):
                assert result.outcome is Outcome.OK, (variant.name, m, k, result.log[-500:])
            else:  # a row longer than the variant's registers hold: refused, as pruned
                assert "refused" in result.log, (variant.name, m, k, result.log[-500:])


class _Abi:
    """A built variant loaded in this process and called on torch tensors, as the PyTorch ops
    call it: inputs [x, w], output y, dims [m, k, eps_bits], torch's current stream."""

    def __init__(self, artifact: str) -> None:
        lib = ctypes.CDLL(artifact)
        self.run = lib.tunehub_run
        self.run.restype = ctypes.c_int
        self.run.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]

    def __call__(self, x: Any, w: Any, y: Any, eps: float) -> int:
        import torch

        dims = abi_dims(RmsNormProblem(m=x.shape[0], k=x.shape[1]), eps=eps)
        array = (ctypes.c_int64 * 3)(*dims)
        inputs = (ctypes.c_void_p * 2)(x.data_ptr(), w.data_ptr())
        stream = torch.cuda.current_stream().cuda_stream
        return int(self.run(inputs, y.data_ptr(), array, 3, None, 0, stream))


def _expected(x: Any, w: Any, eps: float) -> Any:
    import torch

    xf, wf = x.float(), w.float()
    eps32 = float(torch.tensor(eps, dtype=torch.float32))
    return wf * (xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps32))


def _offset(torch: Any, shape: tuple[int, ...], dtype: Any, offset: int, scale: float) -> Any:
    """A contiguous tensor of ``shape`` starting ``offset`` elements into its allocation."""
    numel = 1
    for size in shape:
        numel *= size
    buf = torch.empty(numel + offset + 8, device="cuda", dtype=dtype)
    view = buf[offset : offset + numel].view(shape)
    view.copy_((torch.rand(shape, device="cuda") * 2 - 1) * scale)
    return view


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_abi_on_misaligned_views_other_eps_and_in_a_cuda_graph(
    backend: CudaBackend, dtype: str
) -> None:
    import torch

    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    rtol = 2**-10 if dtype == "f16" else 2**-8  # rounded once: half an ulp, and some slack
    params_list = [{**c, "pack": 8} for c in CLASSES]
    built = _built(backend, dtype, params_list)
    torch.manual_seed(0)
    for variant, artifact in built:
        call = _Abi(artifact)
        for m, k, offsets, eps, scale in (
            (7, 4096, (0, 0, 0), RMS_NORM_EPS, 4.0),
            (9, 4095, (1, 3, 0), 1e-5, 4.0),  # x, w and y at other phases: element paths
            (3, 128, (2, 2, 5), 0.5, 1e-2),  # eps larger than the mean square
        ):
            x = _offset(torch, (m, k), torch_dtype, offsets[0], scale)
            w = _offset(torch, (k,), torch_dtype, offsets[1], 4.0)
            y = _offset(torch, (m, k), torch_dtype, offsets[2], 1.0)
            y.fill_(float("nan"))
            code = call(x, w, y, eps)
            if code == 3:  # this class does not hold the row in registers: refused, not run
                continue
            assert code == 0, (variant.name, m, k, code)
            torch.cuda.synchronize()
            torch.testing.assert_close(
                y.float(), _expected(x, w, eps), rtol=rtol, atol=1e-3, msg=variant.name
            )
        # captured in a CUDA graph and replayed on new inputs (no per-launch host state)
        x = _offset(torch, (7, 128), torch_dtype, 0, 4.0)
        w = _offset(torch, (128,), torch_dtype, 0, 4.0)
        y = torch.empty_like(x)
        graph = torch.cuda.CUDAGraph()
        capture = torch.cuda.Stream()
        capture.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(capture):
            graph.capture_begin()
            assert call(x, w, y, RMS_NORM_EPS) == 0
            graph.capture_end()
        torch.cuda.current_stream().wait_stream(capture)
        x.copy_(torch.rand_like(x) * 8 - 4)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(
            y.float(), _expected(x, w, RMS_NORM_EPS), rtol=rtol, atol=1e-3, msg=variant.name
        )


def test_a_decode_tuning_verifies_its_first_candidates(backend: CudaBackend) -> None:
    request = TuneRequest(
        "rms_norm",
        "f16",
        "row",
        RmsNormProblem(m=1, k=4096),
        backend="cuda",
        budget=Budget(max_variants=6),
    )
    result = tune(request, backend, backend.config)
    names = [r.variant_name for r in result.results]
    assert "rms_norm_f16_p8_block_t512_reg" in names  # first in the space's decode order
    assert all(r.outcome in (Outcome.OK, Outcome.ABORTED_SLOW) for r in result.results), [
        (r.variant_name, r.outcome, r.log[-200:]) for r in result.results
    ]
    assert result.winner is not None and result.winner.outcome is Outcome.OK


def test_the_harness_times_torchs_rms_norm_as_the_baseline(backend: CudaBackend) -> None:
    answer = backend.request(
        {
            "cmd": "torch_baseline",
            "op": "rms_norm",
            "dtype": "bf16",
            "layout": "row",
            "problem": {"m": 8, "k": 4096},
            "seed": 0,
        },
        120.0,
    )
    assert answer.get("samples_us") and min(answer["samples_us"]) > 0, answer
