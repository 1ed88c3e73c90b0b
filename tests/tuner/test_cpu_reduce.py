"""CpuReduceSpace: enumeration, pruning, rendering, ids; real variants verified on small shapes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tuner.cpu_helpers import RENDER_FLAGS, module_backend
from tuner.backends.cpu import CpuBackend
from tuner.errors import InvalidRequestError
from tuner.problems import ReduceProblem, SoftmaxProblem
from tuner.render import TEMPLATES_DIR, render_variant
from tuner.spaces.cpu_reduce import CpuReduceSpace
from tuner.types import Outcome, TuneRequest

SPACE = CpuReduceSpace()
FLAGS = RENDER_FLAGS


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuBackend]:
    yield from module_backend(tmp_path_factory, "reduce-cache")


def test_enumeration_is_stable_and_unique() -> None:
    first = list(SPACE.enumerate("f32", "row", "x86_64-avx2"))
    assert first == list(SPACE.enumerate("f32", "row", "x86_64-avx2"))
    names = [SPACE.name(p, "f32", "row") for p in first]
    assert len(set(names)) == len(names) > 20
    assert "reduce_f32_p4_a2_u2" in names


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_every_variant_renders(dtype: str) -> None:
    for params in SPACE.enumerate(dtype, "row", "x86_64-avx2"):
        variant = render_variant(SPACE, params, dtype, "row", "x86_64-avx2", FLAGS, "g++ test")
        assert f"constexpr int P = {params['pack']};" in variant.source
        assert variant.name in variant.source


def test_variant_id_depends_on_source_and_flags_only() -> None:
    params = {"pack": 4, "acc": 2, "unroll": 2}
    a = render_variant(SPACE, params, "f32", "row", "a", FLAGS, "g++ test")
    b = render_variant(SPACE, dict(params), "f32", "row", "a", FLAGS, "g++ test")
    assert a.id == b.id
    assert render_variant(SPACE, params, "f32", "row", "a", (*FLAGS, "-g"), "g++ test").id != a.id
    assert render_variant(SPACE, params, "f16", "row", "a", FLAGS, "g++ test").id != a.id
    assert render_variant(SPACE, params, "f32", "row", "a", FLAGS, "g++ other").id != a.id


def test_prune_explains_steps_longer_than_the_row() -> None:
    problem = ReduceProblem(m=4, k=16)
    assert SPACE.prune({"pack": 4, "acc": 2, "unroll": 2}, problem, "f32", "row") is None
    reason = SPACE.prune({"pack": 8, "acc": 2, "unroll": 2}, problem, "f32", "row")
    assert reason is not None and "k=16" in reason
    assert SPACE.prune({"pack": 1, "acc": 1, "unroll": 1}, SoftmaxProblem(m=1, k=1), "f32", "row")


def test_unknown_dtype_or_layout_is_invalid_request() -> None:
    with pytest.raises(InvalidRequestError) as err:
        list(SPACE.enumerate("f64", "row", "x"))
    assert err.value.field == "dtype"
    with pytest.raises(InvalidRequestError) as err:
        list(SPACE.enumerate("f32", "col", "x"))
    assert err.value.field == "layout"


@pytest.mark.parametrize(
    ("dtype", "params"),
    [
        ("f32", {"pack": 4, "acc": 2, "unroll": 2}),
        ("f16", {"pack": 8, "acc": 1, "unroll": 1}),
        ("bf16", {"pack": 2, "acc": 4, "unroll": 1}),
    ],
)
def test_real_variants_verify_for_every_kind(backend: CpuBackend, dtype: str, params: dict) -> None:
    arch = backend.device().arch
    variant = backend.render(SPACE, params, dtype, "row", arch)
    built = backend.build([variant])[variant.id]
    assert built.ok, built.log
    assert built.artifact is not None
    # k not a multiple of the step exercises the pack and scalar tails
    for kind in ("sum", "max", "mean"):
        for m, k in ((3, 1), (5, 77), (64, 4096)):
            request = TuneRequest("reduce", dtype, "row", ReduceProblem(m=m, k=k, kind=kind))
            result = backend.run(variant, built.artifact, request)
            assert result.outcome is Outcome.OK, (kind, m, k, result.log)
            assert result.timing is not None and result.timing.median_us > 0


def test_editing_a_shared_header_changes_every_variant_id(tmp_path: Path) -> None:
    root = tmp_path / "templates"
    shutil.copytree(TEMPLATES_DIR / "cpu", root / "cpu")
    params = next(iter(SPACE.enumerate("f32", "row", "x86_64-avx2")))
    before = render_variant(SPACE, params, "f32", "row", "x86_64-avx2", FLAGS, "g++", str(root))
    with (root / "cpu" / "_harness.h").open("a") as header:
        header.write("\n// a harness change\n")
    after = render_variant(SPACE, params, "f32", "row", "x86_64-avx2", FLAGS, "g++", str(root))
    assert before.source == after.source  # the source only names the header...
    assert before.id != after.id  # ...yet the id follows it
