"""bench/softmax_bulk.py without a GPU: which variants each shape times, the table, the command
line's listing and its bad arguments."""

from __future__ import annotations

import pytest

from bench import softmax_bulk as sb


def test_issue_22_shapes_come_first() -> None:
    assert sb.SHAPES[:2] == [(5341, 50257), (4, 256000)]


def test_labels_time_the_family_beside_the_existing_head_and_the_recorded_winner() -> None:
    names = list(sb.labels(5341, 50257))
    bulk = [n for n in names if n.endswith(("_bulk", "_bulkp"))]
    existing = [n for n in names if n not in bulk]
    assert len(bulk) == 14 and names[: len(bulk)] == bulk
    # the order's head, then the winner bench/regress_baseline.json records for the shape
    assert len(existing) == sb.EXISTING_HEAD + 1
    assert existing[-1] == sb.recorded_winner(5341, 50257) == "softmax_f16_p8_c2_t256_smem"
    few = sb.labels(4, 256000)
    assert "softmax_f16_p8_grid_t256_reg" in few  # recorded winner, and first in the order
    # two buffers of a share of a 500 KB row do not fit: no persistent variant
    assert not any(n.endswith("_bulkp") for n in few)
    assert sb.recorded_winner(3, 3) is None


def test_table_shows_best_of_each_and_skipped_shapes() -> None:
    row = {
        "m": 4,
        "k": 256000,
        "copy_gbps": 4100.0,
        "best_bulk": "softmax_f16_p8_c16_t512_bulk",
        "best_existing": "softmax_f16_p8_grid_t256_reg",
        "labels": {
            "softmax_f16_p8_c16_t512_bulk": {"gbps": 1230.0, "x_copy": 0.3},
            "softmax_f16_p8_grid_t256_reg": {"gbps": 640.0, "x_copy": 0.156},
            "torch": {"gbps": 95.0, "x_copy": 0.023},
        },
    }
    text = sb.table([row, {"m": 1, "k": 128256, "skipped": "deadline"}])
    assert "| 4 x 256000 | `softmax_f16_p8_c16_t512_bulk` | 1230 (0.300) |" in text
    assert "640 (0.156)" in text and "95 (0.023)" in text and "| 4100 |" in text
    assert "| 1 x 128256 | deadline |" in text


def test_list_prints_every_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert sb.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(sb.SHAPES)
    assert lines[0].startswith("5341 x 50257: softmax_f16_p8_c") and "_bulkp" in lines[0]
    assert all(line.endswith("torch copy") for line in lines)


def test_bad_deadline_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        sb.main(["--deadline", "0", "--list"])
    assert exc.value.code == 2
