"""Regression check of tunehub's kernels on one GPU: a fixed shape list per op, compared with
the figures recorded in the repo (bench/regress_baseline.json). A benchmark script, not a test.

    python3 bench/regress.py --out $OUT [--deadline 400] [--quick]    # on the GPU host
    python3 bench/regress.py --list      # the precompile_cuda.py commands for every shape
    python3 bench/regress.py --from-run $OUT/regress.json [--update]  # anywhere, no GPU

Shapes and budgets: bench/regress_shapes.py. The rule and the baseline file:
bench/regress_rule.py (a shape fails when its ratio to its reference falls below the ratio
recorded on the same GPU model by more than max(2 x noise, 3%)).

Phase 1 tunes every shape with the engine (CUDA backend, harness subprocess) on a small budget
(the compile cache carried from bench/precompile_cuda.py makes the builds hits). Phase 2 loads
each winner into this process and times it beside its reference in ``ROUNDS`` interleaved
rounds (bench/vendor_common.interleaved_rounds: each round times every label once, the order
rotated; batches of back-to-back launches in a CUDA graph, input sets rotated over >= 2x L2,
CUDA events, median): rows beside torch (torch.softmax / torch.sum, shown) and a device copy of
``COPY_BYTES`` (the reference: the ratio is GB/s over the copy's GB/s, as in
docs/benchmarks/h200*.md); GEMM beside torch.matmul (cuBLAS, the reference); conv2d beside
cuDNN's default engine config (the first candidate of every conv2d job, the reference); the
families of issue 26 beside the call a user makes instead, timed by the serving benchmarks'
own timers (bench/regress_timers.py): a fused GEMM or conv2d beside the ``unfused`` pair
(bench/serving_epilogue.py), scaled_gemm beside ``torch_scaled_mm`` (bench/serving_fp8.py),
grouped_gemm beside ``grouped_mm`` (bf16) or ``scaled_grouped_mm`` (e4m3)
(bench/serving_moe.py). Each round gives a ratio; their median is the shape's ratio and half
their spread its noise.

Writes ``regress.json`` (meta, every shape's result, the verdicts) and ``regress.md`` (the
table, 80 columns) under --out. Exit status: 0 when no shape fails, 1 when one does (a drop, a
recorded shape not measured, or the full list cut short by the deadline), 2 for bad arguments.
``--update`` writes the baseline from the run (every measured shape, under the run's device;
the others and other devices keep their records) and exits 0: for a change meant to move figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import regress_rule as rule  # noqa: E402
from bench.regress_shapes import Shape, precompile_commands, shapes  # noqa: E402
from bench.regress_timers import TIMING, row_dtype, timers_for  # noqa: E402
from bench.vendor_common import interleaved_rounds, launch_timer  # noqa: E402
from tuner.problems import problem_from_dict  # noqa: E402
from tuner.reference import ELEMENT_SIZE  # noqa: E402
from tuner.stats import throughput  # noqa: E402

BASELINE = Path(__file__).resolve().parent / "regress_baseline.json"
#: interleaved timing rounds per shape (``--quick``: QUICK_ROUNDS)
ROUNDS = 5
QUICK_ROUNDS = 3
#: bytes the reference copy reads (and writes): far past L2, like every row shape's traffic
COPY_BYTES = 1 << 29
#: seconds phase 2 needs per shape (kept back from the tuning phase's share of --deadline)
COMPARE_SECONDS = 1.8


def _commit(explicit: str | None) -> str:
    if explicit:
        return explicit
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def _row_of(shape: Shape) -> dict[str, Any]:
    """What every row of regress.json says about its shape."""
    return {
        "op": shape.op,
        "dtype": shape.dtype,
        "layout": shape.layout,
        "problem": shape.problem,
        "reference": shape.reference,
    }


def phase_tune(todo: list[Shape], cache_dir: str, deadline: float) -> dict[str, dict[str, Any]]:
    """Tune every shape of ``todo`` (until ``deadline``); one row per shape tuned, by key."""
    from tuner.backends.cuda import CudaBackend
    from tuner.engine import tune
    from tuner.types import Budget, EngineConfig, TuneRequest

    config = EngineConfig(
        cache_dir=cache_dir,
        bench_seconds=0.03,
        warmup_seconds=0.02,
        min_reps=10,
        compile_timeout_s=240,
        run_timeout_s=60,
    )
    backend = CudaBackend(config)
    rows: dict[str, dict[str, Any]] = {}
    try:
        print(f"device {backend.device().key()}", flush=True)
        for shape in todo:
            left = deadline - time.monotonic()
            if left < 1.0:
                print(f"[tune] deadline: {shape.key} and later shapes skipped", flush=True)
                break
            budget = Budget(shape.max_variants, min(shape.max_seconds, left))
            problem = problem_from_dict(shape.op, dict(shape.problem), shape.dtype)
            request = TuneRequest(
                shape.op, shape.dtype, shape.layout, problem, "cuda", budget=budget
            )
            started = time.monotonic()
            try:
                result = tune(request, backend, config)
            except Exception as exc:  # this shape is lost (reported); the others go on
                rows[shape.key] = {**_row_of(shape), "error": f"{type(exc).__name__}: {exc}"[:300]}
                print(f"[tune] {shape.key}: failed: {rows[shape.key]['error']}", flush=True)
                continue
            win = result.winner
            first = result.results[0] if result.results else None
            default = first if first and first.params.get("library") == "cudnn" else None
            hit = backend.cache.lookup(win.variant_id) if win else None
            dhit = backend.cache.lookup(default.variant_id) if default else None
            outcomes: dict[str, int] = {}
            for r in result.results:
                outcomes[r.outcome.value] = outcomes.get(r.outcome.value, 0) + 1
            rows[shape.key] = {
                **_row_of(shape),
                "tune_seconds": round(time.monotonic() - started, 2),
                "outcomes": outcomes,
                "winner": win.variant_name if win else None,
                "winner_tuned_us": win.timing.median_us if win and win.timing else None,
                "artifact": str(hit.artifact) if hit and hit.artifact else None,
                "vendor_default_artifact": (
                    str(dhit.artifact) if dhit and default and default.ok else None
                ),
            }
            print(
                f"[tune] {shape.key}: {rows[shape.key]['winner']} "
                f"{rows[shape.key]['tune_seconds']:.1f}s {outcomes}",
                flush=True,
            )
    finally:
        backend.close()
    return rows


def _figure(row: dict[str, Any], label: str, us: float) -> float:
    """GB/s (rows; the copy: bytes read + written) or TFLOP/s of one label's time."""
    if label == "copy":
        return 2.0 * COPY_BYTES / us / 1e3
    problem = problem_from_dict(row["op"], dict(row["problem"]))
    value, _ = throughput(problem, ELEMENT_SIZE[row_dtype(row)], us)
    return float(value or 0.0)


def summarise(row: dict[str, Any]) -> None:
    """The row's figure, ratio and noise from its rounds (``rounds_us``), in place."""
    rounds = row.get("rounds_us", {})
    own, ref = rounds.get("tunehub", []), rounds.get(row["reference"], [])
    pairs = list(zip(own, ref, strict=False))
    if not pairs:
        row.update(figure=None, ratio=None, noise=None)
        return
    if row["reference"] == "copy":  # GB/s over the copy's GB/s
        ratios = [_figure(row, "tunehub", a) / _figure(row, "copy", b) for a, b in pairs]
    else:  # the vendor's time over tunehub's
        ratios = [b / a for a, b in pairs]
    ratio, noise = rule.ratio_and_noise(ratios)
    problem = problem_from_dict(row["op"], dict(row["problem"]))
    torch_us = rounds.get("torch")
    if torch_us:  # rows: torch.softmax / torch.sum, shown beside (not compared)
        row["vs_torch"] = statistics.median(torch_us) / statistics.median(own)
    row.update(
        figure=_figure(row, "tunehub", statistics.median(own)),
        unit="TFLOP/s" if problem.flops() > 0 else "GB/s",
        ratio=ratio,
        noise=noise,
        round_ratios=ratios,
    )


def phase_compare(rows: dict[str, dict[str, Any]], deadline: float, rounds: int) -> float:
    """Time every tuned row beside its reference (module doc); returns the copy's GB/s."""
    import torch

    from tuner.backends.cuda_harness import Harness, probe

    harness = Harness(probe())
    if any(r["op"] == "conv2d" and "epilogue" in r["problem"] for r in rows.values()):
        # the unfused conv2d reference: the user's best cuDNN algorithm, not its default, as
        # bench/serving_epilogue.py times it (a plain conv2d's reference is a build of ours)
        torch.backends.cudnn.benchmark = True
    src = torch.rand(COPY_BYTES // 2, device="cuda").to(torch.float16)
    dst = torch.empty_like(src)

    def copy_once(i: int, stream: int) -> None:
        dst.copy_(src)

    # plain launches: captured in a CUDA graph a device-to-device copy becomes a memcpy node
    # that the copy engines run, at 2756 GB/s on the H200 against ~4150 for the SM copy that
    # cudaMemcpyAsync does outside a graph (the copy rate of the recorded figures, 17:21 run)
    copy = launch_timer(harness, copy_once, 1, {**TIMING, "use_graph": False})
    copy_gbps = _figure({}, "copy", statistics.median(copy()))
    print(f"[compare] device copy {copy_gbps:.0f} GB/s", flush=True)
    for key, row in rows.items():
        if not row.get("artifact"):
            summarise(row)
            continue
        if time.monotonic() > deadline:
            row["skipped"] = "deadline"
            continue
        req = {
            "cmd": "run",
            "op": row["op"],
            "dtype": row_dtype(row),
            "layout": row["layout"],
            "problem": row["problem"],
            "seed": 0,
            **TIMING,
            "abort_us": None,
        }
        try:
            timers = timers_for(torch, harness, row, req, copy)
            row["rounds_us"] = interleaved_rounds(timers, row, rounds)
            torch.cuda.synchronize()
        except Exception as exc:  # this shape is lost (reported); the others go on
            row["compare_error"] = f"{type(exc).__name__}: {exc}"[:300]
        summarise(row)
        shown = f"{row['ratio']:.3f} (noise {row['noise']:.1%})" if row["ratio"] else "-"
        print(f"[compare] {key}: ratio {shown}", flush=True)
    return copy_gbps


def report(out: Path, payload: dict[str, Any], baseline: dict[str, Any]) -> int:
    """Verdicts, the table (printed and in regress.md), regress.json; the count failing."""
    results = payload["results"]
    meta = payload["meta"]
    records = rule.records_for(baseline, meta.get("device"))
    found = rule.verdicts(results, records)
    payload["verdicts"] = {k: v.status for k, v in found.items()}
    table = rule.format_table(results, records, found)
    head = (
        f"{meta.get('device')} {meta.get('date')} commit {meta.get('commit')}; "
        f"copy {meta.get('copy_gbps', 0):.0f} GB/s"
    )
    if not records:
        head += "\nno records of this device: every shape is new (--update records them)"
    print(head + "\n" + table, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "regress.json").write_text(json.dumps(payload, indent=1, default=str))
    (out / "regress.md").write_text(f"{head}\n\n```\n{table}\n```\n")
    # a shape the deadline cut is a check not made: the run fails too
    return sum(1 for v in found.values() if v.failed or v.status == "skipped")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("regress-out"))
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--deadline", type=float, default=400.0, help="seconds for the run")
    parser.add_argument("--quick", action="store_true", help="the QUICK subset, fewer rounds")
    parser.add_argument("--only", nargs="*", default=[], help="shapes whose key has one of these")
    parser.add_argument("--list", action="store_true", help="print the precompile commands")
    parser.add_argument("--from-run", type=Path, help="compare a saved regress.json (no GPU)")
    parser.add_argument("--update", action="store_true", help="rewrite the baseline from the run")
    parser.add_argument("--commit", help="the commit measured (default: git rev-parse HEAD)")
    args = parser.parse_args(argv)
    if args.deadline <= 0:
        parser.error("--deadline: must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    todo = [s for s in shapes(args.quick) if not args.only or any(o in s.key for o in args.only)]
    if args.list:
        print("\n".join(precompile_commands(todo, args.cache_dir)))
        return 0
    try:
        baseline = rule.load_baseline(args.baseline)
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"error: --baseline: {exc}", file=sys.stderr)
        return 2
    if args.from_run:
        try:
            payload = json.loads(args.from_run.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"error: --from-run: {exc}", file=sys.stderr)
            return 2
    else:
        payload = run(args, todo)
    failing = report(args.out, payload, baseline)
    if args.update:
        updated = rule.updated_baseline(baseline, payload["results"], payload["meta"])
        rule.save_baseline(args.baseline, updated)
        print(f"wrote {args.baseline}", flush=True)
        return 0
    return 1 if failing else 0


def run(args: argparse.Namespace, todo: list[Shape]) -> dict[str, Any]:
    """Both phases on this machine's GPU; the payload of regress.json."""
    started = time.monotonic()
    deadline = started + args.deadline
    reserve = COMPARE_SECONDS * len(todo)
    rows = phase_tune(todo, args.cache_dir, deadline - reserve)
    tuned = time.monotonic()
    for shape in todo:  # not reached before the deadline
        if shape.key not in rows:
            rows[shape.key] = {**_row_of(shape), "skipped": "deadline"}
    rounds = QUICK_ROUNDS if args.quick else ROUNDS
    tuned_rows = {k: r for k, r in rows.items() if not r.get("skipped")}
    copy_gbps = phase_compare(tuned_rows, deadline, rounds)
    import torch

    meta = {
        "device": torch.cuda.get_device_name(0),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(args.commit),
        "command": "python3 " + " ".join(sys.argv),
        "torch": torch.__version__,
        "copy_gbps": copy_gbps,
        "rounds": rounds,
        "full_list": not args.quick and not args.only,
        "tune_wall_seconds": round(tuned - started, 1),
        "compare_wall_seconds": round(time.monotonic() - tuned, 1),
    }
    return {"meta": meta, "results": rows}


if __name__ == "__main__":
    raise SystemExit(main())
