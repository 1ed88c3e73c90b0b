"""Shared pieces of the CPU backend tests: a quick config, a module's backend, the broken space."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tuner.backends.cpu import CpuBackend
from tuner.spaces.base import Params, VariantSpace
from tuner.types import EngineConfig

__all__ = ["BROKEN_ROOT", "RENDER_FLAGS", "BrokenSpace", "module_backend", "quick_config"]

#: root for render_variant(..., root=BROKEN_ROOT): templates are "broken/<mode>.cpp.j2"
BROKEN_ROOT = str(Path(__file__).resolve().parent)

#: the flags the space tests render with (fixed, so that variant ids are comparable)
RENDER_FLAGS = ("-O3", "-march=native", "-std=c++17", "-fno-math-errno")


def quick_config(cache_dir: Path, **overrides: Any) -> EngineConfig:
    """Timings short enough for CI on 2 cores; correctness is what these tests check."""
    values: dict[str, Any] = {
        "cache_dir": str(cache_dir),
        "compile_workers": 2,
        "compile_timeout_s": 120.0,
        "run_timeout_s": 30.0,
        "bench_seconds": 0.01,
        "warmup_seconds": 0.002,
        "min_reps": 3,
        "max_reps": 200,
    }
    values.update(overrides)
    return EngineConfig(**values)


def module_backend(
    tmp_path_factory: pytest.TempPathFactory, cache_name: str, **overrides: Any
) -> Iterator[CpuBackend]:
    """Body of a module-scoped ``backend`` fixture: one quick_config backend, closed at the end."""
    backend = CpuBackend(quick_config(tmp_path_factory.mktemp(cache_name), **overrides))
    yield backend
    backend.close()


class BrokenSpace(VariantSpace):
    """Reduce variants from tests/tuner/broken/: one per failure mode, f32 storage."""

    op = "reduce"
    backend = "cpu"
    template = "broken/wrong.cpp.j2"
    MODES = ("does_not_compile", "crashes", "wrong", "hangs")

    def __init__(self, mode: str) -> None:
        assert mode in self.MODES
        self.template = f"broken/{mode}.cpp.j2"
        self.mode = mode

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        yield {"mode": self.mode}

    def name(self, params: Params, dtype: str, layout: str) -> str:
        return f"broken_{params['mode']}"

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        return {"name": self.name(params, dtype, layout)}
