"""tunehub versus what users would call instead, on one GPU, side by side in one run.

    python3 bench/vs_vendor.py --out docs/benchmarks [--suites gemm,conv2d,reduce,softmax] [--quick]

Phase 1 tunes every suite with the tunehub engine (CUDA backend, harness subprocess). Phase 2
loads the winners into this process and times them and the vendor baselines (cuBLAS, cuDNN,
torch.sum, torch.softmax, Triton autotune) with the same function
(``tuner.backends.cuda_workload.time_launches``: batches of back-to-back launches in a CUDA
graph, rotating input sets over >= 2x L2, CUDA events, median), interleaved per shape, on the
same inputs. It writes ``h200.json``, ``h200.md`` and ``h200.png`` under --out.
Run it on the GPU host (torch and Triton there); it needs the CUTLASS headers (nvidia-cutlass).
GEMM on real-model shapes (prefill and decode, cuBLASLt and skinny families, weight-streaming
limit, stability re-tune) is ``bench/vs_vendor_gemm.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.backends.cuda import CudaBackend  # noqa: E402
from tuner.engine import tune  # noqa: E402
from tuner.problems import problem_from_dict  # noqa: E402
from tuner.reference import ELEMENT_SIZE  # noqa: E402
from tuner.stats import throughput  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402

GEMM = [
    (8192, 8192, 8192),
    (4096, 11008, 4096),
    (4096, 4096, 11008),
    (8192, 1024, 8192),
    (128, 4096, 4096),
    (16, 4096, 4096),
    (1024, 1024, 1024),
]
CONV = [  # ResNet-50 layers, batch 32: (h=w, c, k, r=s)
    (56, 64, 64, 3),
    (28, 128, 128, 3),
    (14, 256, 256, 3),
    (7, 512, 512, 3),
    (56, 256, 64, 1),
    (56, 64, 256, 1),
]
ROW_KS = [32 << i for i in range(11)]  # 32 .. 32768, M*K = 2^28


def suite_problems(suite: str, quick: bool) -> list[dict[str, Any]]:
    if suite == "gemm":
        shapes = GEMM[:2] + GEMM[4:6] if quick else GEMM
        return [{"m": m, "n": n, "k": k} for m, n, k in shapes]
    if suite == "conv2d":
        return [
            {
                "n": 32,
                "h": h,
                "w": h,
                "c": c,
                "k": k,
                "r": r,
                "s": r,
                "stride": 1,
                "pad": r // 2,
                "dilation": 1,
            }
            for h, c, k, r in (CONV[:2] if quick else CONV)
        ]
    ks = ROW_KS[::3] if quick else ROW_KS
    extra = {"kind": "sum"} if suite == "reduce" else {}
    return [{"m": (1 << 28) // k, "k": k, **extra} for k in ks]


def phase_tune(args: argparse.Namespace, config: EngineConfig) -> list[dict[str, Any]]:
    backend = CudaBackend(config)
    rows: list[dict[str, Any]] = []
    try:
        device = backend.device()
        print(f"device {device.key()} driver {device.driver}", flush=True)
        for suite in args.suites:
            layout = "rcr" if suite == "gemm" else "nhwc" if suite == "conv2d" else "row"
            budget = Budget(max_variants=args.max_variants.get(suite))
            for dims in suite_problems(suite, args.quick):
                request = TuneRequest(
                    op=suite,
                    dtype="f16",
                    layout=layout,
                    problem=problem_from_dict(suite, dict(dims)),
                    backend="cuda",
                    strategy="exhaustive",
                    budget=budget,
                )
                started = time.monotonic()
                result = tune(request, backend, config)
                seconds = time.monotonic() - started
                outcomes: dict[str, int] = {}
                for r in result.results:
                    outcomes[r.outcome.value] = outcomes.get(r.outcome.value, 0) + 1
                win = result.winner
                hit = backend.cache.lookup(win.variant_id) if win else None
                rows.append(
                    {
                        "suite": suite,
                        "problem": dims,
                        "layout": layout,
                        "tune_seconds": seconds,
                        "candidates": len(result.results),
                        "outcomes": outcomes,
                        "compile_seconds": sum(r.compile_seconds for r in result.results),
                        "winner": win.variant_name if win else None,
                        "winner_params": win.params if win else None,
                        "winner_tuned_us": win.timing.median_us if win and win.timing else None,
                        "artifact": str(hit.artifact) if hit and hit.artifact else None,
                        "failures": [
                            {
                                "name": r.variant_name,
                                "outcome": r.outcome.value,
                                "log": r.log[-300:],
                            }
                            for r in result.results
                            if not r.ok
                        ][:5],
                    }
                )
                print(
                    f"[tune] {suite} {dims} -> {rows[-1]['winner']} "
                    f"{rows[-1]['winner_tuned_us']} us in {seconds:.1f}s {outcomes}",
                    flush=True,
                )
    finally:
        backend.close()
    return rows


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


def phase_compare(rows: list[dict[str, Any]]) -> float:
    """Re-time winners and baselines in this process with one method; returns copy GB/s."""
    import torch

    from bench import vendor_baselines as vb
    from tuner.backends.cuda_harness import Harness, probe

    harness = Harness(probe())
    copy_gbps = harness.copy({"bytes": 1 << 30})["gb_per_s"]
    print(f"[compare] device copy {copy_gbps:.0f} GB/s", flush=True)
    for row in rows:
        req = {
            "cmd": "run",
            "op": row["suite"],
            "dtype": "f16",
            "layout": row["layout"],
            "problem": row["problem"],
            "seed": 0,
            "warmup_s": 0.1,
            "bench_s": 0.3,
            "min_samples": 10,
            "max_samples": 10_000,
            "abort_us": None,
        }
        times: dict[str, float] = {}
        if row["artifact"]:
            try:
                answer = harness.run({**req, "artifact": row["artifact"]})
                if answer.get("samples_us"):
                    times["tunehub"] = _median(answer["samples_us"])
            except Exception as exc:  # reported in the JSON; the other rows go on
                row["compare_error"] = f"{type(exc).__name__}: {exc}"[:300]
        work = harness.workload_for(req)
        for name, launch in _baseline_launches(vb, row, work).items():
            try:
                run = harness.wl.time_launches(
                    launch,
                    len(work.inputs),
                    warmup_s=0.1,
                    bench_s=0.3,
                    min_samples=10,
                    max_samples=10_000,
                    abort_us=None,
                )
                times[name] = _median(run.samples_us)
            except Exception as exc:  # a baseline that fails is reported, the run goes on
                row.setdefault("baseline_errors", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
            torch.cuda.synchronize()
        row["times_us"] = times
        row["metric"], row["unit"] = _metrics(row, times, copy_gbps)
        print(f"[compare] {row['suite']} {row['problem']} {row['metric']}", flush=True)
    return copy_gbps


def _baseline_launches(vb: Any, row: dict[str, Any], work: Any) -> dict[str, Any]:
    """Per-set launch closures ``launch(set_index, stream)`` for every baseline of the row."""
    per_set = []
    for ins, out in zip(work.inputs, work.outputs, strict=True):
        suite, p = row["suite"], row["problem"]
        if suite == "gemm":
            per_set.append(vb.gemm_baselines(ins[0], ins[1], out))
        elif suite == "conv2d":
            x, w = ins[0].permute(0, 3, 1, 2), ins[1].permute(0, 3, 1, 2)  # channels_last views
            per_set.append(vb.conv2d_baselines(x, w, p["stride"], p["pad"], p["dilation"]))
        elif suite == "softmax":
            per_set.append(vb.softmax_baselines(ins[0], out))
        else:
            per_set.append(vb.reduce_baselines(ins[0], out))
    return {name: (lambda i, s, name=name: per_set[i][name]()) for name in per_set[0]}


def _metrics(row: dict[str, Any], times: dict[str, float], copy_gbps: float) -> tuple[dict, str]:
    problem = problem_from_dict(row["suite"], dict(row["problem"]))
    metric = {
        name: throughput(problem, ELEMENT_SIZE["f16"], median_us)[0]
        for name, median_us in times.items()
    }
    if problem.flops() > 0:
        return metric, "TFLOP/s"
    return {**metric, "copy": copy_gbps}, "GB/s"


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _suite_table(srows: list[dict[str, Any]]) -> list[str]:
    """Markdown table of one suite: throughput per implementation and tunehub's ratio to each."""
    names = sorted({k for r in srows for k in r.get("metric", {})} - {"tunehub"})
    head = ["problem", "tunehub winner", "tunehub", *names, *(f"vs {n}" for n in names), "tune s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for r in srows:
        metric = r.get("metric", {})
        own = metric.get("tunehub")
        cells = [f"{metric[n]:.0f}" if n in metric else "-" for n in names]
        rel = []
        for n in names:
            if own and metric.get(n):
                ratios[n].append(own / metric[n])
                rel.append(f"{own / metric[n]:.2f}x")
            else:
                rel.append("-")
        dims = ",".join(f"{k}={v}" for k, v in r["problem"].items() if k in "mnkhc")
        row = [
            dims,
            f"`{r['winner']}`",
            f"{own:.0f}" if own else "-",
            *cells,
            *rel,
            f"{r['tune_seconds']:.0f}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    geo = ", ".join(
        f"vs {n}: {_geomean(v):.2f}x (min {min(v):.2f}x)" for n, v in ratios.items() if v
    )
    return [*lines, "", f"Geomean {geo}.", ""]


def write_report(
    out: Path, rows: list[dict[str, Any]], copy_gbps: float, meta: dict[str, Any]
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "copy_gbps": copy_gbps, "rows": rows}
    (out / "h200.json").write_text(json.dumps(payload, indent=1, default=str))
    lines = [
        f"# tunehub vs vendor libraries on {meta['device']}",
        "",
        f"Date: {meta['date']}. Command: `{meta['command']}`. Device copy (read+write): "
        f"{copy_gbps:.0f} GB/s, measured in the same run. Every figure is a median over "
        "batches of back-to-back launches in a CUDA graph, input sets rotated through >= 2x "
        "L2, CUDA events; tunehub winners and baselines are timed interleaved per shape "
        "in one process, on the same inputs (bench/vs_vendor.py).",
        "",
    ]
    for suite in dict.fromkeys(r["suite"] for r in rows):
        srows = [r for r in rows if r["suite"] == suite]
        lines += [f"## {suite} (f16, {srows[0].get('unit', '')})", "", *_suite_table(srows)]
    lines += [
        f"Tuning wall time of the whole run: {meta['tune_wall_seconds']:.0f} s; `tune s` is "
        "per problem, compiles included (later shapes reuse the compiled variants).",
        "",
        "![plot](h200.png)",
        "",
    ]
    (out / "h200.md").write_text("\n".join(lines))
    _plot(out / "h200.png", rows)


#: one color per implementation in every panel
_COLORS = {
    "tunehub": "tab:red",
    "copy": "tab:gray",
    "torch": "tab:orange",
    "cublas": "tab:blue",
    "cudnn": "tab:blue",
    "triton": "tab:green",
}


def _short(suite: str, p: dict[str, Any]) -> str:
    if suite in ("reduce", "softmax"):
        return f"K={p['k']}"
    if suite == "gemm":
        return f"{p['m']}x{p['n']}x{p['k']}"
    return f"{p['h']}x{p['h']} {p['c']}->{p['k']} {p['r']}x{p['s']}"


def _plot(path: Path, rows: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    fig, axes = plt.subplots(1, len(suites), figsize=(5 * len(suites), 4), squeeze=False)
    for ax, suite in zip(axes[0], suites, strict=True):
        srows = [r for r in rows if r["suite"] == suite and r.get("metric")]
        names = sorted({k for r in srows for k in r["metric"]})
        for name in names:
            ax.plot(
                range(len(srows)),
                [r["metric"].get(name, float("nan")) for r in srows],
                marker="o",
                label=name,
                color=_COLORS.get(name),
                linewidth=2.5 if name == "tunehub" else 1.2,
                linestyle="--" if name == "copy" else "-",
            )
        ax.set_title(f"{suite} ({srows[0]['unit'] if srows else ''})")
        ax.set_xticks(range(len(srows)))
        ax.set_xticklabels([_short(suite, r["problem"]) for r in srows], rotation=45, fontsize=7)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--suites", default="reduce,softmax,gemm,conv2d")
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--quick", action="store_true", help="fewer shapes (a smoke run)")
    parser.add_argument("--bench-seconds", type=float, default=0.05)
    parser.add_argument("--gemm-variants", type=int, default=24)
    parser.add_argument("--conv-variants", type=int, default=16)
    parser.add_argument("--replot", type=Path, help="redraw the plot of an h200.json and exit")
    args = parser.parse_args()
    if args.replot:
        _plot(args.replot.with_suffix(".png"), json.loads(args.replot.read_text())["rows"])
        return 0
    args.suites = [s for s in args.suites.split(",") if s]
    args.max_variants = {"gemm": args.gemm_variants, "conv2d": args.conv_variants}
    config = EngineConfig(
        cache_dir=args.cache_dir,
        bench_seconds=args.bench_seconds,
        warmup_seconds=0.02,
        min_reps=10,
        compile_timeout_s=300,
        run_timeout_s=60,
    )
    started = time.monotonic()
    rows = phase_tune(args, config)
    tune_wall = time.monotonic() - started
    args.out.mkdir(parents=True, exist_ok=True)  # phase 1 kept even if phase 2 is cut short
    (args.out / "h200-tune.json").write_text(json.dumps(rows, indent=1, default=str))
    copy_gbps = phase_compare(rows)
    import torch

    meta = {
        "device": torch.cuda.get_device_name(0),
        "date": dt.date.today().isoformat(),
        "command": "python3 " + " ".join(sys.argv),
        "tune_wall_seconds": tune_wall,
        "torch": torch.__version__,
    }
    write_report(args.out, rows, copy_gbps, meta)
    print(f"wrote {args.out}/h200.md (tuning {tune_wall:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
