"""bench/retune_stability.py without a GPU: the CUDA suites' shapes, each shape's budget cap
and the report's file name (the tuning itself needs the device)."""

from __future__ import annotations

from bench import retune_stability as rs
from bench.regress_shapes import family_shapes


def test_the_families_suite_is_regress_new_families_in_their_dtypes() -> None:
    shapes = rs.cuda_shapes("families")
    family = family_shapes()
    assert [(op, dtype, layout) for op, dtype, layout, _ in shapes] == [
        (s.op, s.dtype, s.layout) for s in family
    ]
    assert [problem.dims() for *_, problem in shapes] == [s.problem for s in family]
    keys = [rs._key(shape) for shape in shapes]
    assert len(set(keys)) == len(keys)  # bf16 and e4m3 grouped GEMMs share their dims
    assert {dtype for _, dtype, _, _ in shapes} == {"f16", "bf16", "e4m3"}


def test_each_family_shape_is_capped_at_its_regress_budget() -> None:
    caps = rs.variant_caps("families")
    assert list(caps.values()) == [s.max_variants for s in family_shapes()]
    assert rs.variant_caps("gemm") == {}
    # the GEMM suite keeps its shapes and its report's name
    assert {op for op, *_ in rs.cuda_shapes()} == {"gemm"}
    assert rs.report_stem("cuda", "gemm") == "retune-stability-cuda"
    assert rs.report_stem("cuda", "families") == "retune-stability-cuda-families"
