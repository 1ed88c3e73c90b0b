"""Turning the engine's InvalidRequestError into a 422 that names the field."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from service.errors import InvalidInput
from tuner.errors import InvalidRequestError
from tuner.problems import LAYOUTS, Problem, check_op_dtype, problem_from_dict
from tuner.registry import SPACES

__all__ = [
    "parse_problem",
    "check_layout",
    "check_dtype",
    "check_backend",
    "query_dims",
    "usable_id",
]

_INT = re.compile(r"^[+-]?\d{1,30}$")


def parse_problem(
    op: str, fields: Any, loc: Sequence[str | int], dtype: str | None = None
) -> Problem:
    """The op's problem from a dict, or InvalidInput at ``loc`` + the offending field. With
    ``dtype`` (already checked for ``op``) the dims are checked against it too (grouped_gemm
    e4m3: n and k multiples of 16; ``tuner.problems.check_problem_dtype``)."""
    if not isinstance(fields, Mapping):
        raise InvalidInput(list(loc), "must be an object of dims")
    # JSON has one number type: a dim sent as 4096.0 is the integer 4096
    dims = {
        name: int(value) if isinstance(value, float) and value.is_integer() else value
        for name, value in fields.items()
    }
    try:
        return problem_from_dict(op, dims, dtype)
    except InvalidRequestError as exc:
        where = list(loc) if exc.field == "problems" else [*loc, exc.field]
        raise InvalidInput(where, exc.reason) from None


def check_layout(op: str, layout: str | None, loc: Sequence[str | int]) -> str:
    """``layout`` if valid for ``op``, or the op's default when None."""
    if layout is None:
        return LAYOUTS[op][0]
    if layout not in LAYOUTS[op]:
        raise InvalidInput(list(loc), f"layout {layout!r} is not one of {LAYOUTS[op]} for op {op}")
    return layout


def check_dtype(op: str, dtype: str, loc: Sequence[str | int]) -> str:
    """``dtype`` if ``op`` takes it (tuner.problems.OP_DTYPES: scaled_gemm e4m3 alone,
    grouped_gemm bf16, f16 or e4m3, the others f16, bf16, f32)."""
    try:
        return check_op_dtype(op, dtype)
    except InvalidRequestError as exc:
        raise InvalidInput(list(loc), exc.reason) from None


def check_backend(op: str, backend: str, loc: Sequence[str | int]) -> str:
    """``backend`` if it has a variant space for ``op`` (scaled_gemm has none on cpu)."""
    if (op, backend) not in SPACES:
        raise InvalidInput(list(loc), f"the {backend} backend has no variant space for op {op}")
    return backend


def query_dims(params: Any, known: set[str]) -> dict[str, Any]:
    """Problem dims from query parameters: integers parsed, other values kept as text."""
    dims: dict[str, Any] = {}
    for name in params.keys():
        if name in known:
            continue
        values = params.getlist(name)
        if len(values) != 1:
            raise InvalidInput(["query", name], "given more than once")
        value = values[0]
        dims[name] = int(value) if _INT.match(value) else value
    return dims


def usable_id(value: str | None) -> bool:
    """Whether an id from a path or query can be looked up at all (PostgreSQL refuses NUL)."""
    return value is not None and 0 < len(value) <= 64 and "\x00" not in value
