"""Throughput units per magnitude (tuner.units): the one rule of the CLI and the web UI."""

from __future__ import annotations

import pytest

from tuner.units import axis_scale, format_rate, scale_rate


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (0.0523, "TFLOP/s", (52.3, "GFLOP/s")),  # a CPU GEMM, not "0.1 TFLOP/s"
        (0.0004, "TFLOP/s", (400.0, "MFLOP/s")),
        (612.0, "TFLOP/s", (612.0, "TFLOP/s")),
        (1111.3, "TFLOP/s", (1111.3, "TFLOP/s")),  # the stored unit is the largest
        (4117.0, "GB/s", (4117.0, "GB/s")),
        (0.4, "GB/s", (400.0, "MB/s")),
        (3.0, "GFLOP/s", (3.0, "GFLOP/s")),
        (5.0, "widgets/s", (5.0, "widgets/s")),  # not a known family: as it is
    ],
)
def test_a_rate_is_shown_in_the_largest_unit_where_it_is_at_least_one(
    value: float, unit: str, expected: tuple[float, str]
) -> None:
    scaled, name = scale_rate(value, unit)
    assert (round(scaled, 6), name) == expected


def test_an_axis_takes_the_unit_of_its_largest_value_and_text_keeps_three_digits() -> None:
    assert axis_scale([0.01, 0.0523], "TFLOP/s") == (1000.0, "GFLOP/s")
    assert axis_scale([], "GB/s") == (1.0, "GB/s")
    assert format_rate(4117.0, "GB/s") == "4,117 GB/s"
    assert format_rate(0.0523, "TFLOP/s") == "52.3 GFLOP/s"
    assert format_rate(0.00123, "TFLOP/s") == "1.23 GFLOP/s"
    assert format_rate(2.8, "GB/s") == "2.80 GB/s"
    assert format_rate(0.5, "MB/s") == "0.5 MB/s"
    assert format_rate(None, "GB/s") == "–"
