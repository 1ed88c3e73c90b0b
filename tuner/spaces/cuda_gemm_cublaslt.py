"""cuBLASLt algorithms as GEMM variants: the ``cublaslt`` family of :class:`CudaGemmSpace`.

A variant's params are the algorithm's attributes (``cublasLtMatmulAlgoInit`` with ``algo``,
then ``cublasLtMatmulAlgoConfigSetAttribute`` for each of the others), never a position in a
heuristic list, so a stored answer names the same kernel tomorrow and on another host:

    {"family": "cublaslt", "algo": 66, "tile": 18, "stages": 35, "splitk": 1, "reduction": 0,
     "swizzle": 0, "custom": 0, "inner_shape": 0, "cluster_shape": 2}

Which algorithms exist depends on the shape and the GPU, so they are found at tuning time:
the backend builds the discovery variant (``DISCOVERY_PARAMS``, the same template) like any
other, runs it in the harness, and turns its answer into params with :func:`params_from_discovery`
(in the heuristic's order: the vendor's default, heuristic #0, first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tuner.spaces.base import Params

__all__ = [
    "FAMILY",
    "DISCOVERY_FAMILY",
    "DISCOVERY_PARAMS",
    "TEMPLATE",
    "ATTRIBUTES",
    "REQUESTED_ALGOS",
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


def params_from_discovery(found: Iterable[Mapping[str, Any]]) -> list[Params]:
    """Well-formed, distinct params from the discovery answer, in its order."""
    out: list[Params] = []
    seen: set[tuple[int, ...]] = set()
    for item in found:
        params: Params = {"family": FAMILY, **{key: item.get(key) for key in ATTRIBUTES}}
        key = tuple(params[k] for k in ATTRIBUTES)
        if invalid_reason(params) is None and key not in seen:
            seen.add(key)
            out.append(params)
    return out


def name(params: Params, dtype: str, layout: str) -> str:
    if params["family"] == DISCOVERY_FAMILY:
        return f"gemm_{dtype}_{layout}_lt_discover"
    tags = "_".join(f"{tag}{params[key]}" for key, (tag, _) in ATTRIBUTES.items())
    return f"gemm_{dtype}_{layout}_lt_{tags}"
