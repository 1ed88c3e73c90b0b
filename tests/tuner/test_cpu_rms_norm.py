"""CpuRmsNormSpace: enumeration, pruning, order, rendering; real variants verified against numpy
(odd and even k, every dtype), the kernel's eps read from its dims, and a whole CPU tuning."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import numpy as np
import pytest

from tests.tuner.cpu_helpers import RENDER_FLAGS, module_backend
from tuner.abi import MAX_EPS_BITS, RMS_NORM_EPS, abi_dims, eps_bits
from tuner.backends.cpu import CpuBackend
from tuner.backends.cpu_batch import symbol_prefix
from tuner.engine import tune
from tuner.errors import InvalidRequestError
from tuner.problems import RmsNormProblem, SoftmaxProblem
from tuner.reference import from_storage, make_inputs, reference, rms_norm_reference, verify
from tuner.render import render_variant
from tuner.spaces.cpu_rms_norm import CpuRmsNormSpace
from tuner.types import Budget, Outcome, TuneRequest, Variant

SPACE = CpuRmsNormSpace()
FLAGS = RENDER_FLAGS


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuBackend]:
    yield from module_backend(tmp_path_factory, "rms-norm-cache")


def _built(backend: CpuBackend, dtype: str, params: dict) -> tuple[Variant, str]:
    variant = backend.render(SPACE, params, dtype, "row", backend.device().arch)
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log
    assert built.artifact is not None
    return variant, built.artifact


def test_enumeration_is_stable_unique_and_ordered_widest_first() -> None:
    params = list(SPACE.enumerate("f16", "row", "x86_64-avx2"))
    assert params == list(SPACE.enumerate("f16", "row", "x86_64-avx2"))
    names = [SPACE.name(p, "f16", "row") for p in params]
    assert len(set(names)) == len(names) >= 12
    assert "rms_norm_f16_p8_a4_" not in names and "rms_norm_f16_p8_a4" in names
    ordered = SPACE.order(params, RmsNormProblem(m=4, k=4096), "f16", "row")
    assert ordered[0] == {"pack": 8, "acc": 4} and ordered[-1] == {"pack": 1, "acc": 1}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_every_variant_renders(dtype: str) -> None:
    for params in SPACE.enumerate(dtype, "row", "x86_64-avx2"):
        variant = render_variant(SPACE, params, dtype, "row", "x86_64-avx2", FLAGS, "g++ test")
        assert f"constexpr int P = {params['pack']};" in variant.source
        assert f'{{"{variant.name}", 3, 2}}' in variant.source  # 3 dims, inputs x and w
        assert "{{" not in variant.source


def test_prune_and_invalid_requests() -> None:
    problem = RmsNormProblem(m=2, k=8)
    assert SPACE.prune({"pack": 4, "acc": 2}, problem, "f32", "row") is None
    reason = SPACE.prune({"pack": 8, "acc": 2}, problem, "f32", "row")
    assert reason is not None and "k=8" in reason
    assert SPACE.prune({"pack": 1, "acc": 1}, SoftmaxProblem(m=1, k=1), "f32", "row")
    with pytest.raises(InvalidRequestError) as err:
        list(SPACE.enumerate("int8", "row", "x"))
    assert err.value.field == "dtype"
    with pytest.raises(InvalidRequestError) as err:
        list(SPACE.enumerate("f32", "rcr", "x"))
    assert err.value.field == "layout"


def test_reference_is_hugging_face_rms_norm_in_float32() -> None:
    """The numpy reference against the formula written out in float64."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 77)).astype(np.float32)
    w = rng.standard_normal(77).astype(np.float32)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    eps = float(np.float32(RMS_NORM_EPS))
    expected = w64 * (x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps))
    np.testing.assert_allclose(rms_norm_reference(x, w, RMS_NORM_EPS), expected, rtol=1e-6)
    # eps matters where the row's mean square is small against it
    tiny = np.full((1, 4), 1e-3, dtype=np.float32)
    ones = np.ones(4, dtype=np.float32)
    assert rms_norm_reference(tiny, ones, 1.0)[0, 0] == pytest.approx(1e-3, rel=1e-5)
    assert rms_norm_reference(tiny, ones, 0.0)[0, 0] == pytest.approx(1.0, rel=1e-5)


def test_inputs_are_x_then_w() -> None:
    inputs = make_inputs(RmsNormProblem(m=3, k=5), "bf16", "row", np.random.default_rng(0))
    assert list(inputs) == ["x", "w"]
    assert inputs["x"].shape == (3, 5) and inputs["w"].shape == (5,)
    assert np.all(from_storage(inputs["w"], "bf16") != 0)


@pytest.mark.parametrize(
    ("dtype", "params"),
    [
        ("f32", {"pack": 8, "acc": 4}),
        ("f32", {"pack": 1, "acc": 1}),
        ("f16", {"pack": 8, "acc": 2}),
        ("bf16", {"pack": 4, "acc": 8}),
    ],
)
def test_real_variants_verify(backend: CpuBackend, dtype: str, params: dict) -> None:
    variant, artifact = _built(backend, dtype, params)
    # k = 1, odd and even k; k not a multiple of the step exercises the pack and scalar tails
    for m, k in ((2, 1), (3, 37), (7, 4095), (16, 4096), (1, 5120)):
        request = TuneRequest("rms_norm", dtype, "row", RmsNormProblem(m=m, k=k))
        result = backend.run(variant, artifact, request)
        assert result.outcome is Outcome.OK, (m, k, result.log)
        assert result.throughput is not None and result.throughput_unit == "GB/s"


def test_long_rows_stay_within_the_f32_tolerance(backend: CpuBackend) -> None:
    """One accumulator over a row of 2^20 f32 squares (summed chunk by chunk): the sum's
    rounding stays under the tolerance that RmsNormProblem.reduction_length (1) keeps."""
    variant, artifact = _built(backend, "f32", {"pack": 1, "acc": 1})
    request = TuneRequest("rms_norm", "f32", "row", RmsNormProblem(m=2, k=1 << 20))
    result = backend.run(variant, artifact, request)
    assert result.outcome is Outcome.OK, result.log
    assert result.provenance["max_abs_error"] < 1e-4


class _Kernel:
    """A built CPU variant called directly through its exported symbols (_harness.h)."""

    def __init__(self, artifact: str, variant: Variant) -> None:
        lib = ctypes.CDLL(artifact)
        prefix = symbol_prefix(variant.id)
        self.buffer_bytes = getattr(lib, f"{prefix}_buffer_bytes")
        self.buffer_bytes.restype = ctypes.c_char_p
        self.kernel = getattr(lib, f"{prefix}_kernel")
        self.kernel.restype = None

    def refusal(self, dims: list[int]) -> bytes | None:
        sizes = (ctypes.c_size_t * 2)()
        out = ctypes.c_size_t()
        array = (ctypes.c_int64 * len(dims))(*dims)
        return self.buffer_bytes(array, sizes, ctypes.byref(out))

    def __call__(self, dims: list[int], x: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
        assert self.refusal(dims) is None
        array = (ctypes.c_int64 * len(dims))(*dims)
        inputs = (ctypes.c_void_p * 2)(x.ctypes.data, w.ctypes.data)
        self.kernel(array, inputs, ctypes.c_void_p(y.ctypes.data))


def test_the_kernel_reads_eps_from_its_dims(backend: CpuBackend) -> None:
    variant, artifact = _built(backend, "f32", {"pack": 4, "acc": 2})
    kernel = _Kernel(artifact, variant)
    problem = RmsNormProblem(m=3, k=21)
    rng = np.random.default_rng(5)
    x = (rng.random((3, 21), dtype=np.float32) - 0.5) * 1e-2  # mean square ~1e-5
    w = rng.random(21, dtype=np.float32) + 0.5
    for eps in (1e-6, 1e-5, 0.5):
        y = np.full_like(x, np.nan)
        kernel(abi_dims(problem, eps=eps), x, w, y)
        expected = rms_norm_reference(x, w, eps)
        assert verify(y, expected, "f32").ok, (eps, np.abs(y - expected).max())
    # the harness's own inputs and eps agree with the reference the backend verifies against
    inputs = make_inputs(problem, "f32", "row", rng)
    y = np.full((3, 21), np.nan, dtype=np.float32)
    kernel(abi_dims(problem), inputs["x"], inputs["w"], y)
    assert verify(y, reference(problem, "f32", "row", inputs), "f32").ok


@pytest.mark.parametrize("bits", [-1, MAX_EPS_BITS, 0x7FC00000, 0x80000000 | eps_bits(1e-6)])
def test_bad_eps_bits_are_refused(backend: CpuBackend, bits: int) -> None:
    variant, artifact = _built(backend, "f32", {"pack": 4, "acc": 2})
    refusal = _Kernel(artifact, variant).refusal([2, 8, bits])
    assert refusal is not None and b"eps" in refusal


def test_a_cpu_tuning_picks_a_verified_winner(backend: CpuBackend) -> None:
    request = TuneRequest(
        "rms_norm", "bf16", "row", RmsNormProblem(m=32, k=1000), budget=Budget(max_variants=3)
    )
    result = tune(request, backend, backend.config)
    assert len(result.results) == 3
    # the space's order: the widest pack with the most accumulators first
    assert result.results[0].variant_name == "rms_norm_bf16_p8_a4"
    assert all(r.outcome in (Outcome.OK, Outcome.ABORTED_SLOW) for r in result.results)
    assert result.winner is not None and result.winner.outcome is Outcome.OK
