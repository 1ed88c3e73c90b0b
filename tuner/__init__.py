"""tunehub's tuning engine: spaces, rendering, compiling, measuring, searching.

It never imports ``service`` and never touches a database or the network: it takes a
:class:`~tuner.types.TuneRequest` and returns :class:`~tuner.types.ProblemResult` values.
"""

from tuner.errors import (
    DeviceError,
    InvalidRequestError,
    NoVariantsError,
    ToolchainError,
    TunerError,
)
from tuner.problems import (
    Conv2dProblem,
    GemmProblem,
    Problem,
    ReduceProblem,
    RmsNormProblem,
    ScaledGemmProblem,
    SoftmaxProblem,
    problem_from_dict,
)
from tuner.types import (
    BenchResult,
    Budget,
    DeviceInfo,
    EngineConfig,
    Outcome,
    ProblemResult,
    Timing,
    Toolchain,
    TuneRequest,
    Variant,
)

__all__ = [
    "TunerError",
    "InvalidRequestError",
    "NoVariantsError",
    "ToolchainError",
    "DeviceError",
    "Problem",
    "GemmProblem",
    "Conv2dProblem",
    "ReduceProblem",
    "SoftmaxProblem",
    "RmsNormProblem",
    "ScaledGemmProblem",
    "problem_from_dict",
    "BenchResult",
    "Budget",
    "DeviceInfo",
    "EngineConfig",
    "Outcome",
    "ProblemResult",
    "Timing",
    "Toolchain",
    "TuneRequest",
    "Variant",
]
