"""A retried upload: the same measurements again, or other content under the same key.

A lease stores one row per variant (the database's unique key). A batch naming a variant the
lease stored already is either a replay (a retry after a lost answer: the same content, so
nothing is added and the answer says how many were ``replayed``) or a conflict: other timings,
outcome, log, provenance, params, device or toolchain under that variant, which is refused
(409) rather than silently dropped. A re-timing says so (``retimed``) and replaces the row's
timing instead (:func:`service.store.results.store_results`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Conflict
from service.schemas.measurement import MEASURED_FIELDS
from service.schemas.worker import MeasurementIn, ResultsIn
from service.store.models import Device, Measurement, Toolchain, Variant
from tuner.acceptance import canonical_params
from tuner.types import Toolchain as ToolchainKey

__all__ = ["COMPARED_FIELDS", "count_replays"]

#: what a replay repeats exactly (MeasurementIn's stored fields)
COMPARED_FIELDS = ("outcome", *MEASURED_FIELDS, "log", "provenance", "suspect")


def _differences(
    row: Measurement, variant: Variant, device: Device, toolchain: Toolchain, item: MeasurementIn,
    body: ResultsIn,
) -> list[str]:  # fmt: skip
    diff = [name for name in COMPARED_FIELDS if getattr(row, name) != getattr(item, name)]
    if variant.name != item.variant_name:
        diff.append("variant_name")
    if canonical_params(variant.params) != canonical_params(item.params):
        diff.append("params")
    if body.device is not None:
        sent = body.device
        if (sent.backend, sent.name, sent.arch, sent.sm_count) != (
            device.backend,
            device.name,
            device.arch,
            device.sm_count,
        ):
            diff.append("device")
    if body.toolchain is not None:
        sent_tc = body.toolchain
        key = ToolchainKey(sent_tc.compiler, sent_tc.template_version, dict(sent_tc.libraries))
        if key.key() != toolchain.key:
            diff.append("toolchain")
    return diff


def count_replays(
    session: Session, lease_id: str, body: ResultsIn, *, include_retimed: bool = False
) -> int:
    """How many of the batch's measurements repeat what this lease stored (same content);
    raises Conflict naming the first whose content differs. Re-timings (``retimed``) are
    compared only with ``include_retimed`` (a finished task takes no re-timing)."""
    wanted = {m.variant_id for m in body.measurements if include_retimed or not m.retimed}
    if not wanted:
        return 0
    stored: dict[str, tuple[Any, ...]] = {
        row[0].variant_id: tuple(row)
        for row in session.execute(
            select(Measurement, Variant, Device, Toolchain)
            .join(Variant, Variant.id == Measurement.variant_id)
            .join(Device, Device.id == Measurement.device_id)
            .join(Toolchain, Toolchain.id == Measurement.toolchain_id)
            .where(Measurement.lease_id == lease_id, Measurement.variant_id.in_(wanted))
        )
    }
    replays: set[str] = set()
    for index, item in enumerate(body.measurements):
        found = stored.get(item.variant_id)
        if found is None or item.variant_id not in wanted or item.variant_id in replays:
            continue
        row, variant, device, toolchain = found
        diff = _differences(row, variant, device, toolchain, item, body)
        if diff:
            raise Conflict(
                f"measurements[{index}]: variant {item.variant_id} is stored for lease "
                f"{lease_id} with another {', '.join(diff)}; a retried upload must repeat what "
                "it sent (a re-timing of a stored variant sets retimed: true)"
            )
        replays.add(item.variant_id)
    return len(replays)
