"""Is a reported variant one that the op's space accepts for a problem on a device?

The service asks this of every uploaded measurement, so that a worker cannot store a
measurement of a kernel the engine would never build (invented parameters, a name that does
not match them, a variant pruned for the problem or illegal on the device's arch):

    reason = variant_rejection(op, "cpu", dtype, layout, arch, problem, params, name)

The variant id (a hash over the source, flags and the worker's compiler identity) cannot be
recomputed without the worker's compiler; the parameters and the name are checked instead.
Params the space cannot enumerate because the backend discovers them on the device (vendor
algorithms) are checked by form (``VariantSpace.discovered_reason``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from tuner.epilogues import params_epilogue
from tuner.errors import InvalidRequestError
from tuner.problems import Problem, problem_epilogue
from tuner.registry import load_space
from tuner.spaces.base import Params, VariantSpace

__all__ = ["canonical_params", "variant_rejection"]


def canonical_params(params: dict[str, Any]) -> str:
    """One text per parameter dict (tuples and lists alike, keys sorted)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=64)
def _space_index(
    op: str, backend: str, dtype: str, layout: str, arch: str
) -> tuple[VariantSpace, dict[str, Params]]:
    space = load_space(op, backend)
    return space, {canonical_params(p): p for p in space.enumerate(dtype, layout, arch)}


def variant_rejection(
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
    """Why the variant (``params`` named ``name``) is not one the space of (op, backend)
    accepts for ``problem`` on ``arch``; None when it is. ``pruned_ok`` accepts a variant
    the space prunes for the problem (a measurement reporting the outcome ``pruned``)."""
    try:
        space, index = _space_index(op, backend, dtype, layout, arch)
    except InvalidRequestError as exc:
        return f"no {op} {dtype} {layout} variants on {backend} {arch}: {exc.reason}"
    known = index.get(canonical_params(params))
    if known is None:
        # a variant the backend discovered on the device (cuBLASLt algorithms) cannot be
        # enumerated here; the space checks its form instead
        try:
            discovered = space.discovered_reason(params, dtype, layout, arch)
        except InvalidRequestError as exc:
            discovered = exc.reason
        if discovered is not None:
            return (
                f"params {canonical_params(params)[:200]} are not in the {backend} {op} space "
                f"({discovered})"
            )
        known = params
    if params_epilogue(known) != problem_epilogue(problem):
        return (
            f"variant fuses epilogue {params_epilogue(known)!r}, "
            f"the problem asks {problem_epilogue(problem)!r}"
        )
    expected = space.name(known, dtype, layout)
    if name != expected:
        return f"variant name {name!r} does not match its params (expected {expected!r})"
    reason = space.prune(known, problem, dtype, layout)
    if reason is not None and not pruned_ok:
        return f"variant {name!r} is pruned for {problem.key()}: {reason}"
    return None
