"""An in-memory index of the stored best configs, for lookups whose cost does not grow with
the table.

    index = best_index_for(engine)
    snapshot = index.fresh(session)        # refreshed when another session or process wrote
    snapshot.allowed(op, dtype, layout, device_ids, toolchain)   # (device_id, toolchain_id)s
    snapshot.nearest(op, dtype, layout, pairs, problem)          # best ids tied for nearest

Per (op, dtype, layout, device, toolchain) a group holds the log2 of every stored problem's
int dims as a numpy matrix, split by the problem's non-log fields (reduce ``kind``, or a dim
that is 0 such as conv ``pad``), which must be equal for two problems to be near at all.
A nearest query over a small block is one vectorized distance computation; a block of
KDTREE_MIN_ROWS or more answers from a KD-tree (scipy; the scan where it is not installed),
built on its first nearest query after a write: a scan of 100,000 configs cost 4.7 ms of CPU
per lookup against 0.7 ms for an exact one (docs/benchmarks/load.md), while a tree query
costs tens of microseconds.

Freshness: best configs are only ever inserted or updated in place (never deleted), and an
update changes only the winning measurement and ``updated_at``, never the key. So the index
holds keys and ids only; answers (and ``updated_at`` for ties) are read from the database by
id. Each lookup compares ``max(best_configs.id)`` (a primary-key probe) with the index and
loads only the new rows; because PostgreSQL can commit ids out of order, ``count(*)`` is also
compared at most every RECOUNT_SECONDS, and a mismatch rebuilds the index.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine, case, func, select
from sqlalchemy.orm import Session

from service.store.models import BestConfig, Device, Toolchain
from tuner.problems import PROBLEM_TYPES
from tuner.registry import BACKENDS

try:
    from scipy.spatial import cKDTree as _KDTree
except ImportError:  # a minimal install (the GPU host's wheels): the scan gives the same answers
    _KDTree = None

__all__ = [
    "device_filter",
    "RECOUNT_SECONDS",
    "TIE_TOLERANCE",
    "KDTREE_MIN_ROWS",
    "TREE_TAIL_ROWS",
    "DeviceEntry",
    "ToolchainEntry",
    "Snapshot",
    "BestIndex",
    "best_index_for",
    "split_problem",
    "INDEX_COLUMNS",
    "extend_snapshot",
]

#: how often a lookup also compares the row count (catches ids committed out of order)
RECOUNT_SECONDS = 1.0
#: relative slack on squared distances, so float rounding never drops a true tie
TIE_TOLERANCE = 1e-9
#: blocks at least this large answer nearest queries from a KD-tree instead of a full scan
KDTREE_MIN_ROWS = 2048
#: rows added to a block after its KD-tree was built that are scanned before it is rebuilt
TREE_TAIL_ROWS = 256
#: nearest rows a KD-tree query asks for: a tie band holding more asks the ball instead
TREE_NEAREST = 4

#: (field name, value) pairs a problem must share with another to be near it at all
Category = tuple[tuple[str, Any], ...]
GroupKey = tuple[str, str, str, int, int]


def device_filter(device: str | None, backend: str | None) -> tuple[str | None, str | None]:
    """(device, backend) as the lookups apply them: a device that is a backend's name
    (``device=cpu``, as ``tunehub best --device cpu`` takes it) selects that backend's
    devices, unless another backend is asked for too (then nothing matches, as before)."""
    if device in BACKENDS and backend in (None, device):
        return None, device
    return device, backend


@dataclass(frozen=True)
class DeviceEntry:
    id: int
    backend: str
    name: str
    key: str


@dataclass(frozen=True)
class ToolchainEntry:
    id: int
    key: str
    compiler: str
    template_version: str
    created_at: datetime

    def matches(self, wanted: str) -> bool:
        return wanted in (self.key, self.compiler, self.template_version)


def split_problem(
    problem: dict[str, Any], dim_names: Sequence[str]
) -> tuple[Category, list[float]]:
    """A problem's category (fields that must be equal) and the log2 of its positive int dims.

    Two problems are comparable exactly when their categories are equal; that is the rule of
    :func:`service.store.lookup.log_distance`."""
    category: list[tuple[str, Any]] = []
    logs: list[float] = []
    for name in dim_names:
        value = problem.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            logs.append(math.log2(value))
        else:
            category.append((name, repr(value)))
            logs.append(0.0)
    for name in sorted(set(problem) - set(dim_names)):
        category.append((name, repr(problem[name])))
    return tuple(category), logs


#: per category the (n, dims) log2 matrix and the n best-config ids
Blocks = dict[Category, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Snapshot:
    """One consistent state of the index. Never mutated: a refresh builds a new one (sharing
    the unchanged parts), so readers on other threads need no lock."""

    max_id: int = 0
    count: int = 0
    devices: dict[int, DeviceEntry] = field(default_factory=dict)
    toolchains: dict[int, ToolchainEntry] = field(default_factory=dict)
    #: (op, dtype, layout, device_id) -> ids of the toolchains present there
    group_toolchains: dict[tuple[str, str, str, int], frozenset[int]] = field(default_factory=dict)
    groups: dict[GroupKey, Blocks] = field(default_factory=dict)
    #: KD-trees of the large blocks with the rows each covers, built on first use (a
    #: duplicate build by a racing thread is harmless); a refresh that only appends rows
    #: keeps them (the rows after are scanned), a rebuild starts over
    trees: dict[tuple[GroupKey, Category], tuple[Any, int]] = field(
        default_factory=dict, compare=False
    )

    def device_ids(self, device: str | None, backend: str | None) -> list[int]:
        """Devices named by a full key or a name substring, optionally of one backend (the
        rule of :func:`service.store.lookup.find_devices`), in id order."""
        device, backend = device_filter(device, backend)
        devices = sorted(self.devices.values(), key=lambda d: d.id)
        if backend:
            devices = [d for d in devices if d.backend == backend]
        if not device:
            return [d.id for d in devices]
        exact = [d.id for d in devices if d.key == device]
        if exact:
            return exact
        wanted = device.lower()
        return [d.id for d in devices if wanted in d.name.lower()]

    def allowed(
        self, op: str, dtype: str, layout: str, device_ids: Iterable[int], toolchain: str | None
    ) -> list[tuple[int, int]]:
        """The (device_id, toolchain_id) groups that may answer: per device the toolchains
        matching ``toolchain``, or else only its newest toolchain for this op/dtype/layout."""
        pairs: list[tuple[int, int]] = []
        for device_id in device_ids:
            present = self.group_toolchains.get((op, dtype, layout, device_id))
            if not present:
                continue
            entries = [self.toolchains[t] for t in present]
            if toolchain is not None:
                pairs.extend(sorted((device_id, t.id) for t in entries if t.matches(toolchain)))
            else:
                newest = max(entries, key=lambda t: (t.created_at, t.id))
                pairs.append((device_id, newest.id))
        return pairs

    def toolchain_keys(
        self, op: str, dtype: str, layout: str, device_ids: Iterable[int]
    ) -> list[str]:
        """The keys of every toolchain with results for op/dtype/layout on the devices."""
        ids: set[int] = set()
        for device_id in device_ids:
            ids |= self.group_toolchains.get((op, dtype, layout, device_id), frozenset())
        return sorted(self.toolchains[t].key for t in ids)

    def nearest(
        self,
        op: str,
        dtype: str,
        layout: str,
        pairs: Iterable[tuple[int, int]],
        problem: dict[str, Any],
    ) -> list[int]:
        """Ids of the best configs whose log2 distance to ``problem`` is within float rounding
        of the smallest; the caller recomputes exact distances and breaks ties."""
        category, logs = split_problem(problem, dim_names(op))
        wanted = np.asarray(logs, dtype=np.float64)
        found: list[tuple[float, np.ndarray]] = []
        for device_id, toolchain_id in pairs:
            blocks = self.groups.get((op, dtype, layout, device_id, toolchain_id))
            block = blocks.get(category) if blocks is not None else None
            if block is None:
                continue
            matrix, ids = block
            if _KDTree is not None and len(ids) >= KDTREE_MIN_ROWS:
                key = ((op, dtype, layout, device_id, toolchain_id), category)
                matrix, ids = self._near_rows(key, matrix, ids, wanted)
            squared = ((matrix - wanted) ** 2).sum(axis=1)
            smallest = float(squared.min())
            found.append((smallest, ids[squared <= _limit(smallest)]))
        if not found:
            return []
        limit = _limit(min(s for s, _ in found))
        return [int(i) for s, ids in found if s <= limit for i in ids]

    def _near_rows(
        self,
        key: tuple[GroupKey, Category],
        matrix: np.ndarray,
        ids: np.ndarray,
        wanted: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The rows of a large block within the tie band of the nearest: from its KD-tree,
        which covers the block's first rows, and a scan of the rows added after it was built
        (a block only grows at its end); rebuilt once those are more than TREE_TAIL_ROWS and
        an eighth of the block."""
        entry = self.trees.get(key)
        if entry is None or len(ids) - entry[1] > max(TREE_TAIL_ROWS, entry[1] // 8):
            entry = self.trees[key] = (_KDTree(matrix), len(ids))
        tree, covered = entry
        distances, found = tree.query(wanted, k=min(TREE_NEAREST, covered))
        distances, found = np.atleast_1d(distances), np.atleast_1d(found)
        smallest = float(distances[0]) ** 2
        tail = ((matrix[covered:] - wanted) ** 2).sum(axis=1) if covered < len(ids) else None
        if tail is not None:
            smallest = min(smallest, float(tail.min()))
        # every row whose squared distance could fall inside the tie band: among the k
        # nearest unless the k-th is inside it too, else the ball around the query
        radius = math.sqrt(_limit(smallest)) * (1 + TIE_TOLERANCE)
        if len(found) == covered or float(distances[-1]) > radius:
            rows = found[distances <= radius].astype(np.int64)
        else:
            rows = np.asarray(tree.query_ball_point(wanted, radius), dtype=np.int64)
        if tail is not None:
            near_tail = np.nonzero(tail <= _limit(smallest))[0] + covered
            rows = np.concatenate([rows, near_tail.astype(np.int64)])
        return matrix[rows], ids[rows]


def _limit(smallest: float) -> float:
    return smallest * (1 + TIE_TOLERANCE) + 1e-12


def dim_names(op: str) -> tuple[str, ...]:
    cls = PROBLEM_TYPES.get(op)
    return cls.dim_names if cls is not None else ()


class BestIndex:
    """The index of one database, for one process: :meth:`fresh` returns a current
    :class:`Snapshot`. Refreshes are serialized; reads take no lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot = Snapshot()
        self._counted_at = 0.0
        #: how many times rows were read from the database (tests watch it)
        self.loads = 0

    def fresh(self, session: Session) -> Snapshot:
        """The snapshot, first brought up to date with what ``session`` can see."""
        connection = session.connection()
        if time.monotonic() - self._counted_at >= RECOUNT_SECONDS:
            with self._lock:
                if time.monotonic() - self._counted_at >= RECOUNT_SECONDS:
                    self._recount(session)
                return self._snapshot
        max_id = connection.execute(_MAX_ID).scalar() or 0
        snapshot = self._snapshot
        if max_id <= snapshot.max_id:
            return snapshot
        with self._lock:
            snapshot = self._snapshot
            if max_id > snapshot.max_id:
                snapshot = self._snapshot = self._load(session, snapshot, max_id)
            return snapshot

    def _recount(self, session: Session) -> None:
        """Compare the row count too (one statement, one consistent view): a row committed
        below the newest id after we read past it shows up here, and the index is rebuilt."""
        self._counted_at = time.monotonic()
        snapshot = self._snapshot
        newer = func.coalesce(func.sum(case((BestConfig.id > snapshot.max_id, 1), else_=0)), 0)
        max_id, count, new_rows = (
            session.connection()
            .execute(select(func.coalesce(func.max(BestConfig.id), 0), func.count(), newer))
            .one()
        )
        if max_id < snapshot.max_id:
            return  # this session sees an older state than the index already holds
        if count != snapshot.count + new_rows:
            snapshot = Snapshot(devices=snapshot.devices, toolchains=snapshot.toolchains)
        if max_id > snapshot.max_id:
            snapshot = self._load(session, snapshot, max_id)
        self._snapshot = snapshot

    def _load(self, session: Session, old: Snapshot, up_to: int) -> Snapshot:
        rows = session.execute(
            select(*INDEX_COLUMNS).where(BestConfig.id > old.max_id, BestConfig.id <= up_to)
        ).all()
        self.loads += 1
        return extend_snapshot(session, old, rows, up_to)


#: the columns :func:`extend_snapshot` reads of each best config row
INDEX_COLUMNS = (
    BestConfig.id,
    BestConfig.op,
    BestConfig.dtype,
    BestConfig.layout,
    BestConfig.problem,
    BestConfig.device_id,
    BestConfig.toolchain_id,
)


def extend_snapshot(session: Session, old: Snapshot, rows: Sequence[Any], max_id: int) -> Snapshot:
    """``old`` with ``rows`` (best configs it does not hold yet, with the INDEX_COLUMNS) added;
    devices and toolchains are read again when a row names one the snapshot lacks. Also used
    by :mod:`service.store.read_model`, so both answer nearest queries from the same index."""
    devices, toolchains = old.devices, old.toolchains
    if any(r.device_id not in devices for r in rows):
        devices = {
            d.id: DeviceEntry(d.id, d.backend, d.name, d.key())
            for d in session.scalars(select(Device))
        }
    if any(r.toolchain_id not in toolchains for r in rows):
        toolchains = {
            t.id: ToolchainEntry(t.id, t.key, t.compiler, t.template_version, t.created_at)
            for t in session.scalars(select(Toolchain))
        }
    added: dict[tuple[GroupKey, Category], tuple[list[list[float]], list[int]]] = {}
    group_toolchains = dict(old.group_toolchains)
    for row in rows:
        category, logs = split_problem(row.problem, dim_names(row.op))
        key = (row.op, row.dtype, row.layout, row.device_id, row.toolchain_id)
        new_logs, new_ids = added.setdefault((key, category), ([], []))
        new_logs.append(logs)
        new_ids.append(row.id)
        present = group_toolchains.get(key[:4], frozenset())
        if row.toolchain_id not in present:
            group_toolchains[key[:4]] = present | {row.toolchain_id}
    groups = dict(old.groups)
    for (key, category), (new_logs, new_ids) in added.items():
        blocks = dict(groups.get(key, {}))
        matrix = np.asarray(new_logs, dtype=np.float64).reshape(len(new_ids), -1)
        ids = np.asarray(new_ids, dtype=np.int64)
        if category in blocks:
            matrix = np.concatenate([blocks[category][0], matrix])
            ids = np.concatenate([blocks[category][1], ids])
        blocks[category] = (matrix, ids)
        groups[key] = blocks
    return Snapshot(
        max_id=max(max_id, old.max_id),
        count=old.count + len(rows),
        devices=devices,
        toolchains=toolchains,
        group_toolchains=group_toolchains,
        groups=groups,
        trees=dict(old.trees),  # blocks grow at their end: each tree still covers its rows
    )


_MAX_ID = select(func.max(BestConfig.id))
_INDEXES: weakref.WeakKeyDictionary[Engine, BestIndex] = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


def best_index_for(engine: Engine) -> BestIndex:
    """The process's index of the database behind ``engine``."""
    with _INDEXES_LOCK:
        index = _INDEXES.get(engine)
        if index is None:
            index = _INDEXES[engine] = BestIndex()
        return index
