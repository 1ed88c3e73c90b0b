"""cuBLASLt algorithms as GEMM variants: the ``cublaslt`` family of :class:`CudaGemmSpace`.

A variant's params are the algorithm's attributes (``cublasLtMatmulAlgoInit`` with ``algo``,
then ``cublasLtMatmulAlgoConfigSetAttribute`` for each of the others), never a position in a
heuristic list, so a stored answer names the same kernel tomorrow and on another host:

    {"family": "cublaslt", "algo": 66, "tile": 18, "stages": 35, "splitk": 1, "reduction": 0,
     "swizzle": 0, "custom": 0, "inner_shape": 0, "cluster_shape": 2}

Which algorithms exist depends on the shape and the GPU, so they are found at tuning time:
the backend builds the discovery variant (``DISCOVERY_PARAMS``, the same template) like any
other, runs it in the harness, and turns its answer into params with :func:`params_from_discovery`:
the heuristic's algorithms in its order (the vendor's default, heuristic #0, first), then at most
``EXTRA_ALGOS`` of the algorithms discovery enumerated beyond them (``cublasLtMatmulAlgoGetIds``
and each algorithm's capabilities, every one passed by ``cublasLtMatmulAlgoCheck``), ranked by
:mod:`tuner.spaces._cublaslt_extras`. Each answer item names its ``source`` (``heuristic`` or
``enumerated``; an item without one is the heuristic's); params do not: the same attributes are
the same kernel whoever found them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tuner.spaces._cublaslt_extras import EXTRA_ALGOS, SOURCE_HEURISTIC, rank_extras
from tuner.spaces.base import Params

__all__ = [
    "FAMILY",
    "DISCOVERY_FAMILY",
    "DISCOVERY_PARAMS",
    "TEMPLATE",
    "ATTRIBUTES",
    "REQUESTED_ALGOS",
    "EXTRA_ALGOS",
    "params_from_discovery",
    "invalid_reason",
    "name",
]

FAMILY = "cublaslt"
DISCOVERY_FAMILY = "cublaslt_discover"
DISCOVERY_PARAMS: Params = {"family": DISCOVERY_FAMILY}
TEMPLATE = "cuda/gemm_cublaslt.cu.j2"
#: how many algorithms discovery asks cublasLtMatmulAlgoGetHeuristic for
REQUESTED_ALGOS = 32
#: attribute -> (short name tag, largest value accepted); all are small non-negative ints
ATTRIBUTES: dict[str, tuple[str, int]] = {
    "algo": ("a", 10_000),
    "tile": ("t", 10_000),
    "stages": ("s", 10_000),
    "splitk": ("k", 1_024),
    "reduction": ("r", 64),
    "swizzle": ("w", 16),
    "custom": ("c", 1_024),
    "inner_shape": ("i", 65_535),
    "cluster_shape": ("cl", 65_535),
}


def invalid_reason(params: Mapping[str, Any]) -> str | None:
    """Why ``params`` is not a well-formed cuBLASLt variant (only ints reach the template)."""
    if params.get("family") != FAMILY:
        return "not a cuBLASLt variant"
    extra = set(params) - set(ATTRIBUTES) - {"family"}
    if extra:
        return f"unknown cuBLASLt attributes {sorted(extra)}"
    for key, (_, largest) in ATTRIBUTES.items():
        value = params.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= largest:
            return f"cuBLASLt attribute {key} must be an int in 0..{largest}, not {value!r}"
    if params["splitk"] < 1:
        return "cuBLASLt splitk must be at least 1"
    return None


def _params(item: Mapping[str, Any]) -> Params:
    return {"family": FAMILY, **{key: item.get(key) for key in ATTRIBUTES}}


def _key(params: Params) -> tuple[Any, ...]:
    return tuple(params[k] for k in ATTRIBUTES)


def params_from_discovery(found: Iterable[Mapping[str, Any]]) -> list[Params]:
    """Well-formed, distinct params from the discovery answer: the heuristic's in its order,
    then at most ``EXTRA_ALGOS`` enumerated ones that are none of them, best ranked first."""
    heuristic: list[Mapping[str, Any]] = []
    extras: list[Mapping[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    items = list(found)
    for from_heuristic in (True, False):
        for item in items:
            if (item.get("source", SOURCE_HEURISTIC) == SOURCE_HEURISTIC) != from_heuristic:
                continue
            params = _params(item)
            if invalid_reason(params) is not None or _key(params) in seen:
                continue
            seen.add(_key(params))
            (heuristic if from_heuristic else extras).append(item)
    ranked = rank_extras(heuristic, extras, EXTRA_ALGOS)
    return [_params(item) for item in [*heuristic, *ranked]]


def name(params: Params, dtype: str, layout: str) -> str:
    if params["family"] == DISCOVERY_FAMILY:
        return f"gemm_{dtype}_{layout}_lt_discover"
    tags = "_".join(f"{tag}{params[key]}" for key, (tag, _) in ATTRIBUTES.items())
    return f"gemm_{dtype}_{layout}_lt_{tags}"
