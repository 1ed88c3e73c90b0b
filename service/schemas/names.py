"""The names the wire uses: ops, dtypes, layouts, backends, strategies, objectives, outcomes.

The schemas own them and import nothing of ``tuner`` (a contract in ``pyproject.toml``), so a
client or a build script that reads the wire never loads the engine. The engine keeps its own
typed names (``tuner.problems``, ``tuner.registry``, ``tuner.types``); both are written down
once each, and ``tests/service/schemas/test_wire_names.py`` checks that they agree, so a name added
to one side and not the other fails the tests, not a user's request.
"""

from __future__ import annotations

import enum
from typing import Literal, get_args

__all__ = [
    "Op",
    "DType",
    "ReduceKind",
    "BackendName",
    "StrategyName",
    "Objective",
    "Outcome",
    "OPS",
    "DTYPES",
    "LAYOUTS",
    "MAX_DIM",
    "ABI_VERSION",
]

Op = Literal["gemm", "conv2d", "reduce", "softmax", "rms_norm", "scaled_gemm", "grouped_gemm"]
#: e4m3 (FP8) is an input dtype of scaled_gemm and grouped_gemm alone (tuner.problems.OP_DTYPES)
DType = Literal["f16", "bf16", "f32", "e4m3"]
ReduceKind = Literal["sum", "max", "mean"]
#: a backend's name (the backend itself is ``tuner.backends.base.Backend``)
BackendName = Literal["cpu", "cuda"]
StrategyName = Literal["exhaustive", "random", "tpe"]
Objective = Literal["time", "energy"]
OPS: tuple[str, ...] = get_args(Op)
DTYPES: tuple[str, ...] = get_args(DType)
#: layouts per op; the first one is the default
LAYOUTS: dict[str, tuple[str, ...]] = {
    "gemm": ("rcr", "rrr", "crr", "ccr"),
    "conv2d": ("nhwc",),
    "reduce": ("row",),
    "softmax": ("row",),
    "rms_norm": ("row",),
    "scaled_gemm": ("rcr",),
    "grouped_gemm": ("rcr",),
}
#: no single problem dim may exceed this (2^24)
MAX_DIM = 1 << 24
#: the C ABI every artifact exports (``tunehub_run`` and friends)
ABI_VERSION = "tunehub-1"


class Outcome(enum.StrEnum):
    """What happened to one variant on one problem. Only ``ok`` may win."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    #: timing stopped early: clearly slower than the best so far (its partial time is kept)
    ABORTED_SLOW = "aborted_slow"
    #: the space's constraints rule it out for this problem (never compiled)
    PRUNED = "pruned"
