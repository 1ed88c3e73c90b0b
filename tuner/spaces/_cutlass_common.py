"""Helpers shared by the CUTLASS spaces: arch parsing, shared-memory limits, alignment."""

from __future__ import annotations

import re

from tuner.errors import InvalidRequestError
from tuner.spaces.base import Params

__all__ = [
    "ALIGNMENT_BYTES",
    "SM90_SMEM_BYTES",
    "sm_number",
    "sm80_class_smem_bytes",
    "elements_per_16_bytes",
    "check_dtype",
    "sm80_tile",
    "sm90_tile",
]

#: 16-byte vector (and TMA) accesses: every leading dimension must be a multiple of this
ALIGNMENT_BYTES = 16
#: usable dynamic shared memory per block on sm_90 (227 KiB)
SM90_SMEM_BYTES = 227 * 1024
#: per-block shared memory on the sm80 class: A100 164 KiB less 1 KiB reserved; GA10x/AD10x 99 KiB
_SM80_CLASS_SMEM = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024}
_ELEMENT_BYTES = {"f16": 2, "bf16": 2}


def sm_number(arch: str) -> int:
    """``"sm_90"`` / ``"sm_90a"`` / ``"90"`` -> 90."""
    match = re.fullmatch(r"(?:sm_?)?(\d{2,3})a?", arch.strip().lower())
    if match is None:
        raise InvalidRequestError("device.arch", f"not a CUDA arch: {arch!r} (expected e.g. sm_90)")
    return int(match.group(1))


def sm80_class_smem_bytes(sm: int) -> int:
    return _SM80_CLASS_SMEM.get(sm, 99 * 1024)


def elements_per_16_bytes(dtype: str) -> int:
    return ALIGNMENT_BYTES // _ELEMENT_BYTES[dtype]


def check_dtype(dtype: str, op: str) -> None:
    if dtype not in _ELEMENT_BYTES:
        raise InvalidRequestError(
            "dtype", f"the CUTLASS {op} templates take f16 or bf16, not {dtype!r}"
        )


def sm80_tile(tm: int, tn: int, tk: int, stages: int) -> Params:
    """The leading params of a CUTLASS 2.x (sm80-class) variant: its tile, warp tile (64 on a
    side of 128 or more, else 32) and pipeline stages."""
    return {
        "library": "cutlass",
        "family": "sm80",
        "tile_m": tm,
        "tile_n": tn,
        "tile_k": tk,
        "warp_m": 64 if tm >= 128 else 32,
        "warp_n": 64 if tn >= 128 else 32,
        "stages": stages,
    }


def sm90_tile(tm: int, tn: int, tk: int, cm: int, cn: int, schedule: str) -> Params:
    """The tile, cluster and kernel schedule params of a CUTLASS 3.x (sm90) variant."""
    return {
        "tile_m": tm,
        "tile_n": tn,
        "tile_k": tk,
        "cluster_m": cm,
        "cluster_n": cn,
        "schedule": schedule,
    }
