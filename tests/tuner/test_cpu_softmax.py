"""CpuSoftmaxSpace: enumeration, pruning, rendering; real variants verified on small shapes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tuner.cpu_helpers import RENDER_FLAGS, module_backend
from tuner.backends.cpu import CpuBackend
from tuner.errors import InvalidRequestError
from tuner.problems import SoftmaxProblem
from tuner.render import render_variant
from tuner.spaces.cpu_softmax import ALGORITHMS, CpuSoftmaxSpace
from tuner.types import Outcome, TuneRequest

SPACE = CpuSoftmaxSpace()
FLAGS = RENDER_FLAGS


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuBackend]:
    yield from module_backend(tmp_path_factory, "softmax-cache")


def test_enumeration_covers_both_algorithms() -> None:
    params = list(SPACE.enumerate("f16", "row", "x86_64-avx512"))
    assert {p["algo"] for p in params} == set(ALGORITHMS)
    names = [SPACE.name(p, "f16", "row") for p in params]
    assert len(set(names)) == len(names)
    assert "softmax_f16_p4_a2_online" in names


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_every_variant_renders(dtype: str) -> None:
    for params in SPACE.enumerate(dtype, "row", "x86_64-avx2"):
        variant = render_variant(SPACE, params, dtype, "row", "x86_64-avx2", FLAGS, "g++ test")
        assert "RowStats row_stats(" in variant.source
        assert f"algo={params['algo']}" in variant.source


def test_algorithms_render_different_sources() -> None:
    twopass = render_variant(
        SPACE, {"pack": 4, "acc": 2, "algo": "twopass"}, "f32", "row", "a", FLAGS, "g++ test"
    )
    online = render_variant(
        SPACE, {"pack": 4, "acc": 2, "algo": "online"}, "f32", "row", "a", FLAGS, "g++ test"
    )
    assert twopass.id != online.id
    assert "run_max" in online.source and "run_max" not in twopass.source


def test_prune_and_invalid_requests() -> None:
    problem = SoftmaxProblem(m=2, k=8)
    assert SPACE.prune({"pack": 4, "acc": 2, "algo": "online"}, problem, "f32", "row") is None
    reason = SPACE.prune({"pack": 8, "acc": 2, "algo": "online"}, problem, "f32", "row")
    assert reason is not None and "k=8" in reason
    with pytest.raises(InvalidRequestError) as err:
        list(SPACE.enumerate("int8", "row", "x"))
    assert err.value.field == "dtype"
    with pytest.raises(InvalidRequestError) as err:
        list(SPACE.enumerate("f32", "nhwc", "x"))
    assert err.value.field == "layout"


@pytest.mark.parametrize(
    ("dtype", "params"),
    [
        ("f32", {"pack": 4, "acc": 2, "algo": "twopass"}),
        ("f32", {"pack": 8, "acc": 1, "algo": "online"}),
        ("f16", {"pack": 8, "acc": 2, "algo": "online"}),
        ("bf16", {"pack": 4, "acc": 4, "algo": "twopass"}),
    ],
)
def test_real_variants_verify(backend: CpuBackend, dtype: str, params: dict) -> None:
    arch = backend.device().arch
    variant = backend.render(SPACE, params, dtype, "row", arch)
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log
    assert built.artifact is not None
    for m, k in ((2, 1), (3, 37), (64, 4096)):
        request = TuneRequest("softmax", dtype, "row", SoftmaxProblem(m=m, k=k))
        result = backend.run(variant, built.artifact, request)
        assert result.outcome is Outcome.OK, (m, k, result.log)
        assert result.throughput is not None and result.throughput_unit == "GB/s"
