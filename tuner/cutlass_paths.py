"""Where the CUTLASS C++ headers are: the ``nvidia-cutlass`` pip package ships them.

cutlass_include_dirs()  -> (".../cutlass_library/source/include",
                            ".../cutlass_library/source/tools/util/include")
cutlass_version()       -> "4.2.0.0" (for the toolchain key), or "" when not installed
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from tuner.errors import ToolchainError

__all__ = ["cutlass_include_dirs", "cutlass_version", "INSTALL_HINT"]

INSTALL_HINT = "install the CUTLASS headers with `pip install nvidia-cutlass` (or tunehub[cuda])"


def cutlass_include_dirs(override: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The include dirs for CUTLASS; ``override`` (EngineConfig.include_dirs) wins when given."""
    if override:
        return tuple(override)
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainError(f"CUTLASS headers not found: {INSTALL_HINT}")
    root = Path(next(iter(spec.submodule_search_locations))) / "source"
    dirs = (root / "include", root / "tools" / "util" / "include")
    if not (dirs[0] / "cutlass" / "cutlass.h").is_file():
        raise ToolchainError(f"cutlass_library has no C++ headers under {root}: {INSTALL_HINT}")
    return tuple(str(d) for d in dirs)


def cutlass_version() -> str:
    """The installed nvidia-cutlass version, or "" when it is absent."""
    try:
        return importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return ""
