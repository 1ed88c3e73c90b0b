"""What every stored measurement passes, whether a worker uploads it or an admin imports it:
one definition of each rule, called by :mod:`service.store.results` and
:mod:`service.store.imports`.

- a variant id names one variant: an id stored as another op, name or params is refused
  (:func:`variant_clash`), so no record can credit its time to someone else's variant;
- the variant is one the op's space accepts for the problem on the measured device
  (:func:`space_rejection`, :func:`tuner.verify.variant_rejection`; ``TUNEHUB_VERIFY_VARIANTS``);
- timings are ordered (min <= p20 <= median <= p80; the request models check it,
  :func:`service.schemas.worker.timing_order_error`).
"""

from __future__ import annotations

from typing import Any

from service.store.models import Variant
from tuner.problems import Problem
from tuner.verify import canonical_params, variant_rejection

__all__ = ["variant_clash", "space_rejection"]


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


def space_rejection(
    op: str,
    backend: str,
    dtype: str,
    layout: str,
    arch: str,
    problem: Problem,
    params: dict[str, Any],
    name: str,
    *,
    pruned_ok: bool = False,
) -> str | None:
    """Why the op's space on (backend, arch) does not accept the variant for ``problem``."""
    reason = variant_rejection(
        op, backend, dtype, layout, arch, problem, params, name, pruned_ok=pruned_ok
    )
    return None if reason is None else f"{name!r}: {reason}"
