"""Shared axes of the hand-written CUDA row kernels (reduce and softmax).

Both map rows of x[m, k] to threads the same way: a group of 2-16 lanes per row (several rows
per warp), a whole warp per row, a whole block per row, or (sm_90 and later) a split row: a
thread-block cluster of 2-8 CTAs per row, which combine through distributed shared memory
(``group`` is then the CTAs per row). Both load ``pack`` elements per vector access. Only
validated ints and enums leave this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tuner.problems import Problem
from tuner.reference import ELEMENT_SIZE
from tuner.spaces.base import Params

__all__ = [
    "CTYPES",
    "PACKS",
    "GROUPS",
    "ROW_THREADS",
    "BLOCK_THREADS",
    "CLUSTERS",
    "FEW_ROWS",
    "has_clusters",
    "packs_for",
    "row_mappings",
    "lanes_per_row",
    "mapping_label",
    "prune_row_mapping",
    "widest_first",
    "split_rank",
    "powers_of_two_up_to",
    "packs_per_lane",
]

CTYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
PACKS = (1, 2, 4, 8)
#: threads per row when several rows share a warp
GROUPS = (2, 4, 8, 16)
#: threads per block for the group and warp strategies
ROW_THREADS = (128, 256, 512)
#: threads per block when a block reduces one row
BLOCK_THREADS = (128, 256, 512, 1024)
#: CTAs per row of the split-row ("cluster") strategy (8 is the portable cluster limit)
CLUSTERS = (2, 4, 8)
#: at most this many rows cannot keep a big GPU's SMs busy with one CTA per row (132 SMs on an
#: H100/H200): the split-row variants go first in the order there
FEW_ROWS = 256
#: widest vector access on the GPU (16 bytes)
_MAX_VECTOR_BYTES = 16


def packs_for(dtype: str) -> tuple[int, ...]:
    """Pack sizes whose vector access is at most 16 bytes for ``dtype``."""
    return tuple(p for p in PACKS if p * ELEMENT_SIZE[dtype] <= _MAX_VECTOR_BYTES)


def has_clusters(arch: str) -> bool:
    """Thread-block clusters and distributed shared memory need sm_90 or later."""
    digits = "".join(ch for ch in arch if ch.isdigit())
    return bool(digits) and int(digits) >= 90


def row_mappings(arch: str) -> Iterator[tuple[str, int, int]]:
    """(strategy, group, threads) triples in a stable order; split rows only where clusters
    exist."""
    for group in GROUPS:
        for threads in ROW_THREADS:
            yield "group", group, threads
    for threads in ROW_THREADS:
        yield "warp", 32, threads
    for threads in BLOCK_THREADS:
        yield "block", threads, threads
    if has_clusters(arch):
        for ctas in CLUSTERS:
            for threads in BLOCK_THREADS:
                yield "cluster", ctas, threads


def row_packs(dtype: str, layout: str) -> tuple[int, ...]:
    """The packs of the row spaces' variants for ``dtype`` in ``layout`` (none but row-major)."""
    return packs_for(dtype) if layout == "row" and dtype in CTYPES else ()


def mode_mappings(pack: int, modes: tuple[str, ...], arch: str) -> Iterator[Params]:
    """The params of ``pack`` with each mode (outer) and row mapping (inner), in a stable
    order; "2pass" never runs on a group of lanes (the norm and softmax spaces' rule)."""
    for mode in modes:
        for strategy, group, threads in row_mappings(arch):
            if mode == "2pass" and strategy == "group":
                continue
            yield {
                "pack": pack,
                "strategy": strategy,
                "group": group,
                "threads": threads,
                "mode": mode,
            }


def lanes_per_row(params: Params) -> int:
    """Threads that share one row (all CTAs of a cluster for the split-row strategy)."""
    if params["strategy"] == "block":
        return int(params["threads"])
    if params["strategy"] == "cluster":
        return int(params["threads"]) * int(params["group"])
    return int(params["group"])


def mapping_label(params: Params) -> str:
    """``g4``, ``warp``, ``block`` or ``c4`` (4 CTAs per row) for names."""
    if params["strategy"] == "group":
        return f"g{params['group']}"
    if params["strategy"] == "cluster":
        return f"c{params['group']}"
    return str(params["strategy"])


def prune_row_mapping(params: Params, problem: Problem, layout: str) -> str | None:
    """Reasons shared by every row kernel: layout and idle lanes. Any k runs at any pack: the
    kernels split each row into a scalar head, an aligned vector body and a scalar tail."""
    if layout != "row":
        return f"layout {layout!r} is not supported (only 'row')"
    k = int(getattr(problem, "k"))  # noqa: B009 - reduce and softmax problems both have k
    pack = int(params["pack"])
    lanes = lanes_per_row(params)
    # keep the smallest group always, so that tiny rows still have a candidate
    if lanes > 2 and lanes * pack >= 2 * k:
        return f"{lanes} lanes x pack {pack} per row leaves most lanes idle at k={k}"
    return None


def widest_first(candidates: list[Params], rank: Callable[[Params], Any]) -> list[Params]:
    """Candidates with the widest vector access first (a capped search sees them first; every
    pack runs at every k), then by the caller's ``rank``, then in enumeration order."""
    return sorted(candidates, key=lambda p: (-int(p["pack"]), rank(p)))


def split_rank(params: Params, m: int) -> int:
    """Order key of the row mapping: with few rows the split rows come first (most CTAs per row
    first, as they fill the most SMs), then a block per row, then the rest; otherwise the split
    rows come last (smallest clusters first)."""
    strategy = params["strategy"]
    if m <= FEW_ROWS:
        if strategy == "cluster":
            return -int(params["group"])
        return 0 if strategy == "block" else 1
    return 2 + int(params["group"]) if strategy == "cluster" else 1


def powers_of_two_up_to(most: int) -> list[int]:
    """1, 2, 4, ... up to ``most`` (at least [1]): the packs per lane a kernel that keeps the
    row in registers is instantiated for."""
    return [1 << i for i in range(max(1, most).bit_length())]


def packs_per_lane(params: Params, k: int) -> int:
    """Packs of ``params["pack"]`` elements each lane of a row holds for rows of length ``k``
    (at least 1)."""
    return max(1, -(-(k // int(params["pack"])) // lanes_per_row(params)))
