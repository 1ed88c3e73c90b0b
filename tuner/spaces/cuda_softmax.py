"""CUDA softmax over the last dim: pack x row mapping x block size x (registers | shared
memory | two passes).

"reg" keeps the whole row in registers (one read, one write of global memory) and runs only
while the row fits: each thread holds at most ``max_values(threads)`` floats. "stream" (group
and warp mappings: short rows) is "reg" on a persistent grid that loads each group's next row
before it finishes the current one, so short rows keep bytes in flight. "smem" (a block
per row) keeps the row in dynamic shared memory, opted in past 48 KB, and runs while the row
fits in ``SMEM_OPTIN_BYTES``: one read, one write for rows too long for registers (a 50k-entry
f16 vocabulary row is 100 KB). "pipe" (a block per row, 16-byte packs) is "smem" on a persistent
grid with two row buffers: the next row is copied in (cp.async) while the current one is
finished, so reads and writes overlap; it runs while two rows fit (K up to ~58k in f16).
"2pass" reads the row twice (an online max/sum pass, then the normalising pass) and runs for
any k; it is offered for the warp and block mappings only, since
long rows are where it matters. The split-row ("cluster") mapping runs in "reg" mode only: a
cluster of 2-8 CTAs holds one row in registers and exchanges (max, sum) pairs through
distributed shared memory, so rows up to 262,144 f16 elements are read once, by CTAs small
enough to share an SM, and few rows still reach several SMs each. The split row also runs in
"smem" mode (16-byte packs, 256 or 512 threads a CTA): each CTA keeps its share in shared memory
in storage precision, half the bytes of registers' floats, so several long rows' shares fit on
one SM (a block per 100 KB row fits twice); it goes with the one-CTA shared-memory rows in the
order for rows of more than ``_SPLIT_SMEM_ROW_BYTES``, last for shorter ones and few rows.
The grid split ("grid", "reg" mode, at most ``FEW_ROWS`` rows) spreads few long rows over every
SM in one cooperative launch: parts CTAs per row (as many as are resident), each holding its
share in registers, a grid-wide barrier between the (max, sum) exchange and the writes.
The bulk-copy family ("bulk", "bulkp": sm_90 copy engine, clusters of up to 16 CTAs, a persistent
double-buffered grid) has its own template and module, ``tuner.spaces.cuda_softmax_bulk``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tuner.problems import Problem
from tuner.reference import ELEMENT_SIZE
from tuner.spaces.base import Params, VariantSpace
from tuner.spaces.cuda_rows import (
    CTYPES,
    FEW_ROWS,
    lanes_per_row,
    mapping_label,
    mode_mappings,
    powers_of_two_up_to,
    prune_row_mapping,
    row_packs,
    split_rank,
    widest_first,
)
from tuner.spaces.cuda_softmax_bulk import (
    BULK_SMEM_BYTES,
    BULK_TEMPLATE,
    bulk_params,
    bulk_rank,
    is_bulk,
    prune_bulk,
)

__all__ = [
    "CudaSoftmaxSpace",
    "MODES",
    "SMEM_OPTIN_BYTES",
    "SPLIT_SMEM_THREADS",
    "GRID_THREADS",
    "max_values",
    "col_options",
    "smem_bytes",
    "reg_values",
    "REG_MODES",
]

MODES = ("reg", "stream", "pipe", "smem", "2pass")
#: modes that hold the row in registers (``max_values`` per thread)
REG_MODES = ("reg", "stream")
#: dynamic shared memory one block may opt in to on sm_90 (227 KB; sm_80 parts refuse larger
#: rows at run time through ``tunehub_can_run``'s twin check in the launch)
SMEM_OPTIN_BYTES = 227 * 1024


def max_values(threads: int) -> int:
    """Floats one thread may keep in registers: 64K registers per SM bound big blocks."""
    return min(128, 32768 // threads)


#: threads per CTA of the split row in shared memory (small CTAs: several per SM)
SPLIT_SMEM_THREADS = (256, 512)
#: threads per CTA of the grid split (few rows: as many CTAs per row as the GPU holds)
GRID_THREADS = (256, 512)
#: rows longer than this (bytes) fit at most three times in one SM's shared memory as a block
#: per row: the split row in shared memory goes beside the one-CTA rows in the order there
_SPLIT_SMEM_ROW_BYTES = 64 * 1024


def smem_bytes(k: int, pack: int, dtype: str, ctas: int = 1) -> int:
    """Dynamic shared memory one CTA of the "smem" kernel asks for: the row, or its share of
    ``ctas`` (mirrors ``smem_bytes`` and ``split_smem_bytes`` in the template)."""
    packs = -(-k // pack)
    return -(-packs // ctas) * pack * ELEMENT_SIZE[dtype]


#: values per thread up to which a register-resident row still leaves room for several CTAs per
#: SM (the order tries these before shared memory)
_LIGHT_REG_VALUES = 64


def reg_values(params: Params, k: int) -> int:
    """Floats one thread holds in "reg" mode for rows of length ``k`` (mirrors ``cols_needed``
    and ``split_cols_needed`` in the template: a power of two of packs)."""
    pack, threads = int(params["pack"]), int(params["threads"])
    packs = k // pack
    if params["strategy"] == "cluster":
        per_rank = -(-packs // int(params["group"]))
        per_lane = -(-per_rank // threads)
    else:
        per_lane = -(-packs // lanes_per_row(params))
    cols = 1
    while cols < per_lane:
        cols *= 2
    return cols * pack


def col_options(params: Params) -> list[int]:
    """Packs per thread the "reg" kernel is instantiated for (powers of two)."""
    return powers_of_two_up_to(max_values(int(params["threads"])) // int(params["pack"]))


def _mode_fits(mode: str, strategy: str, threads: int, wide: bool) -> bool:
    """Whether ``mode`` runs on this row mapping (``wide``: 16-byte packs)."""
    if mode == "pipe" and (strategy != "block" or not wide):
        return False
    if mode == "smem" and strategy not in ("block", "cluster"):
        return False
    if strategy == "cluster" and not (
        mode == "reg" or (mode == "smem" and wide and threads in SPLIT_SMEM_THREADS)
    ):
        return False
    return not (mode == "stream" and strategy not in ("group", "warp"))


class CudaSoftmaxSpace(VariantSpace):
    """``softmax_f16_p8_warp_t128_reg``: 8-element accesses, a warp per row, row in registers."""

    op = "softmax"
    backend = "cuda"
    template = "cuda/softmax.cu.j2"

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        packs = row_packs(dtype, layout)
        if not packs:
            return
        for pack in packs:
            wide = pack * ELEMENT_SIZE[dtype] == 16
            for params in mode_mappings(pack, MODES, arch):
                if _mode_fits(params["mode"], params["strategy"], int(params["threads"]), wide):
                    yield params
            # few long rows over the whole GPU: a cooperative grid, rows held in registers
            for threads in GRID_THREADS:
                yield {
                    "pack": pack,
                    "strategy": "grid",
                    "group": threads,
                    "threads": threads,
                    "mode": "reg",
                }
        # last, so that the other variants keep their places in the enumeration
        yield from bulk_params(dtype, arch)

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        reason = prune_row_mapping(params, problem, layout)
        if reason is None and is_bulk(params):
            return prune_bulk(params, problem, dtype)
        if reason is not None or params["mode"] == "2pass":
            return reason
        k = int(getattr(problem, "k"))  # noqa: B009
        if params["strategy"] == "grid":
            m = int(getattr(problem, "m"))  # noqa: B009
            if m > FEW_ROWS:
                return f"m={m}: the grid split is for at most {FEW_ROWS} rows"
            return None
        if params["mode"] in ("smem", "pipe"):
            buffers = 2 if params["mode"] == "pipe" else 1
            ctas = int(params["group"]) if params["strategy"] == "cluster" else 1
            need = buffers * smem_bytes(k, int(params["pack"]), dtype, ctas)
            if need > SMEM_OPTIN_BYTES:
                return f"k={k} needs {need} bytes of shared memory (at most {SMEM_OPTIN_BYTES})"
            return None
        if params["strategy"] == "cluster":
            if reg_values(params, k) > col_options(params)[-1] * int(params["pack"]):
                return f"k={k} does not fit in the cluster's registers"
            return None
        capacity = lanes_per_row(params) * int(params["pack"]) * col_options(params)[-1]
        if k > capacity:
            return f"k={k} does not fit in registers (at most {capacity} per row)"
        return None

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """Widest pack first. Within a pack: with few rows the split rows (most CTAs first);
        then rows in registers of one CTA at a light register load, rows in shared memory
        (pipelined first), split rows (many rows), rows in registers at a heavy load (one CTA
        per SM), two passes last. (On the H200, run 4 and its probe: split rows in registers
        lose to a CTA per row when rows are many: a cluster reads its row in one burst, then
        waits on its peers, and few clusters fit.) Split rows in shared memory go after the
        one-CTA shared-memory rows where many rows are longer than ``_SPLIT_SMEM_ROW_BYTES``,
        and last otherwise. The grid split (few rows only) goes first. The bulk-copy family goes
        where ``cuda_softmax_bulk.bulk_rank`` puts it."""
        m, k = int(getattr(problem, "m")), int(getattr(problem, "k"))  # noqa: B009
        long_rows = m > FEW_ROWS and k * ELEMENT_SIZE[dtype] > _SPLIT_SMEM_ROW_BYTES

        def rank(p: Params) -> tuple[int, int, int, int]:
            if is_bulk(p):
                return bulk_rank(p, m, long_rows)
            if p["strategy"] == "grid":  # few rows: before the clusters (they reach 8 SMs a row)
                return 0, -1, 0, 0
            split = split_rank(p, m)
            cluster = p["strategy"] == "cluster"
            shared_split = cluster and p["mode"] == "smem"
            first = 0 if cluster and m <= FEW_ROWS and not shared_split else 1
            if p["mode"] in REG_MODES:
                light = reg_values(p, k) <= _LIGHT_REG_VALUES
                weight = (2 if cluster and first else 0) if light else 3
            elif shared_split:
                weight = 1 if long_rows else 5
            else:
                weight = 1 if p["mode"] in ("pipe", "smem") else 4
            return first, weight, split, MODES.index(p["mode"])

        return widest_first(candidates, rank)

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return (
            f"softmax_{dtype}_p{params['pack']}_{mapping_label(params)}"
            f"_t{params['threads']}_{params['mode']}"
        )

    def template_for(self, params: Params) -> str:
        return BULK_TEMPLATE if is_bulk(params) else self.template

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        if is_bulk(params):
            return {
                **super().render_context(params, dtype, layout),
                "ctype": CTYPES[dtype],
                "smem_limit": BULK_SMEM_BYTES,
            }
        reg = params["mode"] in REG_MODES
        return {
            **super().render_context(params, dtype, layout),
            "ctype": CTYPES[dtype],
            "col_options": col_options(params) if reg else [],
            "max_cols": col_options(params)[-1] if reg else 0,
            "smem_limit": SMEM_OPTIN_BYTES,
        }
