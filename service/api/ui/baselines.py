"""Reference figures the UI draws beside tunehub's own: the device copy rate (the ceiling of
the bandwidth plots) and vendor baselines from a benchmark file (docs/benchmarks/h200.json's
format: ``meta.device``, ``meta.date``, ``copy_gbps``, and ``rows`` of ``{suite, problem,
metric: {tunehub, cublas, ...}, unit}``), named by ``TUNEHUB_UI_BENCHMARK_FILE``.

Every figure says where it comes from, and a file's figures are used only for its device.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Reference", "BenchmarkFile", "load_benchmark_file", "copy_ceiling", "vendor_figures"]

log = logging.getLogger(__name__)

#: a measurement's provenance may carry the copy rate measured beside it under this key
PROVENANCE_COPY_KEY = "copy_gb_per_s"


@dataclass(frozen=True)
class Reference:
    value: float
    source: str


@dataclass(frozen=True)
class BenchmarkFile:
    path: Path
    device: str
    date: str
    copy_gbps: float | None
    rows: list[dict[str, Any]] = field(default_factory=list)

    def describes(self, device_name: str) -> bool:
        return bool(self.device) and self.device.lower() in device_name.lower()

    def label(self) -> str:
        return f"{self.path.name} ({self.device}, {self.date})"


_loaded: dict[tuple[str, float], BenchmarkFile | None] = {}


def load_benchmark_file(path: Path | None) -> BenchmarkFile | None:
    """The file, re-read when it changes; None (logged) when absent or not that format."""
    if path is None:
        return None
    try:
        stamp = (str(path), path.stat().st_mtime)
    except OSError as exc:
        log.warning("benchmark file %s: %s", path, exc)
        return None
    if stamp not in _loaded:
        _loaded.clear()
        _loaded[stamp] = _parse(path)
    return _loaded[stamp]


def _parse(path: Path) -> BenchmarkFile | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        meta = data.get("meta", {})
        copy = data.get("copy_gbps")
        rows = [r for r in data.get("rows", []) if isinstance(r, dict)]
        return BenchmarkFile(
            path=path,
            device=str(meta.get("device", "")),
            date=str(meta.get("date", "")),
            copy_gbps=float(copy) if isinstance(copy, int | float) else None,
            rows=rows,
        )
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("benchmark file %s is not readable as a benchmark file: %s", path, exc)
        return None


def copy_ceiling(
    device_name: str,
    provenances: Iterable[Mapping[str, Any]],
    setting: Mapping[str, float],
    bench: BenchmarkFile | None,
) -> Reference | None:
    """The copy rate of the device, from (in this order) a measurement's provenance, the
    ``TUNEHUB_COPY_GBPS`` setting, or the benchmark file of that device; None if unknown."""
    for provenance in provenances:
        value = provenance.get(PROVENANCE_COPY_KEY)
        if isinstance(value, int | float) and value > 0:
            return Reference(float(value), "copy rate measured with the job (provenance)")
    for part, value in setting.items():
        if part and part.lower() in device_name.lower() and value > 0:
            return Reference(float(value), f"copy rate from TUNEHUB_COPY_GBPS[{part!r}]")
    if bench is not None and bench.copy_gbps and bench.describes(device_name):
        return Reference(bench.copy_gbps, f"copy rate from {bench.label()}")
    return None


def vendor_figures(
    bench: BenchmarkFile | None, device_name: str, op: str, problem: Mapping[str, Any]
) -> tuple[dict[str, float], str]:
    """Vendor baselines of the benchmark file for this device, op and problem (every metric
    but tunehub's own), and their unit; empty when the file has none."""
    if bench is None or not bench.describes(device_name):
        return {}, ""
    for row in bench.rows:
        wanted = row.get("problem") or {}
        if row.get("suite") != op or any(problem.get(k) != v for k, v in wanted.items()):
            continue
        metric = row.get("metric") or {}
        figures = {
            name: float(value)
            for name, value in metric.items()
            if name != "tunehub" and isinstance(value, int | float) and value > 0
        }
        return figures, str(row.get("unit", ""))
    return {}, ""
