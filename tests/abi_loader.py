"""A test's loader of the tunehub C ABI (ctypes): what a client does with a fetched artifact.

    lib = TunehubLibrary("/path/kernel.so")
    lib.can_run([64, 256, 0]); lib.run([x], y, [64, 256, 0]); lib.describe()

Inputs and the output are C-contiguous numpy arrays; no workspace and no stream (the CPU
artifacts need neither: ``tunehub_workspace_bytes`` is 0 and the stream is ignored).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

__all__ = ["TunehubLibrary", "REASONS"]

#: kernel_templates/*/_tunehub_abi.* reason codes
REASONS = {
    0: "ok",
    1: "bad_dims",
    2: "misaligned",
    3: "unsupported",
    4: "too_large",
    5: "launch_failed",
    6: "workspace",
}


class TunehubLibrary:
    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        i64p = ctypes.POINTER(ctypes.c_int64)
        self.lib.tunehub_can_run.argtypes = [i64p, ctypes.c_int]
        self.lib.tunehub_can_run.restype = ctypes.c_int
        self.lib.tunehub_workspace_bytes.argtypes = [i64p, ctypes.c_int]
        self.lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
        self.lib.tunehub_run.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
            i64p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        self.lib.tunehub_run.restype = ctypes.c_int
        self.lib.tunehub_describe.argtypes = []
        self.lib.tunehub_describe.restype = ctypes.c_char_p

    @staticmethod
    def _dims(dims: Sequence[int]) -> tuple[ctypes.Array[ctypes.c_int64], int]:
        return (ctypes.c_int64 * len(dims))(*dims), len(dims)

    def can_run(self, dims: Sequence[int]) -> int:
        return int(self.lib.tunehub_can_run(*self._dims(dims)))

    def workspace_bytes(self, dims: Sequence[int]) -> int:
        return int(self.lib.tunehub_workspace_bytes(*self._dims(dims)))

    def run(self, inputs: Sequence[np.ndarray], output: np.ndarray, dims: Sequence[int]) -> int:
        assert all(a.flags.c_contiguous for a in (*inputs, output))
        pointers = (ctypes.c_void_p * len(inputs))(*(a.ctypes.data for a in inputs))
        c_dims, n = self._dims(dims)
        return int(self.lib.tunehub_run(pointers, output.ctypes.data, c_dims, n, None, 0, None))

    def describe(self) -> str:
        return bytes(self.lib.tunehub_describe()).decode()
