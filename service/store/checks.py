"""What every stored measurement passes, whether a worker uploads it or an admin imports it:
one definition of each rule, called by :mod:`service.store.results` and
:mod:`service.store.imports`.

- a variant id names one variant: an id stored as another op, name or params is refused
  (:func:`variant_clash`), so no record can credit its time to someone else's variant;
- the variant is one the op's space accepts for the problem on the measured device
  (:func:`tuner.acceptance.variant_rejection`, its reason prefixed with the variant's name;
  ``TUNEHUB_VERIFY_VARIANTS``);
- timings are ordered (min <= p20 <= median <= p80; the request models check it,
  :func:`service.schemas.worker.timing_order_error`);
- with verify, a variant id is what the engine makes it: sha256 hex of the rendered source,
  flags, compiler and template version (:func:`variant_id_error`);
- no timing is faster than the measured device can be for the problem (:func:`impossible`,
  the rule and the rates in :mod:`service.store.bounds`).
"""

from __future__ import annotations

import re
from typing import Any

from service.schemas.artifacts import SHA256_PATTERN
from service.store.bounds import impossible_reason, rates_of
from service.store.models import Device, Variant
from tuner.acceptance import canonical_params
from tuner.problems import Problem

__all__ = ["variant_clash", "variant_id_error", "impossible"]

_SHA256 = re.compile(SHA256_PATTERN)


def variant_clash(stored: Variant | None, op: str, name: str, params: dict[str, Any]) -> str | None:
    """Why ``stored`` (the row of the id, or None) is not the variant (op, name, params)."""
    if stored is None:
        return None
    if (
        stored.op != op
        or stored.name != name
        or canonical_params(stored.params) != canonical_params(params)
    ):
        return f"variant {stored.id} is stored as {stored.op} {stored.name!r} with other params"
    return None


def variant_id_error(variant_id: str) -> str | None:
    """Why ``variant_id`` is not a variant id as the engine makes one (sha256, lower-case hex)."""
    if _SHA256.match(variant_id):
        return None
    return (
        f"{variant_id[:80]!r} is not a variant id: the sha256 (64 lower-case hex digits) of the "
        "rendered source, flags, compiler and template version"
    )


def impossible(
    problem: Problem,
    dtype: str,
    device: Device | None,
    device_name: str,
    timings: dict[str, float | None],
) -> tuple[str, str] | None:
    """(field, why) when ``timings`` beat what the device (its stored row, or just its name
    where none is stored yet) can do for the problem; None when they are possible."""
    if device is not None:
        rates = rates_of(device.name, device.copy_gbps, device.peak_tflops)
    else:
        rates = rates_of(device_name, None, None)
    return impossible_reason(problem, dtype, timings, rates)
