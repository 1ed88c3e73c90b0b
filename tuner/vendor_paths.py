"""Where the vendor libraries' headers and shared objects are: PyPI's ``nvidia-cublas`` and
``nvidia-cudnn-cu13``.

    cublas_paths()    -> CublasPaths(include=".../nvidia/cu13/include", lib=".../nvidia/cu13/lib",
                                     lt_library="libcublasLt.so.13")   (ToolchainError if absent)
    cublas_version()  -> "13.0.2.14" (for the toolchain key), or "" when not installed
    cudnn_paths()     -> CudnnPaths(include=".../nvidia/cudnn/include", lib=".../nvidia/cudnn/lib",
                                    library="libcudnn.so.9")          (ToolchainError if absent)
    cudnn_version()   -> "9.28.1.4", or "" when not installed

The wheels put CUDA 13 files under ``nvidia/cu13/`` and CUDA 12 files under ``nvidia/cublas/``
(a namespace package shared with torch's own CUDA wheels, so the GPU host's torch venv has them).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import ToolchainError

__all__ = [
    "CublasPaths",
    "cublas_paths",
    "cublas_version",
    "CUBLAS_HINT",
    "CudnnPaths",
    "cudnn_paths",
    "cudnn_version",
    "CUDNN_HINT",
]

CUBLAS_HINT = "install the cuBLAS headers with `pip install nvidia-cublas` (or tunehub[vendor])"
CUDNN_HINT = "install the cuDNN headers with `pip install nvidia-cudnn-cu13` (or tunehub[vendor])"
#: (folder under nvidia/, distribution name) per CUDA major, newest first
_LAYOUTS = (("cu13", "nvidia-cublas"), ("cublas", "nvidia-cublas-cu12"))


@dataclass(frozen=True)
class CublasPaths:
    include: str
    lib: str
    #: the versioned soname to link (the wheels ship no unversioned libcublasLt.so)
    lt_library: str
    distribution: str


@dataclass(frozen=True)
class CudnnPaths:
    include: str
    lib: str
    #: the versioned soname to link (the wheel ships no unversioned libcudnn.so)
    library: str
    distribution: str


def _nvidia_roots() -> list[str]:
    spec = importlib.util.find_spec("nvidia")
    return list(spec.submodule_search_locations or []) if spec else []


def cublas_paths() -> CublasPaths:
    for root in _nvidia_roots():
        for folder, distribution in _LAYOUTS:
            base = Path(root) / folder
            if not (base / "include" / "cublasLt.h").is_file():
                continue
            libs = sorted((base / "lib").glob("libcublasLt.so.*"), key=lambda p: len(p.name))
            if libs:
                include, lib = str(base / "include"), str(base / "lib")
                return CublasPaths(include, lib, libs[0].name, distribution)
    raise ToolchainError(f"cuBLASLt headers not found: {CUBLAS_HINT}")


def cublas_version() -> str:
    """The installed cuBLAS wheel's version, or "" when it is absent."""
    try:
        return importlib.metadata.version(cublas_paths().distribution)
    except (ToolchainError, importlib.metadata.PackageNotFoundError):
        return ""


def cudnn_paths() -> CudnnPaths:
    # the cu13 and cu12 wheels both install nvidia/cudnn/; the distribution names the CUDA major
    for root in _nvidia_roots():
        base = Path(root) / "cudnn"
        if not (base / "include" / "cudnn_backend.h").is_file():
            continue
        libs = sorted((base / "lib").glob("libcudnn.so.*"), key=lambda p: len(p.name))
        if libs:
            return CudnnPaths(
                str(base / "include"), str(base / "lib"), libs[0].name, _cudnn_distribution()
            )
    raise ToolchainError(f"cuDNN headers not found: {CUDNN_HINT}")


def _cudnn_distribution() -> str:
    for name in ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"):
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return name
    return "nvidia-cudnn-cu13"


def cudnn_version() -> str:
    """The installed cuDNN wheel's version, or "" when it is absent."""
    try:
        return importlib.metadata.version(cudnn_paths().distribution)
    except (ToolchainError, importlib.metadata.PackageNotFoundError):
        return ""
