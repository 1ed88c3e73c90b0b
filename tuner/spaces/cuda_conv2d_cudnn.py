"""cuDNN engine configs as conv2d variants: the ``cudnn`` family of :class:`CudaConv2dSpace`.

A variant's params are the engine's global index (``CUDNN_ATTR_ENGINE_GLOBAL_INDEX``) and its
knob choices, one ``k<knob type>`` key each (``cudnnBackendKnobType_t`` value -> choice), never
a position in a heuristic list, so a stored answer names the same engine config tomorrow:

    {"library": "cudnn", "family": "cudnn", "engine": 41, "k2": 7, "k14": 4, "k27": 1}

Which engine configs exist depends on the shape and the GPU, so they are found at tuning time:
the backend builds the discovery variant (``DISCOVERY_PARAMS``, the same template), runs it in
the harness, and turns its answer into params with :func:`params_from_discovery`: the lists of
cuDNN's heuristics merged by rank (``CUDNN_HEUR_MODE_A``'s #0 first: the vendor default; then
``CUDNN_HEUR_MODE_INSTANT``'s #0, the config torch's cuDNN path runs, and ``CUDNN_HEUR_MODE_B``'s
#0; then each one's #1, ...), the fallback list last. Whether an engine config finalizes for a
shape is the variant's outcome.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from tuner.spaces.base import Params

__all__ = [
    "FAMILY",
    "DISCOVERY_FAMILY",
    "DISCOVERY_PARAMS",
    "TEMPLATE",
    "REQUESTED_CONFIGS",
    "SOURCES",
    "knobs",
    "params_from_discovery",
    "invalid_reason",
    "name",
]

FAMILY = "cudnn"
DISCOVERY_FAMILY = "cudnn_discover"
DISCOVERY_PARAMS: Params = {"family": DISCOVERY_FAMILY}
TEMPLATE = "cuda/conv2d_cudnn.cu.j2"
#: most engine configs discovery keeps (heuristic modes A, INSTANT, B, then the fallback list)
REQUESTED_CONFIGS = 64
#: the discovery answer's ``source`` of each heuristic mode, in the order their lists merge
SOURCES = ("heur_a", "heur_instant", "heur_b", "fallback")
#: engine global indices and knob values are small ints (cuDNN 9 has < 100 engines)
_MAX_ENGINE = 10_000
_MAX_KNOB_TYPE = 63
_KNOB_VALUE_RANGE = (-(2**31), 2**31 - 1)
_KNOB_KEY = re.compile(r"^k([0-9]{1,2})$")


def knobs(params: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(knob type, choice) pairs of ``params``, by knob type (the template sets them in order)."""
    out = []
    for key, value in params.items():
        match = _KNOB_KEY.match(key)
        if match:
            out.append((int(match.group(1)), value))
    return sorted(out)


def invalid_reason(params: Mapping[str, Any]) -> str | None:
    """Why ``params`` is not a well-formed cuDNN variant (only ints reach the template)."""
    if params.get("family") != FAMILY:
        return "not a cuDNN variant"
    engine = params.get("engine")
    if not isinstance(engine, int) or isinstance(engine, bool) or not 0 <= engine <= _MAX_ENGINE:
        return f"cuDNN engine must be an int in 0..{_MAX_ENGINE}, not {engine!r}"
    low, high = _KNOB_VALUE_RANGE
    for key, value in params.items():
        if key in ("family", "engine"):
            continue
        match = _KNOB_KEY.match(key)
        if match is None or int(match.group(1)) > _MAX_KNOB_TYPE or key != f"k{int(match[1])}":
            return f"unknown cuDNN param {key!r} (knobs are k<type> with type 0..{_MAX_KNOB_TYPE})"
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            return f"cuDNN knob {key} must be a 32-bit int, not {value!r}"
    return None


def params_from_discovery(found: Iterable[Mapping[str, Any]]) -> list[Params]:
    """Well-formed, distinct params from the discovery answer: the heuristics' lists merged by
    rank (mode A's #0, INSTANT's #0, B's #0, then each one's #1, ...), the fallback list last."""
    items = list(found)

    def merge_key(i: int) -> tuple[bool, int, int, int]:
        source = str(items[i].get("source", SOURCES[0]))
        rank = items[i].get("rank")
        known = SOURCES.index(source) if source in SOURCES else len(SOURCES)
        return (source == "fallback", rank if isinstance(rank, int) else i, known, i)

    out: list[Params] = []
    seen: set[tuple[Any, ...]] = set()
    for i in sorted(range(len(items)), key=merge_key):
        raw = items[i].get("knobs")
        choices = raw if isinstance(raw, Mapping) else {}
        params: Params = {"family": FAMILY, "engine": items[i].get("engine")}
        for knob, value in choices.items():
            params[f"k{knob}"] = value
        key = (params["engine"], tuple(knobs(params)))
        if invalid_reason(params) is None and key not in seen:
            seen.add(key)
            out.append(params)
    return out


def name(params: Params, dtype: str, layout: str) -> str:
    if params["family"] == DISCOVERY_FAMILY:
        return f"conv2d_{dtype}_{layout}_cudnn_discover"
    tags = "".join(f"_k{kind}x{value}".replace("-", "m") for kind, value in knobs(params))
    return f"conv2d_{dtype}_{layout}_cudnn_e{params['engine']}{tags}"
