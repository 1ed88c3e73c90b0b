"""What every CPU space shares: storage types of the C++ harness and request checks."""

from __future__ import annotations

from tuner.errors import InvalidRequestError

__all__ = ["STORAGE_TYPES", "check_dtype_layout"]

#: storage dtype -> the C++ type kernel_templates/cpu/_harness.h stores it as
STORAGE_TYPES: dict[str, str] = {"f32": "float", "f16": "_Float16", "bf16": "th::bf16_t"}


def check_dtype_layout(op: str, dtype: str, layout: str, layouts: tuple[str, ...]) -> None:
    """Raise InvalidRequestError unless the CPU templates can store ``dtype`` in ``layout``."""
    if dtype not in STORAGE_TYPES:
        supported = sorted(STORAGE_TYPES)
        raise InvalidRequestError("dtype", f"cpu {op} supports {supported}, not {dtype!r}")
    if layout not in layouts:
        raise InvalidRequestError("layout", f"cpu {op} supports {list(layouts)}, not {layout!r}")
