"""Rows of real-model lengths: reduce and softmax at vocabulary sizes, hidden sizes that are not
powers of two and primes (M x K = 2^28), plus few-rows decode shapes, on one GPU in one run.

    python3 bench/rows_sweep.py --out docs/benchmarks/h200-rows [--max-seconds 420]

Every shape is tuned twice (stability: the second winner is the first one or within the tie
band of it, timed in the first tuning), then the winner, torch.sum / torch.softmax, a Triton
softmax (``triton_softmax`` below) and the device copy are timed with one method in one process
(``bench.vs_vendor.phase_compare``). Writes ``rows.json`` and ``rows.md`` under --out.
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

from bench import vs_vendor  # noqa: E402
from tuner.backends.cuda import CudaBackend  # noqa: E402
from tuner.engine import tune  # noqa: E402
from tuner.problems import problem_from_dict  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402

#: vocabulary sizes of public models (GPT-2 50257, Llama-2 32000, Qwen2 151936, Llama-3 128256,
#: Gemma 256000, cl100k 100277), hidden sizes (5120, 13824) and primes
VOCAB = [50257, 32000, 151936, 128256, 256000, 100277]
HIDDEN = [5120, 13824]
PRIMES = [1009, 8191, 131071]
FEW_ROWS_K = [128256, 151936]
FEW_ROWS_M = [1, 8, 64]
TOTAL = 1 << 28
#: candidates per tuning (the spaces order the widest packs first)
CAP = {"reduce": 20, "softmax": 16}


def shapes() -> list[tuple[str, str, dict[str, Any]]]:
    """(sweep, op, problem) in run order: the 2^28 sweep, then few rows."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for k in VOCAB + HIDDEN + PRIMES:
        m = max(1, TOTAL // k)
        out.append(("2^28", "reduce", {"m": m, "k": k, "kind": "sum"}))
        out.append(("2^28", "softmax", {"m": m, "k": k}))
    for k in FEW_ROWS_K:
        for m in FEW_ROWS_M:
            out.append(("few", "softmax", {"m": m, "k": k}))
            out.append(("few", "reduce", {"m": m, "k": k, "kind": "sum"}))
    return out


#: shapes tuned once for time and once for energy (joules per launch, NVML counter)
ENERGY_SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("softmax", {"m": 5341, "k": 50257}),
    ("reduce", {"m": 8388, "k": 32000, "kind": "sum"}),
]


def _tune_once(
    backend: CudaBackend, config: EngineConfig, op: str, dims: dict, objective: str = "time"
) -> Any:
    request = TuneRequest(
        objective=objective,  # type: ignore[arg-type]
        op=op,
        dtype="f16",
        layout="row",
        problem=problem_from_dict(op, dict(dims)),
        backend="cuda",
        strategy="exhaustive",
        budget=Budget(max_variants=CAP[op]),
    )
    return tune(request, backend, config)


def selected(only: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """The shapes whose ``op:m:k`` label contains one of ``only`` (all when empty): a short
    probe of a few shapes in one device call."""
    return [
        (sweep, op, dims)
        for sweep, op, dims in shapes()
        if not only or any(o in f"{op}:{dims['m']}:{dims['k']}" for o in only)
    ]


def phase_tune(
    config: EngineConfig, deadline: float, only: list[str] | None = None
) -> list[dict[str, Any]]:
    backend = CudaBackend(config)
    rows: list[dict[str, Any]] = []
    try:
        print(f"device {backend.device().key()}", flush=True)
        for sweep, op, dims in selected(only or []):
            if time.monotonic() > deadline:
                print(f"[tune] out of time before {op} {dims}", flush=True)
                break
            started = time.monotonic()
            first = _tune_once(backend, config, op, dims)
            second = _tune_once(backend, config, op, dims)
            seconds = time.monotonic() - started
            win, again = first.winner, second.winner
            first_us = {r.variant_name: r.timing.median_us for r in first.results if r.timing}
            stable = None
            if win and again and win.timing:
                band = win.timing.median_us * (1 + config.tie_band)
                stable = again.variant_name == win.variant_name or (
                    first_us.get(again.variant_name, math.inf) <= band
                )
            hit = backend.cache.lookup(win.variant_id) if win else None
            outcomes: dict[str, int] = {}
            for r in first.results:
                outcomes[r.outcome.value] = outcomes.get(r.outcome.value, 0) + 1
            rows.append(
                {
                    "sweep": sweep,
                    "suite": op,
                    "layout": "row",
                    "problem": dims,
                    "tune_seconds": seconds,
                    "candidates": len(first.results),
                    "outcomes": outcomes,
                    "winner": win.variant_name if win else None,
                    "winner_tuned_us": win.timing.median_us if win and win.timing else None,
                    # every verified candidate's median (what the order put within the cap)
                    "candidates_us": first_us,
                    "second_winner": again.variant_name if again else None,
                    "stable": stable,
                    "artifact": str(hit.artifact) if hit and hit.artifact else None,
                    "failures": [
                        {"name": r.variant_name, "outcome": r.outcome.value, "log": r.log[-300:]}
                        for r in first.results
                        if not r.ok
                    ][:5],
                }
            )
            print(
                f"[tune] {op} {dims} -> {rows[-1]['winner']} / {rows[-1]['second_winner']} "
                f"stable={stable} {seconds:.1f}s {outcomes}",
                flush=True,
            )
    finally:
        backend.close()
    return rows


def phase_energy(config: EngineConfig) -> list[dict[str, Any]]:
    """Each shape tuned for time, then for energy: both winners' time and joules side by side
    (read from the energy tuning, where every candidate has both)."""
    backend = CudaBackend(config)
    out: list[dict[str, Any]] = []
    try:
        for op, dims in ENERGY_SHAPES:
            by_time = _tune_once(backend, config, op, dims).winner
            energy = _tune_once(backend, config, op, dims, "energy")
            measured = {r.variant_name: r for r in energy.results if r.ok}
            row: dict[str, Any] = {"op": op, "problem": dims}
            for label, win in (("time", by_time), ("energy", energy.winner)):
                seen = measured.get(win.variant_name) if win else None
                row[label] = {
                    "winner": win.variant_name if win else None,
                    "median_us": seen.timing.median_us if seen and seen.timing else None,
                    "energy_j": seen.energy_j if seen else None,
                }
            out.append(row)
            print(f"[energy] {op} {dims} {row}", flush=True)
    finally:
        backend.close()
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def report(
    out: Path, rows: list[dict[str, Any]], copy_gbps: float, meta: dict, energy: list[dict]
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "copy_gbps": copy_gbps, "rows": rows, "energy": energy}
    (out / "rows.json").write_text(json.dumps(payload, indent=1, default=str))
    lines = [
        f"Device {meta['device']}, {meta['date']}, `{meta['command']}`; copy {copy_gbps:.0f} GB/s.",
        "",
        "| sweep | op | M | K | winner | tunehub GB/s | x copy | x torch | x triton | stable |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    misses: list[str] = []
    few: list[float] = []
    for r in rows:
        metric = r.get("metric", {})
        own = metric.get("tunehub")
        rel = {
            n: own / metric[n] if own and metric.get(n) else None
            for n in ("copy", "torch", "triton")
        }
        p = r["problem"]
        cells = [f"{v:.2f}" if v else "-" for v in rel.values()]
        lines.append(
            f"| {r['sweep']} | {r['suite']} | {p['m']} | {p['k']} | `{r['winner']}` | "
            f"{own or 0:.0f} | {' | '.join(cells)} | {r['stable']} |"
        )
        name = f"{r['suite']} M={p['m']} K={p['k']}"
        if r["sweep"] == "2^28":
            need = 0.95 if r["suite"] == "reduce" else 0.90 if p["k"] <= 65536 else None
            if need and (rel["copy"] or 0) < need:
                misses.append(f"{name}: {rel['copy'] or 0:.2f}x copy < {need}")
        if r["suite"] == "softmax":
            for n in ("torch", "triton"):
                ratio = rel[n]
                if ratio is not None and ratio < 1.0:
                    misses.append(f"{name}: {ratio:.2f}x {n} < 1.0")
            if r["sweep"] == "few" and rel["torch"]:
                few.append(rel["torch"])
    stable = [r["stable"] for r in rows if r["stable"] is not None]
    lines += [
        "",
        f"Few-rows softmax geomean vs torch.softmax: {_geomean(few):.2f}x (target 1.5x).",
        f"Stability: {sum(stable)}/{len(stable)} shapes same winner or within the tie band.",
        "",
        "Target misses:",
        *(f"- {m}" for m in misses),
        "",
        "| energy shape | objective | winner | us per launch | mJ per launch |",
        "|---|---|---|---|---|",
    ]
    for e in energy:
        p = e["problem"]
        for label in ("time", "energy"):
            w = e[label]
            us = f"{w['median_us']:.1f}" if w["median_us"] else "-"
            mj = f"{w['energy_j'] * 1000:.3f}" if w["energy_j"] else "-"
            lines.append(
                f"| {e['op']} M={p['m']} K={p['k']} | {label} | `{w['winner']}` | {us} | {mj} |"
            )
    (out / "rows.md").write_text("\n".join(lines))
    print("\n".join(lines), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/h200-rows"))
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--max-seconds", type=float, default=300, help="tuning phase budget")
    parser.add_argument("--list", action="store_true", help="print the shapes and exit")
    parser.add_argument(
        "--only", nargs="*", default=[], help="shapes whose op:m:k contains one of these"
    )
    parser.add_argument("--skip-energy", action="store_true", help="no energy pairs")
    args = parser.parse_args()
    if args.list:
        for shape in shapes():
            print(*shape)
        return 0
    config = EngineConfig(
        cache_dir=args.cache_dir,
        bench_seconds=0.02,
        warmup_seconds=0.01,
        min_reps=10,
        compile_timeout_s=300,
        run_timeout_s=30,
    )
    started = time.monotonic()
    rows = phase_tune(config, started + args.max_seconds, args.only)
    energy: list[dict[str, Any]] = []
    try:
        if not args.skip_energy:
            energy = phase_energy(config)
    except Exception as exc:  # reported, the comparison still runs
        print(f"[energy] failed: {type(exc).__name__}: {exc}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows-tune.json").write_text(json.dumps(rows, indent=1, default=str))
    copy_gbps = vs_vendor.phase_compare(rows)
    import torch

    meta = {
        "device": torch.cuda.get_device_name(0),
        "date": dt.date.today().isoformat(),
        "command": "python3 " + " ".join(sys.argv),
        "tune_wall_seconds": time.monotonic() - started,
        "torch": torch.__version__,
    }
    report(args.out, rows, copy_gbps, meta, energy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
