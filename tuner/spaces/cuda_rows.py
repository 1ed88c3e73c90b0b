"""Shared axes of the hand-written CUDA row kernels (reduce and softmax).

Both map rows of x[m, k] to threads the same way: a group of 2-16 lanes per row (several rows
per warp), a whole warp per row, or a whole block per row; and both load ``pack`` elements
per vector access. Only validated ints and enums leave this module.
"""

from __future__ import annotations

from collections.abc import Iterator

from tuner.problems import Problem
from tuner.reference import ELEMENT_SIZE
from tuner.spaces.base import Params

__all__ = [
    "CTYPES",
    "PACKS",
    "GROUPS",
    "ROW_THREADS",
    "BLOCK_THREADS",
    "packs_for",
    "row_mappings",
    "lanes_per_row",
    "mapping_label",
    "prune_row_mapping",
    "widest_first",
]

CTYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
PACKS = (1, 2, 4, 8)
#: threads per row when several rows share a warp
GROUPS = (2, 4, 8, 16)
#: threads per block for the group and warp strategies
ROW_THREADS = (128, 256, 512)
#: threads per block when a block reduces one row
BLOCK_THREADS = (128, 256, 512, 1024)
#: widest vector access on the GPU (16 bytes)
_MAX_VECTOR_BYTES = 16


def packs_for(dtype: str) -> tuple[int, ...]:
    """Pack sizes whose vector access is at most 16 bytes for ``dtype``."""
    return tuple(p for p in PACKS if p * ELEMENT_SIZE[dtype] <= _MAX_VECTOR_BYTES)


def row_mappings() -> Iterator[tuple[str, int, int]]:
    """(strategy, group, threads) triples in a stable order."""
    for group in GROUPS:
        for threads in ROW_THREADS:
            yield "group", group, threads
    for threads in ROW_THREADS:
        yield "warp", 32, threads
    for threads in BLOCK_THREADS:
        yield "block", threads, threads


def lanes_per_row(params: Params) -> int:
    return int(params["threads"]) if params["strategy"] == "block" else int(params["group"])


def mapping_label(params: Params) -> str:
    """``g4``, ``warp`` or ``block`` for names."""
    if params["strategy"] == "group":
        return f"g{params['group']}"
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


def widest_first(candidates: list[Params], *keys: str) -> list[Params]:
    """Candidates with the widest vector access first (a capped search sees them first; every
    pack runs at every k), then by ``keys`` of the caller, then in enumeration order."""
    return sorted(candidates, key=lambda p: (-int(p["pack"]), *(p[key] for key in keys)))
