"""The bulk-copy softmax family beside the existing softmax variants, torch.softmax and the device
copy, f16, on one GPU in one process. A benchmark script, not a test.

    python3 bench/softmax_bulk.py --precompile [--cache-dir .cache/tunehub]   # here, no GPU
    python3 bench/softmax_bulk.py --out $OUT/softmax-bulk [--deadline 180]    # on the GPU host
    python3 bench/softmax_bulk.py --list                                      # the labels

Shapes: issue 22's two (5341 x 50257, a GPT-2 vocabulary over thousands of rows; 4 x 256000, a
few Gemma-vocabulary rows) and K in between, many rows and few (``SHAPES``). Per shape the
labels are every bulk-copy variant the space keeps for it (``softmax_bulk.cu.j2``), the
existing variants (the winner recorded in bench/regress_baseline.json, where it has the shape,
and the first ``EXISTING_HEAD`` other variants of the space's order), torch.softmax and the
copy. No tuning: the variants are named, built (cache hits after ``--precompile``; the ids
include the nvcc version, so the GPU host's nvcc must be the same 13.0 or they are built there)
and timed as bench/regress.py times them (METHOD.md): ``ROUNDS`` interleaved rounds, each label
once a round in rotated order, batches of back-to-back launches in a CUDA graph over input sets
rotated past 2x L2, CUDA events, medians; every variant run is verified against torch's float32
softmax by the harness first (a wrong answer is an error, not a time). The copy is a plain
device-to-device copy of ``COPY_BYTES`` (plain launches, as bench/regress.py). GB/s count the
bytes read and written once.

Writes ``softmax_bulk.json`` (meta, every label's round medians, GB/s and x copy per shape) and
``softmax_bulk.md`` (the table) under --out. bench/h200_softmax_bulk.sh runs it in one call.
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

from bench import regress_rule  # noqa: E402
from bench.vendor_common import Timer, artifact_timer, interleaved_rounds, launch_timer  # noqa: E402
from tuner.backends.cuda import CudaBackend  # noqa: E402
from tuner.problems import SoftmaxProblem  # noqa: E402
from tuner.reference import ELEMENT_SIZE  # noqa: E402
from tuner.spaces.cuda_softmax import CudaSoftmaxSpace  # noqa: E402
from tuner.spaces.cuda_softmax_bulk import is_bulk  # noqa: E402
from tuner.types import EngineConfig, Variant  # noqa: E402

DTYPE = "f16"
ARCH = "sm_90"
#: (m, k): issue 22's two shapes first, then K in between (many rows, then few)
SHAPES = [(5341, 50257), (4, 256000), (8388, 32000), (1766, 151936), (64, 128256), (1, 128256)]
#: existing variants per shape: the first of the space's order (beside the recorded winner)
EXISTING_HEAD = 4
ROUNDS = 3
TIMING = {"warmup_s": 0.02, "bench_s": 0.04, "min_samples": 10, "max_samples": 10_000}
COPY_BYTES = 1 << 29
BASELINE = Path(__file__).resolve().parent / "regress_baseline.json"
SPACE = CudaSoftmaxSpace()


#: whose recorded winners are timed beside the family (the device the issue's figures are on)
RECORDED_DEVICE = "NVIDIA H200"


def recorded_winner(m: int, k: int) -> str | None:
    """The winner bench/regress_baseline.json records on ``RECORDED_DEVICE`` for softmax m x k
    (None: not recorded)."""
    try:
        records = regress_rule.records_for(regress_rule.load_baseline(BASELINE), RECORDED_DEVICE)
    except (OSError, ValueError):
        return None
    found = records.get(f"softmax m={m},k={k}")
    return found.get("winner") if isinstance(found, dict) else None


def labels(m: int, k: int) -> dict[str, dict[str, Any]]:
    """Variant name -> params of every variant timed at m x k: the bulk family first."""
    problem = SoftmaxProblem(m=m, k=k)
    kept = [
        p
        for p in SPACE.enumerate(DTYPE, "row", ARCH)
        if SPACE.prune(p, problem, DTYPE, "row") is None
    ]
    ordered = SPACE.order(kept, problem, DTYPE, "row")
    named = {SPACE.name(p, DTYPE, "row"): p for p in ordered}
    bulk = [n for n, p in named.items() if is_bulk(p)]
    existing = [n for n, p in named.items() if not is_bulk(p)][:EXISTING_HEAD]
    winner = recorded_winner(m, k)
    if winner in named and winner not in existing:
        existing.append(winner)
    return {n: named[n] for n in bulk + existing}


def render_all(backend: CudaBackend) -> dict[tuple[int, int], dict[str, Variant]]:
    return {
        (m, k): {
            name: backend.render(SPACE, params, DTYPE, "row", ARCH)
            for name, params in labels(m, k).items()
        }
        for m, k in SHAPES
    }


def build(backend: CudaBackend, rendered: dict[tuple[int, int], dict[str, Variant]]) -> dict:
    """Builds every variant once (cache hits where precompiled); id -> build result."""
    unique = {v.id: v for per_shape in rendered.values() for v in per_shape.values()}
    started = time.monotonic()
    results = backend.build(list(unique.values()))
    cached = sum(1 for r in results.values() if r.cached)
    failed = [v.name for v in unique.values() if not results[v.id].ok]
    print(
        f"[build] {len(unique)} variants, {cached} cached, {len(failed)} failed "
        f"{failed}, {time.monotonic() - started:.0f} s",
        flush=True,
    )
    return results


def gbps(m: int, k: int, us: float) -> float:
    return 2.0 * m * k * ELEMENT_SIZE[DTYPE] / us / 1e3


def time_shape(
    harness: Any, torch: Any, m: int, k: int, artifacts: dict[str, str], copy: Timer
) -> dict[str, Any]:
    """Every label of one shape in interleaved rounds; the row of softmax_bulk.json."""
    req = {
        "cmd": "run",
        "op": "softmax",
        "dtype": DTYPE,
        "layout": "row",
        "problem": {"m": m, "k": k},
        "seed": 0,
        **TIMING,
        "abort_us": None,
    }
    timers: dict[str, Timer] = {
        name: artifact_timer(harness, req, a) for name, a in artifacts.items()
    }
    work = harness.workload_for(req)
    sets = [ins[0] for ins in work.inputs]

    def torch_softmax(i: int, stream: int) -> None:
        torch.softmax(sets[i], dim=1)  # what users call: allocates its output

    timers["torch"] = launch_timer(harness, torch_softmax, len(sets), TIMING)
    timers["copy"] = copy
    row: dict[str, Any] = {"m": m, "k": k}
    rounds = interleaved_rounds(timers, row, ROUNDS)
    copy_us = statistics.median(rounds["copy"]) if rounds["copy"] else None
    copy_gbps = 2.0 * COPY_BYTES / copy_us / 1e3 if copy_us else None
    results: dict[str, Any] = {}
    for label, values in rounds.items():
        if not values or label == "copy":
            continue
        us = statistics.median(values)
        rate = gbps(m, k, us)
        results[label] = {
            "rounds_us": values,
            "median_us": us,
            "gbps": rate,
            "x_copy": rate / copy_gbps if copy_gbps else None,
        }
    row.update(copy_gbps=copy_gbps, labels=results)
    for family, test in (("bulk", True), ("existing", False)):
        names = [n for n in results if n != "torch" and n.endswith(("_bulk", "_bulkp")) == test]
        best = min(names, key=lambda n: results[n]["median_us"]) if names else None
        row[f"best_{family}"] = best
    return row


def _cell(row: dict[str, Any], name: str | None) -> str:
    found = row["labels"].get(name) if name else None
    if not found:
        return "-"
    return f"{found['gbps']:.0f} ({found['x_copy'] or 0:.3f})"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| M x K | best bulk | GB/s (x copy) | best existing | GB/s (x copy) | torch GB/s "
        "(x copy) | copy GB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "labels" not in r:
            lines.append(f"| {r['m']} x {r['k']} | {r.get('skipped', 'failed')} |||||| ")
            continue
        lines.append(
            f"| {r['m']} x {r['k']} | `{r['best_bulk']}` | {_cell(r, r['best_bulk'])} | "
            f"`{r['best_existing']}` | {_cell(r, r['best_existing'])} | {_cell(r, 'torch')} | "
            f"{r['copy_gbps'] or 0:.0f} |"
        )
    return "\n".join(lines)


def _commit(explicit: str | None) -> str:
    if explicit:
        return explicit
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def run(args: argparse.Namespace, backend: CudaBackend) -> dict[str, Any]:
    import torch

    from tuner.backends.cuda_harness import Harness, probe

    started = time.monotonic()
    rendered = render_all(backend)
    builds = build(backend, rendered)
    harness = Harness(probe())
    src = torch.rand(COPY_BYTES // 2, device="cuda").to(torch.float16)
    dst = torch.empty_like(src)

    def copy_once(i: int, stream: int) -> None:
        dst.copy_(src)

    copy = launch_timer(harness, copy_once, 1, {**TIMING, "use_graph": False})
    rows: list[dict[str, Any]] = []
    for (m, k), variants in rendered.items():
        if time.monotonic() - started > args.deadline:
            rows.append({"m": m, "k": k, "skipped": "deadline"})
            continue
        artifacts = {
            name: str(builds[v.id].artifact)
            for name, v in variants.items()
            if builds[v.id].ok and builds[v.id].artifact
        }
        try:
            row = time_shape(harness, torch, m, k, artifacts, copy)
        except Exception as exc:  # this shape is lost (reported); the others go on
            row = {"m": m, "k": k, "error": f"{type(exc).__name__}: {exc}"[:300]}
        rows.append(row)
        best = {x: row.get(x) for x in ("best_bulk", "best_existing", "error")}
        print(f"[time] {m} x {k}: {json.dumps(best)}", flush=True)
        torch.cuda.synchronize()
    meta = {
        "device": torch.cuda.get_device_name(0),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(args.commit),
        "command": "python3 " + " ".join(sys.argv),
        "torch": torch.__version__,
        "dtype": DTYPE,
        "rounds": ROUNDS,
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    return {"meta": meta, "shapes": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("softmax-bulk-out"))
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument(
        "--deadline", type=float, default=180.0, help="seconds before the last shape"
    )
    parser.add_argument("--commit", help="the commit measured (default: git rev-parse HEAD)")
    parser.add_argument("--precompile", action="store_true", help="build the variants, no GPU")
    parser.add_argument("--list", action="store_true", help="print every shape's labels")
    args = parser.parse_args(argv)
    if args.deadline <= 0:
        parser.error("--deadline: must be positive")
    if args.list:
        for m, k in SHAPES:
            print(f"{m} x {k}: {' '.join(labels(m, k))} torch copy")
        return 0
    backend = CudaBackend(EngineConfig(cache_dir=args.cache_dir, compile_timeout_s=900))
    try:
        if args.precompile:
            results = build(backend, render_all(backend))
            return 0 if all(r.ok for r in results.values()) else 1
        payload = run(args, backend)
    finally:
        backend.close()
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(payload["shapes"])
    meta = payload["meta"]
    head = f"{meta['device']} {meta['date']} commit {meta['commit']}, f16, `{meta['command']}`"
    (args.out / "softmax_bulk.json").write_text(json.dumps(payload, indent=1, default=str))
    (args.out / "softmax_bulk.md").write_text(f"{head}\n\n{text}\n")
    print(f"{head}\n{text}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
