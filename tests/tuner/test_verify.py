"""tuner.acceptance: a reported variant must be one the op's space accepts for the problem."""

from __future__ import annotations

import json

import pytest

from tuner.acceptance import canonical_params, variant_rejection
from tuner.problems import problem_from_dict
from tuner.registry import load_space

GEMM = problem_from_dict("gemm", {"m": 4096, "n": 4096, "k": 4096})


@pytest.mark.parametrize(("backend", "arch"), [("cpu", "x86_64-avx2"), ("cuda", "sm_90")])
def test_every_variant_the_space_offers_is_accepted(backend: str, arch: str) -> None:
    space = load_space("gemm", backend)
    # the plain variants (those of GEMM's epilogue): test_epilogues checks the fused ones
    plain = (p for p in space.enumerate("f16", "rcr", arch) if "epilogue" not in p)
    for params in list(plain)[:50]:
        name = space.name(params, "f16", "rcr")
        # as the service gets them: through JSON (tuples become lists)
        sent = json.loads(json.dumps(params))
        reason = space.prune(params, GEMM, "f16", "rcr")
        got = variant_rejection("gemm", backend, "f16", "rcr", arch, GEMM, sent, name)
        assert (got is None) == (reason is None), (params, got)


def test_invented_renamed_or_foreign_variants_are_refused() -> None:
    space = load_space("gemm", "cuda")
    params = next(iter(space.enumerate("f16", "rcr", "sm_90")))
    name = space.name(params, "f16", "rcr")
    check = lambda p, n, arch="sm_90": variant_rejection(  # noqa: E731
        "gemm", "cuda", "f16", "rcr", arch, GEMM, p, n
    )
    assert check(params, name) is None
    assert "not in the cuda gemm space" in (check({**params, "extra": 1}, name) or "")
    assert "does not match its params" in (check(params, name + "_fast") or "")
    assert "no gemm f16 rcr variants on cuda sm_70" in (check(params, name, "sm_70") or "")


def test_canonical_params_ignores_key_order_and_tuple_or_list() -> None:
    assert canonical_params({"a": (1, 2), "b": 3}) == canonical_params({"b": 3, "a": [1, 2]})


def test_a_discovered_cublaslt_algorithm_is_checked_by_form() -> None:
    space = load_space("gemm", "cuda")
    found = space.from_discovery(
        [
            {
                "algo": 6,
                "tile": 20,
                "stages": 8,
                "splitk": 1,
                "reduction": 0,
                "swizzle": 0,
                "custom": 0,
                "inner_shape": 0,
                "cluster_shape": 0,
            }
        ]
    )
    assert found, "the discovery answer should give one well-formed algorithm"
    params = json.loads(json.dumps(found[0]))
    name = space.name(params, "f16", "rcr")
    check = lambda p, n: variant_rejection(  # noqa: E731
        "gemm", "cuda", "f16", "rcr", "sm_90", GEMM, p, n
    )
    assert check(params, name) is None
    assert "splitk" in (check({**params, "splitk": 0}, name) or "")
    assert "does not match its params" in (check(params, "gemm_f16_rcr_fastest") or "")
