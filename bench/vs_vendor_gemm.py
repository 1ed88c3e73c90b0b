"""GEMM on real-model shapes: tunehub's answer (CUTLASS, cuBLASLt and skinny families) against
cuBLAS, with the weight-streaming limit for decode and a stability re-tune, in one GPU run.

    python3 bench/vs_vendor_gemm.py --out $OUT [--deadline-s 330]     # on the GPU host
    python3 bench/vs_vendor_gemm.py --report bench/results/h200-gemm-vendor.json \
        --out docs/benchmarks                                           # the page, anywhere

Shapes (f16, layout rcr, D = X W^T with W stored [n,k]): Qwen2.5-7B (hidden 3584, 4 KV heads,
intermediate 18944) and Mistral-7B (hidden 4096, 8 KV heads, intermediate 14336), prefill
M = 2048 and decode M = 1, 4, 16, 64, plus two odd sizes that are no multiple of any tile.

Phase 1 tunes every shape with the engine (CUDA backend, harness subprocess), then tunes every
shape again (same compile cache: the stability check). The budget per shape is every
cuBLASLt algorithm discovery keeps (the heuristic's, then up to 24 enumerated beyond them) plus
the heads of the other families (see ``gemm_budget``), at most ``--max-variants``. Phase 2 loads
the winners into this process and times them, the vendor default (cuBLASLt heuristic #0, the
same build the tuner ran) and torch.matmul (cuBLAS) with one function (batches of back-to-back
launches in a CUDA graph, input sets rotated over >= 2x L2, CUDA events, median), interleaved
per shape on the same inputs in COMPARE_ROUNDS rounds of rotated order, and the device copy
rate for the weight-streaming limit bytes(W) / copy rate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
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
from tuner.problems import GemmProblem  # noqa: E402
from tuner.spaces import cuda_gemm_cublaslt as lt  # noqa: E402
from tuner.spaces._cublaslt_extras import SOURCE_HEURISTIC  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402
from tuner.winner import TIE_BAND  # noqa: E402

#: (model, layer, n, k): W is [n, k]
MODEL_LAYERS = [
    ("qwen2.5-7b", "qkv", 4608, 3584),
    ("qwen2.5-7b", "down", 3584, 18944),
    ("mistral-7b", "o", 4096, 4096),
    ("mistral-7b", "gate_up", 28672, 4096),
]
PREFILL_M = 2048
DECODE_MS = (1, 4, 16, 64)
#: sizes no tile divides (16-byte aligned rows, as the CUTLASS and skinny kernels need)
ODD = [("odd", "square", 3000, 3000, 3000), ("odd", "ragged", 777, 5000, 3000)]
DTYPE, LAYOUT = "f16", "rcr"
ELEMENT_BYTES = 2
#: phase 2: every label timed once a round, the order rotated, COMPARE_ROUNDS rounds
COMPARE_ROUNDS = 5
COMPARE_TIMING = {"warmup_s": 0.05, "bench_s": 0.08, "min_samples": 10, "max_samples": 10_000}


def model_shapes() -> list[dict[str, Any]]:
    shapes = []
    for model, layer, n, k in MODEL_LAYERS:
        for m in (PREFILL_M, *DECODE_MS):
            kind = "prefill" if m == PREFILL_M else "decode"
            shapes.append({"model": model, "layer": layer, "kind": kind, "m": m, "n": n, "k": k})
    for model, layer, m, n, k in ODD:
        shapes.append({"model": model, "layer": layer, "kind": "odd", "m": m, "n": n, "k": k})
    return shapes


def _lt_source(params: dict[str, Any] | None, discovery: list[dict[str, Any]]) -> str | None:
    """Which discovery source (heuristic / enumerated) found a cuBLASLt winner; None otherwise."""
    if not params or params.get("library") != "cublaslt":
        return None
    for item in discovery:  # the heuristic's come first
        if all(item.get(k) == params.get(k) for k in lt.ATTRIBUTES):
            return str(item.get("source", SOURCE_HEURISTIC))
    return None


def gemm_budget(m: int, vendor_algos: int, cap: int) -> int:
    """Every cuBLASLt algorithm, the swap-AB head (2 <= m <= 16), the skinny head (m <= 4) and
    the CUTLASS head (m > 16)."""
    from tuner.spaces import cuda_gemm as cg
    from tuner.spaces import cuda_gemm_skinny as skinny
    from tuner.spaces import cuda_gemm_swapab as swapab

    skinny_head = cg._SKINNY_HEAD if m <= skinny.HEAD_MAX_M else 0
    swapab_head = cg._SWAPAB_HEAD if swapab.HEAD_MIN_M <= m <= swapab.HEAD_MAX_M else 0
    heads = swapab_head + skinny_head + (cg._CUTLASS_HEAD if m >= cg._CUTLASS_HEAD_MIN_M else 0)
    return max(1, min(cap, vendor_algos + heads))


def phase_tune(args: argparse.Namespace, config: EngineConfig, deadline: float) -> list[dict]:
    from tuner.backends.cuda import CudaBackend

    backend = CudaBackend(config)
    rows: list[dict[str, Any]] = []
    try:
        device = backend.device()
        print(f"device {device.key()} driver {device.driver}", flush=True)
        for pass_no in (1, 2):
            for i, shape in enumerate(model_shapes()):
                if time.monotonic() > deadline:  # the caller kept phase 2's reserve
                    print(f"[tune] pass {pass_no}: deadline, stopping at shape {i}", flush=True)
                    break
                problem = GemmProblem(shape["m"], shape["n"], shape["k"])
                probe = TuneRequest("gemm", DTYPE, LAYOUT, problem, backend="cuda")
                found = backend.discover(probe, device.arch)
                discovery = list(backend.last_discovery) if found else []
                # items before enumeration had no source: the heuristic's
                heuristic = [
                    d for d in discovery if d.get("source", SOURCE_HEURISTIC) == SOURCE_HEURISTIC
                ]
                budget = Budget(
                    max_variants=gemm_budget(problem.m, len(found), args.max_variants),
                    max_seconds=args.shape_seconds,
                )
                request = TuneRequest("gemm", DTYPE, LAYOUT, problem, "cuda", budget=budget)
                started = time.monotonic()
                result = tune(request, backend, config)
                seconds = time.monotonic() - started
                win = result.winner
                record = {
                    "pass": pass_no,
                    "seconds": round(seconds, 2),
                    "winner": win.variant_name if win else None,
                    "winner_id": win.variant_id if win else None,
                    "winner_params": win.params if win else None,
                    "winner_source": _lt_source(win.params if win else None, discovery),
                    "winner_us": win.timing.median_us if win and win.timing else None,
                    "tie_set": list(result.tie_set),
                    "complete": result.complete,
                    "candidates": [summary(r) for r in result.results],
                }
                if pass_no == 1:
                    hit = backend.cache.lookup(win.variant_id) if win else None
                    first = result.results[0] if result.results else None
                    default = first if first and first.params.get("library") == "cublaslt" else None
                    dhit = backend.cache.lookup(default.variant_id) if default else None
                    rows.append(
                        {
                            **shape,
                            "budget": budget.max_variants,
                            "discovered": len(found),
                            "discovery_exact": sum(1 for d in heuristic if d.get("exact")),
                            "discovery_enumerated": len(discovery) - len(heuristic),
                            "discovery": discovery[:3],
                            "vendor_default": default.variant_name if default else None,
                            "vendor_default_artifact": str(dhit.artifact) if dhit else None,
                            "artifact": str(hit.artifact) if hit and hit.artifact else None,
                            "tune": [record],
                        }
                    )
                else:
                    rows[i]["tune"].append(record)
                print(
                    f"[tune] pass {pass_no} {shape['model']} {shape['layer']} m={shape['m']}: "
                    f"{record['winner']} {record['winner_us']} us, {len(result.results)} "
                    f"candidates ({len(found)} cuBLASLt) in {seconds:.1f}s",
                    flush=True,
                )
    finally:
        backend.close()
    return rows


def _stable(row: dict[str, Any]) -> bool | None:
    """Same winner in the re-tune, or a statistical tie: either winner in the other pass's tie
    set (tuner.winner); runs recorded before tie sets: the first winner within the tie band
    of the second."""
    if len(row["tune"]) < 2:
        return None
    first, second = row["tune"][0], row["tune"][1]
    if first["winner_id"] == second["winner_id"]:
        return True
    if "tie_set" in first and "tie_set" in second:
        return first["winner"] in second["tie_set"] or second["winner"] in first["tie_set"]
    again = {c["name"]: c["median_us"] for c in second["candidates"]}
    previous = again.get(first["winner"])
    best = second["winner_us"]
    return bool(previous and best and previous <= best * (1 + TIE_BAND))


def matmul_timer(torch: Any, harness: Any, req: dict[str, Any], timing: dict[str, Any]) -> Timer:
    """torch.matmul (cuBLAS) on the harness's input sets of ``req`` (rcr: W stored [n,k]),
    timed as the harness times a variant."""
    work = harness.workload_for(req)
    pairs = [(ins[0], ins[1].t(), out) for ins, out in zip(work.inputs, work.outputs, strict=True)]

    def cublas(i: int, stream: int) -> None:
        a, b, c = pairs[i]
        torch.matmul(a, b, out=c)

    return launch_timer(harness, cublas, len(pairs), timing)


def phase_compare(rows: list[dict[str, Any]], deadline: float) -> float:
    """Re-time winners, the vendor default and torch.matmul in this process, interleaved in
    rounds (``interleaved_medians``)."""
    import torch

    from tuner.backends.cuda_harness import Harness, probe

    harness = Harness(probe())
    copy_gbps = float(harness.copy({"bytes": 1 << 30})["gb_per_s"])
    print(f"[compare] device copy {copy_gbps:.0f} GB/s", flush=True)
    for row in rows:
        if time.monotonic() > deadline:
            row["compare_error"] = "deadline"
            continue
        problem = {"m": row["m"], "n": row["n"], "k": row["k"]}
        req = {
            "cmd": "run",
            "op": "gemm",
            "dtype": DTYPE,
            "layout": LAYOUT,
            "problem": problem,
            "seed": 0,
            **COMPARE_TIMING,
            "abort_us": None,
        }
        timers = {
            label: artifact_timer(harness, req, artifact)
            for label, artifact in (
                ("tunehub", row["artifact"]),
                ("cublaslt_default", row["vendor_default_artifact"]),
            )
            if artifact
        }
        timers["cublas"] = matmul_timer(torch, harness, req, COMPARE_TIMING)
        times = interleaved_medians(timers, row, COMPARE_ROUNDS)
        torch.cuda.synchronize()
        row["times_us"] = times
        flops = 2.0 * row["m"] * row["n"] * row["k"]
        row["tflops"] = {name: flops / us / 1e6 for name, us in times.items()}
        # bytes(W) over the copy rate (read + write counted, as the issue defines the limit)
        row["stream_limit_us"] = row["n"] * row["k"] * ELEMENT_BYTES / (copy_gbps * 1e3)
        print(
            f"[compare] {row['model']} {row['layer']} m={row['m']}: "
            + " ".join(f"{k}={v:.2f}us" for k, v in times.items()),
            flush=True,
        )
    return copy_gbps


def write_report(out: Path, payload: dict[str, Any], stem: str = "h200-gemm-vendor") -> None:
    """The markdown page from the raw JSON (the GPU run writes both; --report redoes the page)."""
    rows, meta = payload["rows"], payload["meta"]
    rounds = int(meta.get("compare_rounds", 1))
    lines = [
        f"# GEMM on real-model shapes: tunehub vs cuBLAS on {meta['device']}",
        "",
        f"Date: {meta['date']}. Command: `{meta['command']}` (through bench/h200_gemm_run.sh "
        f"on the lent H200). torch {meta.get('torch')}, cuBLASLt {meta.get('cublas')}. Device "
        f"copy (read + write) {payload['copy_gbps']:.0f} GB/s, measured in the same run.",
        "",
        "f16, layout rcr (D = X W^T, W stored [n,k]). Every time is a median over batches of "
        "back-to-back launches in a CUDA graph, input sets rotated over >= 2x L2, CUDA events; "
        "tunehub's winner, the cuBLASLt default (heuristic #0 rebuilt from its attributes, the "
        "candidate every tuning job tries first) and torch.matmul (cuBLAS) are timed in one "
        "process on the same inputs, "
        + (
            f"interleaved: {rounds} rounds per shape, each timing every label once in an order "
            "rotated by one label a round, and a label's time is the median of its round medians."
            if rounds > 1
            else "one window per label, one label after another."
        )
        + " `limit` is bytes(W) / copy rate; "
        "`of limit` is that over the time (decode is bound by streaming W).",
        "",
        "| model | layer | m | n | k | winner | library | tunehub us | cuBLAS us | "
        "LtDefault us | vs cuBLAS | vs LtDefault | of limit | stable | tune s (1st, 2nd) |",
        "|" + "---|" * 15,
    ]
    ratios: list[float] = []
    decode_limit: list[float] = []
    stable: list[bool] = []
    misses: list[str] = []
    for r in rows:
        t = r.get("times_us", {})
        own, blas, lt0 = t.get("tunehub"), t.get("cublas"), t.get("cublaslt_default")
        vs = blas / own if own and blas else None
        vs_lt = lt0 / own if own and lt0 else None
        of_limit = r["stream_limit_us"] / own if own and r.get("stream_limit_us") else None
        st = _stable(r)
        if vs:
            ratios.append(vs)
            if vs < 0.98:
                misses.append(f"{r['model']} {r['layer']} m={r['m']}: {vs:.2f}x cuBLAS")
        if of_limit and r["m"] <= 16:
            decode_limit.append(of_limit)
        if st is not None:
            stable.append(st)
        lib = (r["tune"][0].get("winner_params") or {}).get("library", "-")
        secs = ", ".join(f"{x['seconds']:.0f}" for x in r["tune"])
        cells = [
            r["model"],
            r["layer"],
            str(r["m"]),
            str(r["n"]),
            str(r["k"]),
            f"`{r['tune'][0]['winner']}`",
            lib,
            f"{own:.1f}" if own else "-",
            f"{blas:.1f}" if blas else "-",
            f"{lt0:.1f}" if lt0 else "-",
            f"{vs:.2f}x" if vs else "-",
            f"{vs_lt:.2f}x" if vs_lt else "-",
            f"{of_limit:.2f}" if of_limit and r["m"] <= 64 else "-",
            {True: "yes", False: "no", None: "-"}[st],
            secs,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"- Geomean vs cuBLAS over {len(ratios)} shapes: **{geomean(ratios):.3f}x** "
        f"(min {min(ratios, default=float('nan')):.2f}x); shapes below 0.98x: {len(misses)}.",
        f"- Decode (m <= 16) share of the weight-streaming limit: geomean "
        f"{geomean(decode_limit):.2f}, min {min(decode_limit, default=float('nan')):.2f}.",
        f"- Stability (re-tuned once in the same run: same winner or a statistical tie, either "
        f"winner in the other pass's tie set; older runs: within the {TIE_BAND:.0%} tie band): "
        f"{sum(stable)}/{len(stable)} shapes.",
        f"- Tuning wall time: {meta['tune_wall_seconds']:.0f} s for both passes.",
        "",
    ]
    if misses:
        lines += ["Shapes below 0.98x cuBLAS: " + "; ".join(misses) + ".", ""]
    (out / f"{stem}.md").write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--deadline-s", type=float, default=330.0)
    parser.add_argument("--compare-reserve-s", type=float, default=60.0)
    parser.add_argument("--shape-seconds", type=float, default=40.0)
    parser.add_argument("--max-variants", type=int, default=20)
    parser.add_argument("--report", type=Path, help="write the page of a raw JSON and exit")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        write_report(args.out, json.loads(args.report.read_text()))
        return 0
    started = time.monotonic()
    deadline = started + args.deadline_s
    config = EngineConfig(
        cache_dir=args.cache_dir,
        # long enough that the clocks settle as in phase 2 (0.03 s ranked prefill kernels at
        # boost clocks, 10-20% faster than sustained, in the first run)
        bench_seconds=0.06,
        warmup_seconds=0.04,
        min_reps=10,
        compile_timeout_s=240,
        run_timeout_s=60,
        tie_band=TIE_BAND,
    )
    rows = phase_tune(args, config, deadline - args.compare_reserve_s)
    tune_wall = time.monotonic() - started
    raw = args.out / "h200-gemm-vendor.json"
    meta: dict[str, Any] = {
        "tune_wall_seconds": tune_wall,
        "compare_rounds": COMPARE_ROUNDS,
        "command": "python3 " + " ".join(sys.argv),
    }
    raw.write_text(json.dumps({"meta": meta, "copy_gbps": 0, "rows": rows}, default=str))
    copy_gbps = phase_compare(rows, deadline)
    import torch

    from tuner.vendor_paths import cublas_version

    meta.update(
        device=torch.cuda.get_device_name(0),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        torch=torch.__version__,
        cublas=cublas_version(),
    )
    payload = {"meta": meta, "copy_gbps": copy_gbps, "rows": rows}
    raw.write_text(json.dumps(payload, indent=1, default=str))
    write_report(args.out, payload)
    print(f"wrote {raw} and the page (tuning {tune_wall:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
