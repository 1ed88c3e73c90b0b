"""What one timing of one variant measured: the measurement's field set, declared once.

    MEASURED_FIELDS  # ("median_us", "p20_us", "p80_us", "min_us", "reps", "throughput",
                     #  "throughput_unit", "compile_seconds", "energy_j")

Every consumer takes its fields from :class:`MeasuredValues`, by name:

- the upload (``worker.MeasurementIn``) and the import record (``store.transfer``'s
  ``MeasurementRecord``) inherit it: its bounds and the timing order are checked once;
- the answers (``configs.MeasurementOut``) inherit :data:`MeasuredValuesOut`, the same fields
  as plain types (an answer takes what is stored as it is; the door's checks are the door's);
- the ORM columns of ``measurements`` are made from it (``service.store.models``);
- the agent fills it from the engine's ``BenchResult`` and ``Timing`` by name
  (``agent/wire.py``), the store writes and replays it by name, the export writes it.

A new measured value is therefore three edits: its line here, the field of the same name on
the engine's ``BenchResult`` (or ``Timing``) in ``tuner/types.py``, and an Alembic migration
adding the column. ``tests/service/store/test_measurement_fields.py`` checks that each consumer
carries exactly this set. Clocks, temperatures and throttle flags travel in ``provenance``.
"""

from __future__ import annotations

import functools
import operator
import types
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

from annotated_types import MaxLen
from pydantic import BaseModel, Field, Strict, create_model, model_validator
from pydantic.fields import FieldInfo

from service.schemas.common import INTEGRAL, ResponseModel, SafeStr

__all__ = [
    "MeasuredValues",
    "MeasuredValuesOut",
    "MEASURED_FIELDS",
    "timing_order_error",
    "plain_type",
    "max_length",
]


#: relative slack of the timing order (quantiles of one sample set are ordered; floats round)
_ORDER_SLACK = 1e-9


def timing_order_error(
    median_us: float | None, p20_us: float | None, p80_us: float | None, min_us: float | None
) -> str | None:
    """Why the given timings are not ordered min <= p20 <= median <= p80 (None: they are).
    Every upload, client result and import checks it (one sample set gives them all)."""
    named = (("min_us", min_us), ("p20_us", p20_us), ("median_us", median_us), ("p80_us", p80_us))
    chain = [(name, value) for name, value in named if value is not None]
    for (low, x), (high, y) in zip(chain, chain[1:], strict=False):
        if x > y * (1 + _ORDER_SLACK):
            return (
                f"{low} ({x:g}) is above {high} ({y:g}): timings of one sample set are ordered "
                "min <= p20 <= median <= p80"
            )
    return None


class MeasuredValues(BaseModel):
    """The measured values of one variant on one problem (what the engine's BenchResult
    says of a run), with the bounds a stored value must be within."""

    median_us: float | None = Field(default=None, gt=0, le=1e12)
    p20_us: float | None = Field(default=None, gt=0, le=1e12)
    p80_us: float | None = Field(default=None, gt=0, le=1e12)
    min_us: float | None = Field(default=None, gt=0, le=1e12)
    reps: Annotated[int, Strict(), Field(ge=0, le=2**53), INTEGRAL] | None = None
    #: GB/s for memory-bound ops, TFLOP/s for gemm and conv
    throughput: float | None = Field(default=None, ge=0, le=1e15)
    throughput_unit: SafeStr = Field(default="", max_length=32)
    compile_seconds: float | None = Field(default=None, ge=0, le=1e7)
    #: joules per launch over the timed batches (NVML energy counter); None without one
    energy_j: float | None = Field(default=None, ge=0, le=1e9)

    @model_validator(mode="after")
    def _timings_ordered(self) -> MeasuredValues:
        reason = timing_order_error(self.median_us, self.p20_us, self.p80_us, self.min_us)
        if reason is not None:
            raise ValueError(reason)
        return self


#: the field set, in order
MEASURED_FIELDS: tuple[str, ...] = tuple(MeasuredValues.model_fields)


def plain_type(annotation: Any) -> Any:
    """``annotation`` without its metadata: ``Annotated[int, ...] | None`` -> ``int | None``."""
    if get_origin(annotation) is Annotated:
        return plain_type(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return functools.reduce(operator.or_, [plain_type(a) for a in get_args(annotation)])
    return annotation


def max_length(field: FieldInfo) -> int | None:
    """A text field's ``max_length`` (None where it has none)."""
    return next((m.max_length for m in field.metadata if isinstance(m, MaxLen)), None)


def _answer_model() -> type[BaseModel]:
    fields: dict[str, Any] = {
        name: (plain_type(field.annotation), field.default)
        for name, field in MeasuredValues.model_fields.items()
    }
    return create_model("MeasuredValuesOut", __base__=ResponseModel, **fields)


if TYPE_CHECKING:  # the type checker reads the same fields and types
    MeasuredValuesOut = MeasuredValues
else:
    #: the field set as an answer carries it: plain types, unchecked (what is stored)
    MeasuredValuesOut = _answer_model()
