"""The CLI at 80 columns (issue 24): a GEMM candidates table keeps names and outcomes whole,
one line each, and the progress line keeps its counts whatever the job id's length."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from service.cli.output import candidates_table, progress_columns, progress_description
from service.schemas.configs import MeasurementOut

NAMES = (  # the longest names the CUDA GEMM spaces give (sm90 and cuBLASLt families)
    "gemm_f16_rcr_128x256x64_c2x1_pingpong_splitk4_r2_sw4",
    "gemm_f16_rcr_lt_a66_t18_s35_k1_r0_w0_c0_i0_cl2",
    "gemm_f16_rcr_64x64x32_w2x2_s3",
)
OUTCOMES = ("ok", "aborted_slow", "compile_error")


def _measurement(index: int, name: str, outcome: str) -> MeasurementOut:
    ok = outcome == "ok"
    return MeasurementOut.model_validate(
        {
            "id": index,
            "job_id": "j",
            "task_id": "t",
            "op": "gemm",
            "dtype": "f16",
            "layout": "rcr",
            "problem": {"m": 4096, "n": 4096, "k": 4096},
            "variant_id": f"sha-{index}",
            "variant_name": name,
            "params": {},
            "outcome": outcome,
            "median_us": 1234.5 if ok else None,
            "p20_us": 1200.0 if ok else None,
            "p80_us": 1300.0 if ok else None,
            "min_us": None,
            "reps": 10,
            "throughput": 1111.3 if ok else None,
            "throughput_unit": "TFLOP/s",
            "compile_seconds": 1.0,
            "log": "",
            "provenance": {},
            "suspect": False,
            "device": {"backend": "cuda"},
            "toolchain": {},
            "created_at": "2026-12-04T00:00:00Z",
        }  # fmt: skip
    )


def _render(renderable: object, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return text.splitlines()


def test_gemm_candidates_at_80_columns_keep_names_and_outcomes_whole() -> None:
    rows = [_measurement(i, n, o) for i, (n, o) in enumerate(zip(NAMES, OUTCOMES, strict=True))]
    for width in (80, 100, 160):
        lines = _render(candidates_table(rows, {NAMES[0]}, width), width)
        assert max(len(line) for line in lines) <= width, "\n".join(lines)
        for name, outcome in zip(NAMES, OUTCOMES, strict=True):
            (line,) = [line for line in lines if name in line]  # whole, on one line
            assert outcome in line.split(), line
    wide = "\n".join(_render(candidates_table(rows, {NAMES[0]}, 160), 160))
    assert "1,111.3 TFLOP/s" in wide and "1,200.0-1,300.0" in wide  # room: every column


def test_the_progress_line_keeps_its_counts_with_a_32_character_job_id() -> None:
    console = Console(width=80, file=io.StringIO(), color_system=None)
    with Progress(*progress_columns(), console=console, auto_refresh=False) as progress:
        task = progress.add_task(
            progress_description("0123456789abcdef0123456789abcdef", "running", 1, 3),
            total=64,
            completed=12,
        )
        progress.update(task, completed=12)
        progress.refresh()
    text = console.file.getvalue()  # type: ignore[attr-defined]
    last = text.replace("\r", "\n").strip().splitlines()[-1]
    assert "12/64" in last and "1/3 tasks" in last and "running" in last, last
    assert "01234567" in last  # enough of the id to tell jobs apart
