"""Shared piece of the nvcc compile-check tests (no GPU): skip, with the reason, where this
machine lacks nvcc or a library a template needs."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import TypeVar

import pytest

from tuner.errors import ToolchainError

__all__ = ["require_toolchain"]

T = TypeVar("T")


def require_toolchain(find_library: Callable[[], T]) -> T:
    """``find_library()`` (e.g. ``cublas_paths``, ``cudnn_paths``, ``cutlass_include_dirs``)
    when nvcc is on PATH and the library is installed; else the test is skipped."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    try:
        return find_library()
    except ToolchainError as exc:
        pytest.skip(str(exc))
