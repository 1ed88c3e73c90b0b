"""Phase 2 of bench/vs_vendor_conv.py on the GPU host: re-time each row's winner, its cuDNN
default and torch's conv2d in this process, interleaved per shape on the same inputs.

Labels of a row's ``times_us`` (medians, microseconds; bench/conv_report.py explains them on
the page):

- ``tunehub``, ``cudnn_default``: the artifacts in the harness, output set i written with
  input set i (the tuning conditions);
- ``tunehub_fixed_out``, ``cudnn_default_fixed_out``: the same, every launch writing output
  set 0 (the harness's ``fixed_output``: torch's conditions below);
- ``torch``: torch.nn.functional.conv2d, benchmark off; its result is dropped, so torch's
  caching allocator hands every launch of the captured graph the same buffer;
  ``torch_benchmark``: the same with cudnn.benchmark on (cuDNN's own engine search);
- ``torch_out_rotated``: ``torch.ops.aten.cudnn_convolution.out``, the op F.conv2d reaches on
  this path (``_convolution`` -> ``cudnn_convolution``, the same cuDNN call with the same
  benchmark / deterministic / TF32 flags), writing straight into the harness's output of each
  input set: torch under tunehub's conditions, with no copy (a ``copy_`` into a rotated buffer
  would add a kernel; the op's own ``out=`` does not);
- ``torch_out_fixed``: that op into output set 0, the control that it times like ``torch``.

The ``.out`` op's result is verified against the reference once before it is timed; a wrong
or missing op is recorded in ``compare_errors`` and its columns stay empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.vendor_common import (
    FIXED_OUT,
    Timer,
    artifact_timer,
    interleaved_medians,
    launch_timer,
)
from tuner.problems import Conv2dProblem

__all__ = ["phase_compare", "compare_row", "TIMING"]

#: the harness request's timing fields for every label (torch's timings use the same)
TIMING = {"warmup_s": 0.03, "bench_s": 0.05, "min_samples": 10, "max_samples": 10_000}
#: every label timed once a round, the order rotated, COMPARE_ROUNDS rounds
COMPARE_ROUNDS = 3


def _error(row: dict[str, Any], label: str, exc: BaseException | str) -> None:
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    row.setdefault("compare_errors", {})[label] = text[:300]


def _verified(
    torch: Any, harness: Any, row: dict[str, Any], dtype: str, run_once: Callable[[], None]
) -> bool:
    """Poison output set 0, ``run_once()`` (it writes set 0) and check it as the harness checks
    a variant; the max error goes into the row, a failure into ``compare_errors``."""
    work = harness.workload
    try:
        work.outputs[0].view(torch.uint8).fill_(0xFF)
        run_once()
        torch.cuda.synchronize()
        verdict = harness.wl.verify_output(work, dtype)
    except Exception as exc:  # the op is missing in this torch, or refuses the views
        _error(row, "torch_out", exc)
        return False
    row["torch_out_max_abs_error"] = verdict.max_abs_error
    if not verdict.ok:
        _error(row, "torch_out", f"wrong result: {verdict.message}")
    return verdict.ok


def compare_row(torch: Any, harness: Any, row: dict[str, Any], req: dict[str, Any]) -> None:
    """Every label of the module doc for one row, into ``row["times_us"]``."""
    artifacts = {"tunehub": row["artifact"], "cudnn_default": row["vendor_default_artifact"]}
    timers: dict[str, Timer] = {}
    for label, artifact in artifacts.items():
        if artifact:
            timers[label] = artifact_timer(harness, req, artifact)
            timers[label + FIXED_OUT] = artifact_timer(harness, req, artifact, fixed_output=True)
    work = harness.workload_for(req)
    # the same NHWC / KRSC / NPQK storage viewed as channels_last NCHW tensors (no copy)
    sets = [
        (ins[0].permute(0, 3, 1, 2), ins[1].permute(0, 3, 1, 2), out.permute(0, 3, 1, 2))
        for ins, out in zip(work.inputs, work.outputs, strict=True)
    ]
    stride, pad, dilation = row["stride"], row["pad"], row["dilation"]

    def conv_only(i: int, stream: int) -> None:
        x, w, _ = sets[i]
        torch.nn.functional.conv2d(x, w, stride=stride, padding=pad, dilation=dilation)

    def conv_out(i: int, out_set: int) -> None:
        x, w, _ = sets[i]
        flags = torch.backends.cudnn
        torch.ops.aten.cudnn_convolution.out(
            x,
            w,
            [pad, pad],
            [stride, stride],
            [dilation, dilation],
            1,  # groups
            bool(flags.benchmark),
            bool(flags.deterministic),
            bool(flags.allow_tf32),
            out=sets[out_set][2],
        )

    def with_benchmark(timer: Timer) -> Timer:
        # cuDNN times its engines on the first call, outside the graph: where this beats
        # "torch", a faster engine exists
        def run() -> list[float]:
            torch.backends.cudnn.benchmark = True
            try:
                return timer()
            finally:
                torch.backends.cudnn.benchmark = False

        return run

    count = len(sets)
    torch.backends.cudnn.benchmark = False  # torch's default: cuDNN's heuristic choice
    timers["torch"] = launch_timer(harness, conv_only, count, TIMING)
    if _verified(torch, harness, row, req["dtype"], lambda: conv_out(0, 0)):
        timers["torch_out_rotated"] = launch_timer(
            harness, lambda i, stream: conv_out(i, i), count, TIMING
        )
        timers["torch_out_fixed"] = launch_timer(
            harness, lambda i, stream: conv_out(i, 0), count, TIMING
        )
    timers["torch_benchmark"] = with_benchmark(launch_timer(harness, conv_only, count, TIMING))
    times = interleaved_medians(timers, row, COMPARE_ROUNDS)
    torch.cuda.synchronize()
    row["times_us"] = times


def phase_compare(rows: list[dict[str, Any]], deadline: float, dtype: str, layout: str) -> None:
    """Re-time every row (see the module doc); past ``deadline`` a row says so and is skipped."""
    import torch

    from tuner.backends.cuda_harness import Harness, probe

    harness = Harness(probe())
    for row in rows:
        if time.monotonic() > deadline:
            row["compare_error"] = "deadline"
            continue
        problem = {k: row[k] for k in Conv2dProblem.dim_names}
        req = {
            "cmd": "run",
            "op": "conv2d",
            "dtype": dtype,
            "layout": layout,
            "problem": problem,
            "seed": 0,
            **TIMING,
            "abort_us": None,
        }
        compare_row(torch, harness, row, req)
        times = row["times_us"]
        flops = Conv2dProblem(**problem).flops()
        row["tflops"] = {name: flops / us / 1e6 for name, us in times.items()}
        print(
            f"[compare] {row['model']} {row['layer']} n={row['n']}: "
            + " ".join(f"{k}={v:.2f}us" for k, v in times.items()),
            flush=True,
        )
