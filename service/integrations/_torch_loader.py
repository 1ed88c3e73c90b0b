"""Loads a variant's shared object once per process and calls its C ABI ("tunehub-1").

Every variant, CUDA or CPU, exports (kernel_templates/cuda/_tunehub_abi.cuh)::

    int         tunehub_can_run(const int64_t* dims, int n_dims);
    size_t      tunehub_workspace_bytes(const int64_t* dims, int n_dims);
    int         tunehub_run(const void* const* inputs, void* output, const int64_t* dims,
                            int n_dims, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream);      /* CPU: the stream is ignored */
    const char* tunehub_describe(void);

A file is hashed (sha256) before it is loaded; when the caller names the sha256 it expects
(an artifact's), a file that differs is refused and never loaded. Libraries are kept by their
sha256, so the same code is loaded once however many shapes or paths name it.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "ABI",
    "REASONS",
    "LoadError",
    "KernelLibrary",
    "load_library",
    "file_sha256",
    "reason_text",
    "int64_array",
]

log = logging.getLogger(__name__)

#: the ABI these libraries follow (ArtifactRef.abi)
ABI = "tunehub-1"
#: tunehub_can_run / tunehub_run return codes (enum TunehubReason of _tunehub_abi.cuh)
REASONS = {
    0: "ok",
    1: "bad dims",
    2: "misaligned",
    3: "unsupported shape",
    4: "too large",
    5: "launch failed",
    6: "workspace missing or too small",
}
#: a dlopen error naming a missing dependency, e.g. "libcublasLt.so.13: cannot open ..."
_MISSING_LIBRARY = re.compile(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file")


class LoadError(Exception):
    """The library cannot be loaded: unreadable, another sha256, or not the tunehub ABI."""


def reason_text(code: int) -> str:
    return f"{REASONS.get(code, 'unknown reason')} ({code})"


def file_sha256(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def int64_array(values: Sequence[int]) -> ctypes.Array[ctypes.c_int64]:
    return (ctypes.c_int64 * len(values))(*values)


_DIMS = ctypes.POINTER(ctypes.c_int64)


class KernelLibrary:
    """One loaded variant: its four ABI functions with their ctypes signatures."""

    def __init__(self, handle: ctypes.CDLL, path: Path, sha256: str) -> None:
        self.handle = handle
        self.path = path
        self.sha256 = sha256
        try:
            self._can_run = handle.tunehub_can_run
            self._workspace_bytes = handle.tunehub_workspace_bytes
            self.run = handle.tunehub_run
            self._describe = handle.tunehub_describe
        except AttributeError as exc:
            raise LoadError(f"{path} does not export the tunehub ABI: {exc}") from None
        self._can_run.restype = ctypes.c_int
        self._can_run.argtypes = [_DIMS, ctypes.c_int]
        self._workspace_bytes.restype = ctypes.c_size_t
        self._workspace_bytes.argtypes = [_DIMS, ctypes.c_int]
        # tunehub_run(inputs, output, dims, n_dims, workspace, workspace_bytes, stream): the
        # hot path; callers pass a (c_void_p * n) array, ints for pointers and the stream
        self.run.restype = ctypes.c_int
        self.run.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            _DIMS,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        self._describe.restype = ctypes.c_char_p
        self._describe.argtypes = []

    def can_run(self, dims: Sequence[int]) -> int:
        return int(self._can_run(int64_array(dims), len(dims)))

    def workspace_bytes(self, dims: Sequence[int]) -> int:
        return int(self._workspace_bytes(int64_array(dims), len(dims)))

    def describe(self) -> str:
        text = self._describe()
        return text.decode(errors="replace") if text else ""

    def __repr__(self) -> str:
        return f"KernelLibrary({self.path.name}, sha256={self.sha256[:12]})"


_LIBRARIES: dict[str, KernelLibrary] = {}
_LOCK = threading.Lock()


def _vendor_library(name: str) -> Path | None:
    """``name`` (e.g. libcublasLt.so.13) in the lib folders of the ``nvidia`` wheels, where
    torch's CUDA wheels and tunehub's ``vendor`` extra put cuBLAS and cuDNN."""
    spec = importlib.util.find_spec("nvidia")
    for root in list(spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob(f"*/lib/{name}")):
            return candidate
    return None


def _dlopen(path: Path) -> ctypes.CDLL:
    """dlopen ``path``; a dependency the loader cannot find (a vendor library the building
    worker linked by rpath) is looked up in this interpreter's ``nvidia`` wheels, loaded
    globally, and the load is tried again."""
    preloaded: set[str] = set()
    while True:
        try:
            return ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            missing = _MISSING_LIBRARY.search(str(exc))
            found = _vendor_library(missing.group(1)) if missing else None
            if found is None or found.name in preloaded:
                raise LoadError(f"cannot load {path}: {exc}") from None
            log.info("loading %s for %s", found, path.name)
            ctypes.CDLL(str(found), mode=ctypes.RTLD_GLOBAL)
            preloaded.add(found.name)


def load_library(path: str | os.PathLike[str], expected_sha256: str | None = None) -> KernelLibrary:
    """The library at ``path``, loaded once per process (by content). With
    ``expected_sha256``, a file with another sha256 is refused before it is loaded."""
    path = Path(path)
    try:
        digest = file_sha256(path)
    except OSError as exc:
        raise LoadError(f"cannot read {path}: {exc}") from None
    if expected_sha256 is not None and digest != expected_sha256.lower():
        raise LoadError(
            f"{path} has sha256 {digest}, not the expected {expected_sha256}: refused, not loaded"
        )
    with _LOCK:
        library = _LIBRARIES.get(digest)
        if library is None:
            library = KernelLibrary(_dlopen(path), path, digest)
            _LIBRARIES[digest] = library
            log.debug("loaded %s: %s", path, library.describe())
        return library
