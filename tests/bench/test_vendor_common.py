"""bench/vendor_common.py's interleaved timing: rounds in rotated order, the median of round
medians, and a failing label recorded without stopping the others (stand-in timers)."""

from __future__ import annotations

from typing import Any

from bench.vendor_common import interleaved_medians


def test_rounds_rotate_the_order_and_take_the_median_of_round_medians() -> None:
    calls: list[str] = []
    samples = {"a": [[5.0, 7.0, 6.0], [1.0], [9.0]], "b": [[2.0], [2.0], [4.0]], "c": [[3.0]] * 3}

    def timer(label: str) -> Any:
        def run() -> list[float]:
            calls.append(label)
            return samples[label][sum(1 for c in calls if c == label) - 1]

        return run

    row: dict[str, Any] = {}
    times = interleaved_medians({label: timer(label) for label in "abc"}, row, rounds=3)
    # no label is always first, or always after the same one
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert times == {"a": 6.0, "b": 2.0, "c": 3.0}
    assert "compare_errors" not in row


def test_a_failing_label_is_recorded_and_leaves_the_later_rounds() -> None:
    calls: list[str] = []

    def good() -> list[float]:
        calls.append("good")
        return [1.0]

    def bad() -> list[float]:
        calls.append("bad")
        raise RuntimeError("launch failed")

    row: dict[str, Any] = {}
    times = interleaved_medians({"bad": bad, "good": good}, row, rounds=3)
    assert times == {"good": 1.0}
    assert calls.count("bad") == 1 and calls.count("good") == 3
    assert "launch failed" in row["compare_errors"]["bad"]
