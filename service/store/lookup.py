"""Answering "what is the best config for this problem on this device?".

Exact match first. Otherwise the nearest tuned problem of the same op/dtype/layout/device:
Euclidean distance between the log2 of the int dims; the non-int fields (reduce ``kind``) must
be equal. Per device only its newest toolchain answers unless a ``toolchain`` is asked for
(matched against the toolchain key, compiler or template version).
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import NotFound
from service.store.models import BestConfig, Device, Measurement, Toolchain, Variant
from service.store.views import device_dict, toolchain_dict
from tuner.problems import Problem

__all__ = ["find_devices", "find_best", "log_distance"]


def find_devices(session: Session, device: str | None, backend: str | None) -> list[Device]:
    """Devices named by a product-name substring or a full key ``backend:name:arch:sm_count``."""
    query = select(Device).order_by(Device.id)
    if backend:
        query = query.where(Device.backend == backend)
    devices = list(session.scalars(query))
    if not device:
        return devices
    exact = [d for d in devices if d.key() == device]
    if exact:
        return exact
    return [d for d in devices if device.lower() in d.name.lower()]


def log_distance(a: dict[str, Any], b: dict[str, Any], int_dims: tuple[str, ...]) -> float | None:
    """Distance in log2 space over ``int_dims``; None when a non-int field differs."""
    for name in set(a) | set(b):
        if name not in int_dims and a.get(name) != b.get(name):
            return None
    total = 0.0
    for name in int_dims:
        x, y = a.get(name), b.get(name)
        if not isinstance(x, int) or not isinstance(y, int) or x < 1 or y < 1:
            if x != y:
                return None
            continue
        total += (math.log2(x) - math.log2(y)) ** 2
    return math.sqrt(total)


def _toolchain_matches(toolchain: Toolchain, wanted: str) -> bool:
    return wanted in (toolchain.key, toolchain.compiler, toolchain.template_version)


def _rows_for_device(
    session: Session, op: str, dtype: str, layout: str, device: Device, toolchain: str | None
) -> list[tuple[BestConfig, Toolchain]]:
    rows = session.execute(
        select(BestConfig, Toolchain)
        .join(Toolchain, Toolchain.id == BestConfig.toolchain_id)
        .where(
            BestConfig.op == op,
            BestConfig.dtype == dtype,
            BestConfig.layout == layout,
            BestConfig.device_id == device.id,
        )
    ).all()
    if toolchain is not None:
        return [(b, t) for b, t in rows if _toolchain_matches(t, toolchain)]
    if not rows:
        return []
    newest = max((t for _, t in rows), key=lambda t: (t.created_at, t.id))
    return [(b, t) for b, t in rows if t.id == newest.id]


def find_best(
    session: Session,
    *,
    op: str,
    dtype: str,
    layout: str,
    problem: Problem,
    device: str | None = None,
    backend: str | None = None,
    toolchain: str | None = None,
) -> dict[str, Any]:
    """The answer body of ``GET /v1/configs/best``; raises NotFound when nothing fits."""
    wanted = problem.dims()
    key = problem.key()
    candidates: list[tuple[float, BestConfig, Device, Toolchain]] = []
    for dev in find_devices(session, device, backend):
        for best, tc in _rows_for_device(session, op, dtype, layout, dev, toolchain):
            if best.problem_key == key:
                distance: float | None = 0.0
            else:
                distance = log_distance(wanted, best.problem, problem.dim_names)
            if distance is not None:
                candidates.append((distance, best, dev, tc))
    if not candidates:
        where = f" on {device}" if device else (f" on {backend}" if backend else "")
        raise NotFound(
            f"{op} {dtype} {layout} {key}{where} is not tuned yet, and no tuned problem of "
            "that op/dtype/layout/device is near it; submit a tuning job"
        )
    # closest first; among equals the most recently updated answer
    candidates.sort(key=lambda c: (c[0], -c[1].updated_at.timestamp(), c[1].id))
    distance, best, dev, tc = candidates[0]
    measurement = session.get(Measurement, best.measurement_id)
    assert measurement is not None
    variant = session.get(Variant, measurement.variant_id)
    assert variant is not None
    return {
        "op": op,
        "dtype": dtype,
        "layout": layout,
        "problem": wanted,
        "tuned_problem": best.problem,
        "exact": distance == 0.0 and best.problem_key == key,
        "distance": round(distance, 6),
        "variant_id": variant.id,
        "variant_name": variant.name,
        "params": variant.params,
        "median_us": measurement.median_us,
        "p20_us": measurement.p20_us,
        "p80_us": measurement.p80_us,
        "throughput": measurement.throughput,
        "throughput_unit": measurement.throughput_unit,
        "device": device_dict(dev),
        "toolchain": toolchain_dict(tc),
        "measured_at": measurement.created_at,
        # best configs are kept for the time objective; energy winners stay on their jobs
        "objective": "time",
        "energy_j": measurement.energy_j,
    }
