"""The bulk-copy softmax family (no GPU): which variants exist, what the space prunes, where the
order puts them, that the other softmax variants keep their ids, and that the family builds for
sm_90a with nvcc (its can_run checks the same shared memory the space prunes by)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend, arch_flags
from tuner.problems import SoftmaxProblem
from tuner.render import render_variant
from tuner.spaces import cuda_softmax_bulk
from tuner.spaces.cuda_softmax import CudaSoftmaxSpace
from tuner.spaces.cuda_softmax_bulk import (
    BULK_SMEM_BYTES,
    BULK_TEMPLATE,
    bulk_smem_bytes,
    is_bulk,
)
from tuner.types import EngineConfig

SPACE = CudaSoftmaxSpace()
DTYPES = ("f16", "bf16", "f32")


def _bulk(dtype: str, arch: str = "sm_90") -> list[dict]:
    return [p for p in SPACE.enumerate(dtype, "row", arch) if is_bulk(p)]


def _names(dtype: str, mode: str) -> list[str]:
    return [SPACE.name(p, dtype, "row") for p in _bulk(dtype) if p["mode"] == mode]


def test_family_has_fourteen_variants_per_dtype_on_sm90_only() -> None:
    for dtype, pack in (("f16", 8), ("bf16", 8), ("f32", 4)):
        variants = _bulk(dtype)
        assert len(variants) == 14
        assert {p["pack"] for p in variants} == {pack}  # 16-byte units
        assert not _bulk(dtype, "sm_80")  # bulk copies and clusters need sm_90
    assert _names("f16", "bulk") == [
        f"softmax_f16_p8_c{c}_t{t}_bulk" for c in (2, 4, 8, 16) for t in (256, 512)
    ]
    assert _names("f32", "bulkp") == [
        f"softmax_f32_p4_c{c}_t{t}_bulkp" for c in (1, 2, 4) for t in (256, 512)
    ]


#: sha256 over (arch, dtype, name, params, id) of every other softmax variant, rendered with a
#: fixed compiler identity, as the space enumerates them: computed at 08c03b4, before the
#: family was added. Change it only with a change meant to re-key the softmax variants (the new
#: value: ``other_variants()`` below, e.g. from ``python -c`` in the repo root).
_IDENTITY = "nvcc test identity"
_OTHER_VARIANTS = (1208, "17347a5aea156eeb9dd5a395bd4935b49c87c70d6d08e959be7aec561c647ff6")


def other_variants() -> tuple[int, str]:
    """(count, digest) of the softmax variants outside the family (see ``_OTHER_VARIANTS``)."""
    digest = hashlib.sha256()
    count = 0
    for arch in ("sm_80", "sm_90"):
        for dtype in DTYPES:
            for params in SPACE.enumerate(dtype, "row", arch):
                if is_bulk(params):
                    continue
                v = render_variant(SPACE, params, dtype, "row", arch, arch_flags(arch), _IDENTITY)
                row = [arch, dtype, v.name, params, v.id]
                digest.update(json.dumps(row, sort_keys=True).encode())
                count += 1
    return count, digest.hexdigest()


def test_other_softmax_variants_keep_their_names_params_and_ids() -> None:
    assert other_variants() == _OTHER_VARIANTS
    for arch in ("sm_80", "sm_90"):
        for dtype in DTYPES:
            enumerated = list(SPACE.enumerate(dtype, "row", arch))
            others = [p for p in enumerated if not is_bulk(p)]
            # the family comes last: the others keep their places in the enumeration
            assert enumerated[: len(others)] == others


def test_family_renders_its_own_template() -> None:
    params = _bulk("f16")[0]
    assert SPACE.template_for(params) == BULK_TEMPLATE
    source = render_variant(SPACE, params, "f16", "row", "sm_90", (), _IDENTITY).source
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in source
    other = next(p for p in SPACE.enumerate("f16", "row", "sm_90") if not is_bulk(p))
    assert SPACE.template_for(other) == SPACE.template


def _kept(m: int, k: int, dtype: str = "f16") -> set[str]:
    problem = SoftmaxProblem(m=m, k=k)
    return {
        SPACE.name(p, dtype, "row")
        for p in _bulk(dtype)
        if SPACE.prune(p, problem, dtype, "row") is None
    }


def test_pruning_by_shared_memory_and_row_length() -> None:
    # a 50257-entry f16 row (100.5 KB) fits twice in one CTA; in f32 only as halves
    assert len(_kept(5341, 50257)) == 14
    assert "softmax_f16_p8_c1_t512_bulkp" in _kept(5341, 50257)
    f32 = _kept(5341, 50257, "f32")
    assert "softmax_f32_p4_c1_t256_bulkp" not in f32
    assert "softmax_f32_p4_c2_t256_bulkp" in f32
    # a 256000-entry f16 row (500 KB) needs 4 CTAs or more
    few = _kept(4, 256000)
    assert "softmax_f16_p8_c2_t256_bulk" not in few
    assert {f"softmax_f16_p8_c{c}_t256_bulk" for c in (4, 8, 16)} <= few
    assert not any(n.endswith("_bulkp") for n in few)
    assert "softmax_f16_p8_c4_t256_bulk" not in _kept(4, 256000, "f32")
    # short rows: 16 CTAs of 512 threads would idle
    assert "softmax_f16_p8_c16_t512_bulk" not in _kept(65536, 4096)
    c16 = next(p for p in _bulk("f16") if p["group"] == 16 and p["threads"] == 256)
    reason = SPACE.prune(c16, SoftmaxProblem(m=4, k=4_000_000), "f16", "row") or ""
    assert "shared memory" in reason


def test_shared_memory_rule_matches_the_limit() -> None:
    p = next(p for p in _bulk("f16") if p["mode"] == "bulkp" and p["group"] == 1)
    assert bulk_smem_bytes(50257, p, "f16") == 2 * 6283 * 16
    longest = BULK_SMEM_BYTES // 32 * 8  # two buffers of 16-byte packs of 8 f16
    assert SPACE.prune(p, SoftmaxProblem(m=9, k=longest), "f16", "row") is None
    assert SPACE.prune(p, SoftmaxProblem(m=9, k=longest + 1), "f16", "row") is not None


def _order(m: int, k: int) -> list[str]:
    problem = SoftmaxProblem(m=m, k=k)
    kept = [
        p
        for p in SPACE.enumerate("f16", "row", "sm_90")
        if SPACE.prune(p, problem, "f16", "row") is None
    ]
    return [SPACE.name(p, "f16", "row") for p in SPACE.order(kept, problem, "f16", "row")]


@pytest.fixture
def leading(monkeypatch: pytest.MonkeyPatch) -> None:
    """The order the family takes once a device run has verified it."""
    monkeypatch.setattr(cuda_softmax_bulk, "LEADS_ORDER", True)


@pytest.mark.parametrize(("m", "k"), [(5341, 50257), (4, 256000), (1766, 151936)])
def test_unverified_family_goes_last(m: int, k: int) -> None:
    order = [n for n in _order(m, k) if "_p8_" in n]  # (the widest packs come first)
    bulk = [i for i, n in enumerate(order) if n.endswith(("_bulk", "_bulkp"))]
    assert bulk and min(bulk) == len(order) - len(bulk)


@pytest.mark.usefixtures("leading")
def test_order_many_long_rows_persistent_first_recorded_winner_kept_in_budget() -> None:
    order = _order(5341, 50257)
    assert order[:3] == [
        "softmax_f16_p8_c1_t512_bulkp",
        "softmax_f16_p8_c2_t256_bulkp",
        "softmax_f16_p8_c4_t256_bulkp",
    ]
    # the winner of 2026-12-04 stays well within bench/regress.py's softmax budget (16)
    assert order.index("softmax_f16_p8_c2_t256_smem") < 12
    assert order.index("softmax_f16_p8_c2_t256_bulk") > order.index("softmax_f16_p8_c8_t512_smem")
    assert order.index("softmax_f16_p8_c2_t512_smem") < 16
    # a 297 KB row: the persistent kernel as quarters; clusters per row after the two passes
    order = _order(1766, 151936)
    assert order[0] == "softmax_f16_p8_c4_t256_bulkp"
    assert order.index("softmax_f16_p8_c2_t256_bulk") > order.index(
        "softmax_f16_p8_block_t1024_2pass"
    )


@pytest.mark.usefixtures("leading")
def test_order_few_rows_clusters_right_after_the_grid_split() -> None:
    order = _order(4, 256000)
    assert order[:2] == ["softmax_f16_p8_grid_t256_reg", "softmax_f16_p8_grid_t512_reg"]
    assert order[2:8] == [f"softmax_f16_p8_c{c}_t{t}_bulk" for c in (16, 8, 4) for t in (256, 512)]


@pytest.mark.usefixtures("leading")
@pytest.mark.parametrize(("m", "k"), [(65536, 4096), (8388, 32000)])
def test_order_short_rows_family_last_of_its_pack(m: int, k: int) -> None:
    order = [n for n in _order(m, k) if "_p8_" in n]  # (the widest packs come first)
    bulk = [i for i, n in enumerate(order) if n.endswith(("_bulk", "_bulkp"))]
    assert bulk and min(bulk) == len(order) - len(bulk)


#: (dtype, mode, ctas, threads) built with nvcc: the 16-CTA (non-portable) cluster, both
#: persistent sizes, every dtype
_BUILDS = [
    ("f16", "bulk", 16, 512),
    ("bf16", "bulkp", 1, 256),
    ("f32", "bulkp", 2, 512),
]


@pytest.mark.nvcc
def test_family_builds_for_sm90a(tmp_path: Path) -> None:
    require_toolchain(lambda: None)
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path), compile_workers=2))
    chosen = []
    for dtype, mode, ctas, threads in _BUILDS:
        params = next(
            p
            for p in _bulk(dtype)
            if (p["mode"], p["group"], p["threads"]) == (mode, ctas, threads)
        )
        chosen.append((dtype, params, backend.render(SPACE, params, dtype, "row", "sm_90")))
    builds = backend.build([v for _, _, v in chosen])
    for dtype, params, variant in chosen:
        built = builds[variant.id]
        assert built.ok, (variant.name, built.log[-2000:])
        assert "-gencode=arch=compute_90a,code=sm_90a" in variant.flags
        lib = ctypes.CDLL(str(built.artifact))
        # can_run needs no device: its shared-memory rule is the space's
        for k in (1, 21, 50257, 256000, 4_000_000):
            dims = (ctypes.c_int64 * 2)(4, k)
            fits = bulk_smem_bytes(k, params, dtype) <= BULK_SMEM_BYTES
            assert lib.tunehub_can_run(dims, 2) == (0 if fits else 3), (variant.name, k)
        assert lib.tunehub_can_run((ctypes.c_int64 * 2)(0, 64), 2) == 1
        lib.tunehub_describe.restype = ctypes.c_char_p
        assert lib.tunehub_describe().decode().startswith(variant.name)


@pytest.mark.nvcc
def test_ptx_reads_global_memory_only_through_bulk_copies(tmp_path: Path) -> None:
    """The aligned instantiation (EDGES = false) loads nothing from global memory itself: the
    row comes in by cp.async.bulk on an mbarrier, leaves by 16-byte stores; no local memory."""
    require_toolchain(lambda: None)
    params = next(p for p in _bulk("f16") if p["mode"] == "bulkp" and p["group"] == 2)
    cu, ptx = tmp_path / "kernel.cu", tmp_path / "kernel.ptx"
    cu.write_text(render_variant(SPACE, params, "f16", "row", "sm_90", (), _IDENTITY).source)
    argv = ["nvcc", *arch_flags("sm_90"), "-ptx", "-o", str(ptx), str(cu)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = ptx.read_text()
    entries = re.split(r"^\.visible \.entry |^\.entry ", text, flags=re.MULTILINE)[1:]
    bodies = {e.split("(", 1)[0]: e for e in entries}
    aligned = [b for name, b in bodies.items() if "Lb0E" in name]
    any_k = [b for name, b in bodies.items() if "Lb1E" in name]
    assert len(aligned) == 1 and len(any_k) == 1, sorted(bodies)
    for body in (aligned[0], any_k[0]):
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in body
        assert "mbarrier.try_wait.parity" in body and "st.global.v4" in body
        assert "ld.shared.v4" in body and ".local" not in body
    assert "ld.global" not in aligned[0]
    assert "ld.global" in any_k[0]  # the scalar head and tail of odd k
