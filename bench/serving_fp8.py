"""FP8 GEMM with scales on the linear layers of a public dense model (Qwen2.5-7B: hidden 3584,
intermediate 18944, 28 query and 4 KV heads of 128) at decode (m = 1, 8, 32) and prefill
(m = 2048): tunehub's answer against ``torch._scaled_mm`` (cuBLASLt's FP8 default), side by side
in one process, and decode against the weight-streaming limit bytes(W in FP8) / copy rate.

    python3 bench/serving_fp8.py --out $OUT/serving-fp8.json [--scaling per_tensor]
    python3 bench/serving_fp8.py --list | sh   # precompile here (no GPU), carry the cache

Phase 1 tunes each shape with the engine, as a job does (bench/serving_common.py): the space's
order for the shape (cuBLASLt's default first, then our swap-AB, decode and CUTLASS heads), a
budget of the default, that head and ``--extra-vendor`` more cuBLASLt algorithms (discovered on
the device: their builds link cuBLASLt and take seconds; the rest precompiled), every candidate
verified against the f32 reference of the dequantized inputs and timed, the contenders timed
again in confirmation rounds, and the winner decided by the engine's rule (tuner/winner.py: a
kernel that cannot be told from cuBLASLt's default does not displace it). Phase 2 times the
winner's artifact (``tunehub``) and ``torch._scaled_mm`` on the same rotated input sets in
interleaved rounds. ``torch._scaled_mm`` takes per-tensor scales; block scaling's baseline is
``torch._scaled_mm`` with 1x128 / 128x128 scales where this torch accepts them, else none (the
row says why in ``torch_error``).

The two calls write their outputs differently: the harness gives each input set its own output
(``tunehub``: output set i with input set i), while torch's result is dropped, so its caching
allocator hands every launch of the captured graph the same buffer, which stays in L2. Each row
therefore also times both on the same buffers (as bench/conv_compare.py does for conv2d):
``tunehub_fixed_out`` (the winner, every launch writing output set 0: torch's conditions) and
``torch_scaled_mm_out_rotated`` (``torch._scaled_mm(..., out=)`` into the harness's output of
each set: tunehub's). ``same_buffers`` holds both ratios (``fixed``: ``torch_scaled_mm`` over
``tunehub_fixed_out``; ``rotated``: ``torch_scaled_mm_out_rotated`` over ``tunehub``); the
targets are judged on ``fixed``, the buffers a model's call gets (tunehub's torch op allocates
its output as torch does). ``speedup`` keeps the mixed ratio (torch fixed over tunehub rotated)
that pages before 2026-12-07 reported.

Decode rows also time ``copy_w_bytes`` in the same rounds: an SM copy (torch's elementwise
``bitwise_not``) moving as many bytes as the weights (bytes(W) / 2 read, as many written) on as
many rotated buffers as the kernels' input sets. ``of_same_size_copy`` (its time over ours) is
the measured limit at the layer's own size: the fixed cost of a launch and of filling and
draining the memory pipeline, which a 1 GiB copy's rate hides, is in both.

Targets (issue 26): same-buffer speedup >= 1.05x geomean, none below 0.98x; decode (m <= 16)
>= 0.85 of the streaming limit. Writes the JSON to --out and the table beside it (the same
name, ``.md``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serving_common import compare_rows, run, tune_rows  # noqa: E402
from bench.vendor_common import (  # noqa: E402
    FIXED_OUT,
    Timer,
    artifact_timer,
    geomean,
    launch_timer,
)
from tuner.problems import ScaledGemmProblem  # noqa: E402
from tuner.spaces.cuda_scaled_gemm import head_size  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402

MODEL = "Qwen/Qwen2.5-7B"
#: (layer, n, k) of one decoder layer's linears (QKV and gate/up fused, as serving stacks run)
LAYERS = (
    ("qkv_proj", 3584 + 2 * 4 * 128, 3584),
    ("o_proj", 3584, 3584),
    ("gate_up_proj", 2 * 18944, 3584),
    ("down_proj", 3584, 18944),
)
MS = (1, 8, 32, 2048)
SCALINGS = ("per_tensor", "block")
DECODE_MAX_M = 16
TARGET_GEOMEAN, TARGET_FLOOR, TARGET_STREAM = 1.05, 0.98, 0.85
#: the label of the user's call in the rows (bench/regress.py compares against it too)
SCALED_MM = "torch_scaled_mm"
#: torch._scaled_mm writing into the harness's output of each input set (tunehub's buffers)
SCALED_MM_ROTATED = "torch_scaled_mm_out_rotated"
#: tunehub's winner writing output set 0 on every launch (torch's buffers)
TUNEHUB_FIXED = "tunehub" + FIXED_OUT
#: the label of the same-size copy of decode rows
WEIGHT_COPY = "copy_w_bytes"
COMPARE_ROUNDS = 5
COMPARE_TIMING = {"warmup_s": 0.02, "bench_s": 0.1, "min_samples": 10, "max_samples": 10_000}
#: the bytes the copy rate of the streaming limit is measured on
COPY_BYTES = 1 << 30


def problems(scalings: list[str]) -> list[tuple[str, ScaledGemmProblem]]:
    return [
        (layer, ScaledGemmProblem(m, n, k, "bf16", scaling))
        for scaling in scalings
        for layer, n, k in LAYERS
        for m in MS
    ]


def budget_variants(m: int, extra_vendor: int) -> int:
    """Candidates per shape: cuBLASLt's default, our head for ``m``, ``extra_vendor`` more."""
    return 1 + head_size(m) + extra_vendor


def list_commands(scalings: list[str], extra_vendor: int) -> list[str]:
    """The bench/precompile_cuda.py commands (one per scaling and token count: the budget
    depends on m) that build what phase 1 tunes, but the cuBLASLt algorithms."""
    commands = []
    for scaling in scalings:
        for m in MS:
            argv = ["python", "bench/precompile_cuda.py", "--cache-dir", ".cache/tunehub"]
            argv += ["--arch", "sm_90", "--op", "scaled_gemm", "--dtype", "e4m3"]
            for _, p in problems([scaling]):
                if p.m == m:
                    argv += ["--problem", ",".join(f"{k}={v}" for k, v in p.dims().items())]
            argv += ["--max-variants", str(budget_variants(m, extra_vendor))]
            commands.append(shlex.join(argv))
    return commands


def _scaled_mm_launcher(
    torch: Any, work: Any, problem: ScaledGemmProblem, rotated_out: bool = False
) -> Any:
    """``fn(set, stream)`` calling torch._scaled_mm on the workload's sets: its result dropped
    (torch's allocator gives every launch one buffer), or with ``rotated_out`` written into
    the workload's output of each set (``out=``). The first call raises where torch refuses."""

    def call(i: int, stream: int) -> None:
        a, b, sa, sb = work.inputs[i]
        out = {"out": work.outputs[i]} if rotated_out else {}
        if problem.scaling == "block":  # activations 1x128 (M-major), weights 128x128
            sa, sb = sa.t(), sb.t()
        torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, **out)

    call(0, 0)
    torch.cuda.synchronize()
    return call


def scaled_mm_timers(
    torch: Any,
    harness: Any,
    req: dict[str, Any],
    problem: ScaledGemmProblem,
    timing: dict[str, Any],
) -> dict[str, Timer]:
    """``torch_scaled_mm``: torch._scaled_mm on the harness's input sets of ``req`` (per-tensor
    scales, or block scaling's 1x128 / 128x128), each window ``timing``. A torch that refuses
    the scales raises here (RuntimeError from its first call), not in the rounds."""
    work = harness.workload_for(req)
    call = _scaled_mm_launcher(torch, work, problem)
    return {SCALED_MM: launch_timer(harness, call, len(work.inputs), timing)}


def same_buffer_timers(
    torch: Any, harness: Any, req: dict[str, Any], row: dict[str, Any]
) -> dict[str, Timer]:
    """The row's two calls on the same buffers: ``tunehub_fixed_out`` (torch's: one output
    for every launch) and ``torch_scaled_mm_out_rotated`` (tunehub's: the output of each
    input set). A torch that refuses ``out=`` leaves its label out and says why in the row."""
    timers = {TUNEHUB_FIXED: artifact_timer(harness, req, row["artifact"], fixed_output=True)}
    work = harness.workload_for(req)
    try:
        call = _scaled_mm_launcher(torch, work, ScaledGemmProblem(**row["problem"]), True)
    except (RuntimeError, TypeError, ValueError) as exc:
        row["torch_out_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return timers
    timers[SCALED_MM_ROTATED] = launch_timer(harness, call, len(work.inputs), COMPARE_TIMING)
    return timers


def phase_tune(args: argparse.Namespace, config: EngineConfig, deadline: float) -> list[dict]:
    requests = []
    for layer, problem in problems(args.scaling.split(",")):
        budget = Budget(
            max_variants=budget_variants(problem.m, args.extra_vendor),
            max_seconds=args.shape_seconds,
        )
        label = {"model": MODEL, "layer": layer, "layout": "rcr", **problem.dims()}
        request = TuneRequest("scaled_gemm", "e4m3", "rcr", problem, "cuda", budget=budget)
        requests.append(({**label, "problem": problem.dims()}, request))
    return tune_rows(requests, config, deadline)


def weight_copy_timer(torch: Any, harness: Any, req: dict[str, Any], weight_bytes: int) -> Timer:
    """An SM copy moving ``weight_bytes`` (half read, half written) on as many rotated buffers
    as the kernels' input sets of ``req`` (so neither runs from L2), timed as they are (CUDA
    graph). It is torch's elementwise ``bitwise_not``, not ``copy_``: a graph turns a copy into
    a memcpy node that the copy engines run, slower than an SM copy (bench/regress.py)."""
    sets = len(harness.workload_for(req).inputs)
    half = weight_bytes // 2
    sources = [torch.full((half,), i + 1, dtype=torch.uint8, device="cuda") for i in range(sets)]
    targets = [torch.empty_like(src) for src in sources]
    return launch_timer(
        harness,
        lambda i, stream: torch.bitwise_not(sources[i], out=targets[i]),
        sets,
        COMPARE_TIMING,
    )


def _torch_timers(torch: Any, harness: Any, req: dict[str, Any], row: dict) -> dict[str, Timer]:
    """``torch_scaled_mm`` of the row (none where this torch refuses its scales: the row keeps
    why), and at decode the copy of as many bytes as the weights."""
    timers: dict[str, Timer] = {}
    if row["m"] <= DECODE_MAX_M:
        timers[WEIGHT_COPY] = weight_copy_timer(torch, harness, req, row["n"] * row["k"])
    try:
        timers.update(
            scaled_mm_timers(
                torch, harness, req, ScaledGemmProblem(**row["problem"]), COMPARE_TIMING
            )
        )
    except (RuntimeError, TypeError, ValueError) as exc:
        row["torch_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return timers
    timers.update(same_buffer_timers(torch, harness, req, row))
    return timers


def same_buffer_ratios(times: dict[str, float]) -> dict[str, float]:
    """torch's time over tunehub's on the same buffers: ``fixed`` (one output, torch's
    conditions) and ``rotated`` (each set's output, tunehub's); a pair not timed is left out."""
    pairs = {"fixed": (SCALED_MM, TUNEHUB_FIXED), "rotated": (SCALED_MM_ROTATED, "tunehub")}
    return {
        name: times[theirs] / times[ours]
        for name, (theirs, ours) in pairs.items()
        if times.get(theirs) and times.get(ours)
    }


def phase_compare(rows: list[dict[str, Any]], deadline: float) -> None:
    compare_rows(
        rows,
        deadline,
        dtype="e4m3",
        timing=COMPARE_TIMING,
        rounds=COMPARE_ROUNDS,
        user_timers=_torch_timers,
    )
    from tuner.backends.cuda_harness import Harness, probe

    copy_gbps = float(Harness(probe()).copy({"bytes": COPY_BYTES})["gb_per_s"])
    for row in rows:
        row["copy_gbps"] = copy_gbps
        row["stream_limit_us"] = row["n"] * row["k"] / (copy_gbps * 1e3)  # bytes(W) / copy
        times = row.get("times_us", {})
        if same := same_buffer_ratios(times):
            row["same_buffers"] = same
        ours = times.get("tunehub")
        if ours:
            row["of_stream_limit"] = row["stream_limit_us"] / ours
            if WEIGHT_COPY in times:
                row["of_same_size_copy"] = times[WEIGHT_COPY] / ours
            row["tflops"] = ScaledGemmProblem(**row["problem"]).flops() / ours / 1e6


def winner_source(row: dict[str, Any]) -> str | None:
    """Where cuBLASLt discovery found the row's winner (``heuristic`` or ``enumerated``), or
    None when the winner is not one of cuBLASLt's algorithms."""
    for candidate in row.get("candidates", []):
        if candidate["name"] == row.get("winner"):
            return candidate.get("source")
    return None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per scaling: the geomean and lowest speedup over ``torch._scaled_mm`` on the same
    buffers (``fixed``, judged; ``rotated``) and mixed (``speedup``, as pages before
    2026-12-07), and the lowest share of the streaming limit at decode, against the targets."""
    out: dict[str, Any] = {}
    for scaling in sorted({r["scaling"] for r in rows}):
        mine = [r for r in rows if r["scaling"] == scaling]
        fixed = [r["same_buffers"]["fixed"] for r in mine if "fixed" in r.get("same_buffers", {})]
        rotated = [
            r["same_buffers"]["rotated"] for r in mine if "rotated" in r.get("same_buffers", {})
        ]
        mixed = [r["speedup"][SCALED_MM] for r in mine if SCALED_MM in r.get("speedup", {})]
        decode = [r for r in mine if r["m"] <= DECODE_MAX_M]
        stream = [r["of_stream_limit"] for r in decode if r.get("of_stream_limit")]
        same_size = [r["of_same_size_copy"] for r in decode if r.get("of_same_size_copy")]
        out[scaling] = {
            "geomean_speedup": geomean(fixed) if fixed else None,
            "min_speedup": min(fixed) if fixed else None,
            "geomean_speedup_rotated": geomean(rotated) if rotated else None,
            "min_speedup_rotated": min(rotated) if rotated else None,
            "geomean_speedup_mixed": geomean(mixed) if mixed else None,
            "min_speedup_mixed": min(mixed) if mixed else None,
            "decode_min_of_stream_limit": min(stream) if stream else None,
            "decode_min_of_same_size_copy": min(same_size) if same_size else None,
            "rows_compared": len(fixed),
            "enumerated_tried": sum(
                c.get("source") == "enumerated" for r in mine for c in r.get("candidates", [])
            ),
            "enumerated_winners": sum(winner_source(r) == "enumerated" for r in mine),
            "targets": {
                "geomean": TARGET_GEOMEAN,
                "floor": TARGET_FLOOR,
                "stream": TARGET_STREAM,
            },
        }
    return out


def write_page(path: Path, payload: dict[str, Any]) -> None:
    """The table of ``payload`` (what :func:`main` wrote to the JSON) as markdown."""
    meta = payload["meta"]

    def fmt(value: Any, spec: str = ".2f") -> str:
        return format(value, spec) if isinstance(value, float) else "-"

    lines = [
        f"# FP8 GEMM on {MODEL}'s linears ({meta.get('device')}, {meta.get('date')})",
        "",
        f"`{meta['command']}`; torch {meta.get('torch')}",
        "",
        "Microseconds; `rot`: each input set's own output (tunehub's harness), `fixed`: one",
        "output for every launch (what torch's allocator gives torch._scaled_mm). `x fixed` =",
        "torch fixed / tunehub fixed (the figure judged), `x rot` = torch out= rot / tunehub",
        "rot, `x mixed` = torch fixed / tunehub rot (pages before 2026-12-07). A winner",
        "marked (enumerated) is a cuBLASLt algorithm found beyond the heuristic's list.",
        "",
        "| scaling | layer | m | n | k | winner | tunehub rot | tunehub fixed | torch fixed "
        "| torch rot | x fixed | x rot | x mixed | of limit | of copy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["rows"]:
        times = r.get("times_us", {})
        same = r.get("same_buffers", {})
        winner = r.get("winner") or r.get("tune_error", "-")
        if winner_source(r) == "enumerated":
            winner += " (enumerated)"
        lines.append(
            f"| {r['scaling']} | {r['layer']} | {r['m']} | {r['n']} | {r['k']} | "
            f"{winner} | {fmt(times.get('tunehub'))} | "
            f"{fmt(times.get(TUNEHUB_FIXED))} | {fmt(times.get(SCALED_MM))} | "
            f"{fmt(times.get(SCALED_MM_ROTATED))} | {fmt(same.get('fixed'), '.3f')} | "
            f"{fmt(same.get('rotated'), '.3f')} | "
            f"{fmt(r.get('speedup', {}).get(SCALED_MM), '.3f')} "
            f"| {fmt(r.get('of_stream_limit'))} | {fmt(r.get('of_same_size_copy'))} |"
        )
    lines += ["", "```", json.dumps(payload["totals"], indent=2), "```"]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the JSON file to write")
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--scaling", default=",".join(SCALINGS))
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--compare-reserve-s", type=float, default=120.0)
    parser.add_argument("--shape-seconds", type=float, default=15.0)
    parser.add_argument(
        "--extra-vendor",
        type=int,
        default=4,
        help="cuBLASLt algorithms beyond its default in each shape's budget",
    )
    parser.add_argument("--list", action="store_true", help="print the precompile commands")
    args = parser.parse_args()
    unknown = set(args.scaling.split(",")) - set(SCALINGS)
    if unknown:
        parser.error(f"--scaling: unknown {sorted(unknown)} (choose from {list(SCALINGS)})")
    if args.list:
        print("\n".join(list_commands(args.scaling.split(","), args.extra_vendor)))
        return 0
    if args.out is None:
        parser.error("--out is required")
    status = run(args, phase_tune, phase_compare, summarize, COMPARE_ROUNDS)
    write_page(args.out.with_suffix(".md"), json.loads(args.out.read_text()))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
