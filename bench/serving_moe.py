"""Grouped GEMM on a mixture-of-experts model (issue 26, item 2): tunehub's tuned winner per
token bucket against ``torch._grouped_mm`` and a loop of per-expert matmuls, side by side in one
process, in one GPU run.

    # here (no GPU): build every variant the run tunes, then carry .cache/tunehub
    python bench/serving_moe.py --list-precompile | sh
    # on the H200, in one device call:
    python3 bench/serving_moe.py --out $OUT/serving-moe.json [--deadline-s 540]

Model: Mixtral-8x7B (E = 8 experts, hidden 4096, ffn 14336, top-2), bf16, both expert GEMMs
of a layer: ``gate_up`` (w1 and w3 stacked: n 28672, k 4096) and ``down`` (w2: n 4096,
k 14336); each expert's weight stored [n, k] as torch's Linear stores it.
Buckets (tokens routed = batch x top-2, skew = max / mean tokens of an expert, tuner/moe.py):
decode (batch 8: tokens 16), mid (batch 256: tokens 512), prefill (batch 4096: tokens 8192), all
at skew 2. The input of a bucket is its deterministic distribution ``tuner.moe.token_counts``.

Phase 1 tunes each problem with the engine (both families; budget ``--max-variants``). Phase 2
times in this process, interleaved in rounds of rotated order, on the harness's input sets:
- ``tunehub``: the winner's artifact through the harness;
- ``grouped_mm``: ``torch._grouped_mm(A, W.transpose(-2, -1), offs=cumsum(counts))`` (bf16);
- ``loop``: one ``torch.matmul(A_e, W_e.t(), out=D_e)`` per expert with tokens.
Targets: geomean(grouped_mm / tunehub) >= 1.0 and geomean(loop / tunehub) >= 1.5. JSON to --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.vendor_common import (  # noqa: E402
    Timer,
    artifact_timer,
    geomean,
    interleaved_medians,
    launch_timer,
    summary,
)
from tuner.engine import tune  # noqa: E402
from tuner.moe import token_counts  # noqa: E402
from tuner.problems import GroupedGemmProblem  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402

DTYPE = "bf16"
MODEL = "mixtral-8x7b"
EXPERTS = 8
#: (layer, n, k)
LAYERS = [("gate_up", 2 * 14336, 4096), ("down", 4096, 14336)]
#: (bucket, tokens, skew)
BUCKETS = [("decode", 16, 2), ("mid", 512, 2), ("prefill", 8192, 2)]
COMPARE_ROUNDS = 5
COMPARE_TIMING = {"warmup_s": 0.05, "bench_s": 0.1, "min_samples": 10, "max_samples": 10_000}


def problems() -> list[tuple[dict[str, Any], GroupedGemmProblem]]:
    out = []
    for layer, n, k in LAYERS:
        for bucket, tokens, skew in BUCKETS:
            problem = GroupedGemmProblem(EXPERTS, n, k, tokens, skew)
            label = {"model": MODEL, "layer": layer, "bucket": bucket, **problem.dims()}
            out.append((label, problem))
    return out


def precompile_commands(max_variants: int) -> list[str]:
    """The bench/precompile_cuda.py command that builds what phase 1 tunes."""
    argv = ["python", "bench/precompile_cuda.py", "--cache-dir", ".cache/tunehub", "--arch"]
    argv += ["sm_90", "--op", "grouped_gemm", "--dtype", DTYPE]
    for _, problem in problems():
        argv += ["--problem", ",".join(f"{k}={v}" for k, v in problem.dims().items())]
    return [shlex.join([*argv, "--max-variants", str(max_variants)])]


def phase_tune(args: argparse.Namespace, config: EngineConfig, deadline: float) -> list[dict]:
    from tuner.backends.cuda import CudaBackend

    backend = CudaBackend(config)
    rows: list[dict[str, Any]] = []
    try:
        print(f"device {backend.device().key()}", flush=True)
        for label, problem in problems():
            row: dict[str, Any] = {**label, "problem": problem.dims()}
            row["counts"] = token_counts(problem.experts, problem.tokens, problem.skew)
            rows.append(row)
            if time.monotonic() > deadline:
                row["tune_error"] = "deadline"
                continue
            budget = Budget(max_variants=args.max_variants, max_seconds=args.shape_seconds)
            request = TuneRequest("grouped_gemm", DTYPE, "rcr", problem, "cuda", budget=budget)
            started = time.monotonic()
            try:
                result = tune(request, backend, config)
            except Exception as exc:  # recorded; the run goes on
                row["tune_error"] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"[tune] {label}: {row['tune_error']}", flush=True)
                continue
            win = result.winner
            hit = backend.cache.lookup(win.variant_id) if win else None
            row.update(
                seconds=round(time.monotonic() - started, 1),
                winner=win.variant_name if win else None,
                winner_library=win.params.get("library") if win else None,
                winner_us=win.timing.median_us if win and win.timing else None,
                artifact=str(hit.artifact) if hit and hit.artifact else None,
                candidates=[summary(r) for r in result.results],
            )
            print(f"[tune] {label}: {row['winner']} {row['winner_us']} us", flush=True)
    finally:
        backend.close()
    return rows


def vendor_timers(
    torch: Any, harness: Any, req: dict[str, Any], counts: list[int]
) -> dict[str, Timer]:
    """torch._grouped_mm and the per-expert loop on the harness's input sets (A, W, D)."""
    work = harness.workload_for(req)
    rows = sum(counts)
    offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    starts = [sum(counts[:e]) for e in range(len(counts))]
    sets = [(ins[0], ins[1], out) for ins, out in zip(work.inputs, work.outputs, strict=True)]

    def grouped_mm(i: int, stream: int) -> None:
        a, w, _ = sets[i]
        torch._grouped_mm(a[:rows], w.transpose(-2, -1), offs=offs)

    def loop(i: int, stream: int) -> None:
        a, w, d = sets[i]
        for e, m in enumerate(counts):
            if m:
                s = starts[e]
                torch.matmul(a[s : s + m], w[e].t(), out=d[s : s + m])

    timers = {"loop": launch_timer(harness, loop, len(sets), COMPARE_TIMING)}
    if hasattr(torch, "_grouped_mm"):
        timers["grouped_mm"] = launch_timer(harness, grouped_mm, len(sets), COMPARE_TIMING)
    return timers


def phase_compare(rows: list[dict[str, Any]], deadline: float) -> None:
    import torch

    from tuner.backends.cuda_harness import Harness, probe

    harness = Harness(probe())
    for row in rows:
        if not row.get("artifact"):
            continue
        if time.monotonic() > deadline:
            row["compare_error"] = "deadline"
            continue
        req = {
            "cmd": "run",
            "op": "grouped_gemm",
            "dtype": DTYPE,
            "layout": "rcr",
            "problem": row["problem"],
            "seed": 0,
            **COMPARE_TIMING,
            "abort_us": None,
        }
        timers = {"tunehub": artifact_timer(harness, req, row["artifact"])}
        timers.update(vendor_timers(torch, harness, req, row["counts"]))
        times = interleaved_medians(timers, row, COMPARE_ROUNDS)
        torch.cuda.synchronize()
        row["times_us"] = times
        if "tunehub" in times:
            row["speedup"] = {k: v / times["tunehub"] for k, v in times.items() if k != "tunehub"}
            flops = GroupedGemmProblem(**row["problem"]).flops()
            row["tunehub_tflops"] = flops / times["tunehub"] / 1e6
        print(f"[compare] {row['layer']} {row['bucket']}: {times}", flush=True)


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def ratios(label: str) -> list[float]:
        return [r["speedup"][label] for r in rows if label in r.get("speedup", {})]

    return {
        "geomean_vs_grouped_mm": geomean(ratios("grouped_mm")),
        "min_vs_grouped_mm": min(ratios("grouped_mm"), default=float("nan")),
        "geomean_vs_loop": geomean(ratios("loop")),
        "rows_measured": len(ratios("loop")),
        "rows_total": len(rows),
        "target": "geomean >= 1.0 vs torch._grouped_mm, >= 1.5 vs the per-expert loop",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the JSON file to write")
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--compare-reserve-s", type=float, default=150.0)
    parser.add_argument("--shape-seconds", type=float, default=50.0)
    parser.add_argument("--max-variants", type=int, default=8)
    parser.add_argument(
        "--list-precompile", action="store_true", help="print the precompile command and exit"
    )
    args = parser.parse_args()
    if args.list_precompile:
        print("\n".join(precompile_commands(args.max_variants)))
        return 0
    if args.out is None:
        parser.error("--out is required")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.deadline_s
    config = EngineConfig(
        cache_dir=args.cache_dir,
        bench_seconds=0.05,
        warmup_seconds=0.03,
        min_reps=10,
        compile_timeout_s=240,
        run_timeout_s=60,
    )
    rows = phase_tune(args, config, deadline - args.compare_reserve_s)
    meta: dict[str, Any] = {
        "tune_wall_seconds": round(time.monotonic() - started, 1),
        "compare_rounds": COMPARE_ROUNDS,
        "command": "python3 " + " ".join(sys.argv),
    }
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    phase_compare(rows, deadline)
    import torch

    meta.update(
        device=torch.cuda.get_device_name(0),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        torch=torch.__version__,
    )
    payload = {"meta": meta, "totals": totals(rows), "rows": rows}
    args.out.write_text(json.dumps(payload, indent=1, default=str))
    print(json.dumps(payload["totals"]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
