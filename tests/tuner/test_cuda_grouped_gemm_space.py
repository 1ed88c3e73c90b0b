"""The CUDA grouped_gemm space (issue 26 item 2): families per arch, pruning per bucket,
order per bucket, names; and the variants of the other ops keep their names and ids."""

from __future__ import annotations

import hashlib
import itertools
import json

import pytest

from tuner.backends.cuda import arch_flags
from tuner.errors import InvalidRequestError
from tuner.problems import LAYOUTS, GroupedGemmProblem
from tuner.registry import SPACES, has_space, load_space
from tuner.render import render_variant
from tuner.spaces.cuda_grouped_gemm import DECODE_MAX_TOKENS, CudaGroupedGemmSpace

SPACE = CudaGroupedGemmSpace()
#: OLMoE-1B-7B's up projection at the decode, mid and prefill buckets (top-8 of 64 experts)
DECODE = GroupedGemmProblem(experts=64, n=2048, k=2048, tokens=8, skew=8)
MID = GroupedGemmProblem(experts=64, n=2048, k=2048, tokens=1024, skew=2)
PREFILL = GroupedGemmProblem(experts=64, n=2048, k=2048, tokens=32768, skew=2)


def _params(arch: str = "sm_90", dtype: str = "bf16") -> list[dict]:
    return list(SPACE.enumerate(dtype, "rcr", arch))


def test_sm90_has_both_families_and_other_archs_only_ours() -> None:
    families = {p["family"] for p in _params()}
    assert families == {"sm90", "decode"}
    assert {p["family"] for p in _params("sm_80")} == {"decode"}
    assert {p["library"] for p in _params()} == {"cutlass", "tunehub"}
    for p in _params():
        if p["family"] == "sm90" and p["schedule"] == "coop":
            assert p["tile_m"] >= 128  # two consumer warpgroups
        if p["family"] == "decode":
            assert p["tokens_per_pass"] * p["rows"] <= 32


def test_names_are_unique_and_say_the_family() -> None:
    for dtype in ("f16", "bf16"):
        names = [SPACE.name(p, dtype, "rcr") for p in _params(dtype=dtype)]
        assert len(set(names)) == len(names)
    decode = next(p for p in _params() if p["family"] == "decode")
    assert SPACE.name(decode, "bf16", "rcr") == "grouped_gemm_bf16_decode_t1_r1_w4"
    assert SPACE.template_for(decode) == "cuda/grouped_gemm_decode.cu.j2"
    cutlass = next(p for p in _params() if p["family"] == "sm90")
    assert SPACE.name(cutlass, "f16", "rcr") == "grouped_gemm_f16_64x128x64_c1x1_pingpong"
    assert SPACE.template_for(cutlass) == "cuda/grouped_gemm_sm90.cu.j2"


@pytest.mark.parametrize(
    ("dtype", "layout", "arch", "field"),
    [
        ("f32", "rcr", "sm_90", "dtype"),
        ("bf16", "rrr", "sm_90", "layout"),
        ("f16", "rcr", "sm_75", "device.arch"),
    ],
)
def test_what_the_templates_cannot_build_is_refused(
    dtype: str, layout: str, arch: str, field: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        list(SPACE.enumerate(dtype, layout, arch))
    assert caught.value.field == field


def test_the_decode_family_is_pruned_where_an_expert_takes_many_tokens() -> None:
    decode = [p for p in _params() if p["family"] == "decode"]
    assert all(SPACE.prune(p, DECODE, "bf16", "rcr") is None for p in decode)
    reasons = {SPACE.prune(p, PREFILL, "bf16", "rcr") for p in decode}
    assert len(reasons) > 1 or None not in reasons
    assert all(r is not None and f"at most {DECODE_MAX_TOKENS}" in r for r in reasons)
    assert all(
        SPACE.prune(p, PREFILL, "bf16", "rcr") is None for p in _params() if p["family"] == "sm90"
    )


def test_order_tries_our_kernel_first_in_decode_and_cutlass_otherwise() -> None:
    everything = _params()
    decode = SPACE.order(everything, DECODE, "bf16", "rcr")
    assert decode[0]["family"] == "decode" and decode[0]["tokens_per_pass"] == 1
    assert [p["family"] for p in decode[:8]] == ["decode"] * 6 + ["sm90"] * 2  # both measured
    mid = SPACE.order(everything, MID, "bf16", "rcr")
    assert mid[0]["family"] == "sm90" and mid[0]["tile_m"] == 64  # 16 tokens an expert
    assert all(p["cluster_m"] * p["cluster_n"] == 1 for p in mid[:6])  # each tile before clusters
    prefill = SPACE.order(everything, PREFILL, "bf16", "rcr")
    assert (
        prefill[0]["family"] == "sm90" and prefill[0]["tile_m"] * prefill[0]["tile_n"] == 128 * 256
    )
    assert sorted(map(str, prefill)) == sorted(map(str, everything))  # a permutation
    assert SPACE.order(everything, PREFILL, "bf16", "rcr") == prefill  # deterministic


def test_grouped_gemm_has_a_cuda_space_only() -> None:
    assert has_space("grouped_gemm", "cuda") and not has_space("grouped_gemm", "cpu")
    assert isinstance(load_space("grouped_gemm", "cuda"), CudaGroupedGemmSpace)
    with pytest.raises(InvalidRequestError) as caught:
        load_space("grouped_gemm", "cpu")
    assert caught.value.field == "op"


#: sha256 over (op, backend, dtype, name, params, id) of the first 40 variants per dtype of
#: every space of these ops, rendered with a fixed compiler identity: computed at f56706c,
#: before grouped_gemm existed (1015 variants), and again at bcf9c3a, whose CPU runner change
#: (kernel_templates/cpu/_runner.cpp, part of every CPU variant's template version: it
#: measures them) re-keyed the CPU variants on purpose. Change it only with a change meant to
#: re-key those variants.
_OPS_BEFORE = ("conv2d", "gemm", "reduce", "rms_norm", "softmax")
_BEFORE = (1015, "e6b9d5d168203d3de91dc5a634a78a88996ba133dcf816e4ffa69f7cff7dc377")


def _other_variants(limit: int = 40) -> tuple[int, str]:
    digest = hashlib.sha256()
    count = 0
    for op, backend in sorted(SPACES):
        if op not in _OPS_BEFORE:
            continue
        space = load_space(op, backend)
        arch = "sm_90" if backend == "cuda" else "x86_64"
        flags = arch_flags(arch) if backend == "cuda" else ()
        layout = LAYOUTS[op][0]
        for dtype in ("f16", "bf16", "f32"):
            try:
                params = list(itertools.islice(space.enumerate(dtype, layout, arch), limit))
            except InvalidRequestError:  # a dtype the space does not take
                continue
            for p in params:
                v = render_variant(space, p, dtype, layout, arch, flags, "nvcc test identity")
                row = [op, backend, dtype, v.name, p, v.id]
                digest.update(json.dumps(row, sort_keys=True).encode())
                count += 1
    return count, digest.hexdigest()


def test_the_other_ops_keep_their_variant_names_params_and_ids() -> None:
    assert _other_variants() == _BEFORE
