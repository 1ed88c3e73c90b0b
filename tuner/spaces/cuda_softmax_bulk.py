"""The bulk-copy softmax family (sm_90+, ``kernel_templates/cuda/softmax_bulk.cu.j2``).

Long rows, read once into shared memory by the copy engine: each CTA of a thread-block cluster
of ``group`` CTAs (1-16; 16 is a non-portable cluster size the template opts in to) copies its
share of a row's 16-byte-aligned body with ``cp.async.bulk`` onto an mbarrier, the scalar head
and tail (rows of odd k) in plain loads; the CTAs merge their (max, sum) pairs through
distributed shared memory and write ``exp(x - max) / sum`` from shared memory: one read and one
write of global memory. Two modes:

- ``bulk``: a cluster per row (2-16 CTAs): few long rows reach up to 16 SMs each in one plain
  launch;
- ``bulkp``: a persistent grid of the clusters resident at once (1-4 CTAs a row: 1 to 4 CTAs an
  SM at a 100 KB row, whose phases interleave), each CTA with two buffers: the next row's copy
  is in flight while the current row is finished (many long rows, e.g. a 50257-entry
  vocabulary over thousands of rows).

The params keep the split-row shape of the other softmax variants (``strategy`` "cluster",
``group`` the CTAs per row, 16-byte ``pack``), so names, row-mapping pruning and the order's
keys apply unchanged: ``softmax_f16_p8_c4_t256_bulk``. Only this module knows the family; the
other softmax variants' params, names and ids are untouched by it.
"""

from __future__ import annotations

from collections.abc import Iterator

from tuner.problems import Problem
from tuner.reference import ELEMENT_SIZE
from tuner.spaces.base import Params
from tuner.spaces.cuda_rows import FEW_ROWS, has_clusters

__all__ = [
    "BULK_MODES",
    "BULK_TEMPLATE",
    "BULK_SMEM_BYTES",
    "ONE_ROW_CLUSTERS",
    "PERSISTENT_CLUSTERS",
    "BULK_THREADS",
    "bulk_params",
    "bulk_smem_bytes",
    "is_bulk",
    "prune_bulk",
    "bulk_rank",
]

BULK_TEMPLATE = "cuda/softmax_bulk.cu.j2"
#: "bulk": a cluster per row; "bulkp": a persistent grid, two row buffers per CTA
BULK_MODES = ("bulk", "bulkp")
#: CTAs per row of "bulk" (16: the non-portable cluster size of sm_90)
ONE_ROW_CLUSTERS = (2, 4, 8, 16)
#: CTAs per row of "bulkp" (its clusters walk many rows; the more CTAs a row, the smaller each
#: CTA's buffers and the more CTAs (rows at different phases) share an SM)
PERSISTENT_CLUSTERS = (1, 2, 4)
BULK_THREADS = (256, 512)
#: dynamic shared memory one CTA of the family may take: sm_90's 227 KB opt-in less 1 KB for
#: the kernel's static arrays (mbarriers, the block's and cluster's (max, sum) pairs)
BULK_SMEM_BYTES = 227 * 1024 - 1024
#: a bulk copy moves 16-byte units
_UNIT_BYTES = 16
#: Whether the family takes the places ``bulk_rank`` gives it at the head of the order. Off until
#: a device run has verified and timed it (``bench/h200_softmax_bulk.sh`` with its GPU tests): an
#: unverified kernel must not take a capped search's first slots from the recorded winners, so
#: meanwhile the family goes last, where an exhaustive search still measures it.
LEADS_ORDER = False


def is_bulk(params: Params) -> bool:
    return params.get("mode") in BULK_MODES


def bulk_params(dtype: str, arch: str) -> Iterator[Params]:
    """The family's variants in a stable order (none before sm_90: no bulk copies, no
    clusters)."""
    if not has_clusters(arch):
        return
    pack = _UNIT_BYTES // ELEMENT_SIZE[dtype]
    for mode, clusters in (("bulk", ONE_ROW_CLUSTERS), ("bulkp", PERSISTENT_CLUSTERS)):
        for ctas in clusters:
            for threads in BULK_THREADS:
                yield {
                    "pack": pack,
                    "strategy": "cluster",
                    "group": ctas,
                    "threads": threads,
                    "mode": mode,
                }


def bulk_smem_bytes(k: int, params: Params, dtype: str) -> int:
    """Dynamic shared memory of one CTA for rows of length ``k`` (mirrors ``smem_bytes`` in the
    template: its share of the longest body, once or twice)."""
    pack = int(params["pack"])
    packs = -(-k // pack)
    per_rank = -(-packs // int(params["group"]))
    buffers = 2 if params["mode"] == "bulkp" else 1
    return buffers * per_rank * pack * ELEMENT_SIZE[dtype]


def prune_bulk(params: Params, problem: Problem, dtype: str) -> str | None:
    """Why the family's ``params`` cannot run ``problem``: the share must fit in shared memory."""
    k = int(getattr(problem, "k"))  # noqa: B009
    need = bulk_smem_bytes(k, params, dtype)
    if need > BULK_SMEM_BYTES:
        return f"k={k} needs {need} bytes of shared memory a CTA (at most {BULK_SMEM_BYTES})"
    return None


def bulk_rank(params: Params, m: int, long_rows: bool) -> tuple[int, int, int, int]:
    """Order key of the family beside the other softmax variants' (see
    ``CudaSoftmaxSpace.order``): with few rows the cluster per row right after the grid split,
    most CTAs first; with many long rows three persistent kernels first (one a cluster size),
    the other three after the split rows in shared memory and the cluster per row after the
    two-pass rows (the persistent kernel is the family's bet there, and a capped search still
    reaches the split rows in shared memory, the recorded winners, early); elsewhere (short
    rows; persistent with few rows) last. All of it last while ``LEADS_ORDER`` is off."""
    ctas = int(params["group"])
    if not LEADS_ORDER:
        return 9, 0, 0, ctas
    if m <= FEW_ROWS:
        return (0, -1, 1, -ctas) if params["mode"] == "bulk" else (9, 0, 0, ctas)
    if not long_rows:
        return 9, 0, 0, ctas
    if params["mode"] == "bulkp":
        # one size of CTA per cluster size first: the whole SM's threads for one CTA an SM, 256
        # threads where 2-4 CTAs share it; the other three after the split rows in shared memory
        lead = int(params["threads"]) == (512 if ctas == 1 else 256)
        return (1, 0, -1, ctas) if lead else (1, 1, 20, ctas)
    return 1, 4, 20, ctas
