"""Shared pieces of the GPU tests: their marks and a module's CUDA backend on short timings.

The GPU tests run on the GPU host with ``--noconftest``, so these live in a plain module."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tuner.backends.cuda import CudaBackend
from tuner.types import EngineConfig

__all__ = ["GPU_MARKS", "module_cuda_backend"]

#: ``pytestmark`` of every GPU test module: marked gpu, skipped where nvcc is missing
GPU_MARKS = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH"),
]


def module_cuda_backend(cache_dir: str, **overrides: Any) -> Iterator[CudaBackend]:
    """Body of a module-scoped ``backend`` fixture: a CudaBackend whose harness runs in this
    interpreter, timings short (the tests check outputs), closed at the end."""
    values: dict[str, Any] = {
        "cache_dir": cache_dir,
        "run_timeout_s": 60.0,
        "bench_seconds": 0.02,
        "warmup_seconds": 0.01,
        "compile_timeout_s": 300.0,
    }
    values.update(overrides)
    backend = CudaBackend(EngineConfig(**values), harness_python=sys.executable)
    yield backend
    backend.close()
