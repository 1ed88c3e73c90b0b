"""Names -> implementations, imported lazily so a CPU-only host never imports CUDA code."""

from __future__ import annotations

import importlib
from typing import Any, Literal, get_args

from tuner.errors import InvalidRequestError

__all__ = [
    "BackendName",
    "StrategyName",
    "SPACES",
    "BACKENDS",
    "STRATEGIES",
    "load_space",
    "has_space",
    "load_backend_class",
    "load_strategy_class",
]

#: the names a request may use (the wire schemas take these Literals; the dicts below map them)
BackendName = Literal["cpu", "cuda"]
StrategyName = Literal["exhaustive", "random", "tpe"]

SPACES: dict[tuple[str, str], str] = {
    ("reduce", "cpu"): "tuner.spaces.cpu_reduce:CpuReduceSpace",
    ("softmax", "cpu"): "tuner.spaces.cpu_softmax:CpuSoftmaxSpace",
    ("gemm", "cpu"): "tuner.spaces.cpu_gemm:CpuGemmSpace",
    ("conv2d", "cpu"): "tuner.spaces.cpu_conv2d:CpuConv2dSpace",
    ("rms_norm", "cpu"): "tuner.spaces.cpu_rms_norm:CpuRmsNormSpace",
    ("reduce", "cuda"): "tuner.spaces.cuda_reduce:CudaReduceSpace",
    ("softmax", "cuda"): "tuner.spaces.cuda_softmax:CudaSoftmaxSpace",
    ("gemm", "cuda"): "tuner.spaces.cuda_gemm:CudaGemmSpace",
    ("conv2d", "cuda"): "tuner.spaces.cuda_conv2d:CudaConv2dSpace",
    ("rms_norm", "cuda"): "tuner.spaces.cuda_rms_norm:CudaRmsNormSpace",
    # FP8: CUDA only (no CPU space: a cpu job for it is refused at submission)
    ("scaled_gemm", "cuda"): "tuner.spaces.cuda_scaled_gemm:CudaScaledGemmSpace",
    ("grouped_gemm", "cuda"): "tuner.spaces.cuda_grouped_gemm:CudaGroupedGemmSpace",
}
BACKENDS: dict[str, str] = {
    "cpu": "tuner.backends.cpu:CpuBackend",
    "cuda": "tuner.backends.cuda:CudaBackend",
}
STRATEGIES: dict[str, str] = {
    "exhaustive": "tuner.strategies.exhaustive:ExhaustiveStrategy",
    "random": "tuner.strategies.random_search:RandomStrategy",
    "tpe": "tuner.strategies.tpe:TpeStrategy",
}

assert set(BACKENDS) == set(get_args(BackendName)), "BackendName and BACKENDS disagree"
assert set(STRATEGIES) == set(get_args(StrategyName)), "StrategyName and STRATEGIES disagree"


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_space(op: str, backend: str) -> Any:
    path = SPACES.get((op, backend))
    if path is None:
        raise InvalidRequestError("op", f"no {backend} variant space for op {op!r}")
    return _load(path)()


def has_space(op: str, backend: str) -> bool:
    """Whether ``op`` has variants on ``backend`` (a job for it is refused at submission)."""
    return (op, backend) in SPACES


def load_backend_class(name: str) -> Any:
    if name not in BACKENDS:
        raise InvalidRequestError(
            "device.backend", f"unknown backend {name!r}; one of {sorted(BACKENDS)}"
        )
    return _load(BACKENDS[name])


def load_strategy_class(name: str) -> Any:
    if name not in STRATEGIES:
        raise InvalidRequestError(
            "strategy", f"unknown strategy {name!r}; one of {sorted(STRATEGIES)}"
        )
    return _load(STRATEGIES[name])
