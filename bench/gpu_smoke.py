"""Build, verify and time the hand-written CUDA reduce and softmax variants in one go.

    python3 bench/gpu_smoke.py --out smoke.json                # on the GPU host
    python3 bench/gpu_smoke.py --build-only --arch sm_90       # compile-check here (no GPU)

For every K of the sweep (M x K = 2^28 elements, f16 by default) it measures every unpruned
variant through CudaBackend (verify first, then time), the torch equivalent, and the device copy
rate, and writes one JSON file plus a table on stderr. A small verification pass covers the
other dtypes and reduce kinds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.backends.cuda import CudaBackend  # noqa: E402
from tuner.engine import candidate_params, winning_result  # noqa: E402
from tuner.problems import ReduceProblem, SoftmaxProblem  # noqa: E402
from tuner.reference import ELEMENT_SIZE  # noqa: E402
from tuner.registry import load_space  # noqa: E402
from tuner.types import BenchResult, EngineConfig, TuneRequest  # noqa: E402

log = logging.getLogger("gpu_smoke")

DEFAULT_KS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
#: (op, dtype, problem dims) verified for correctness only, with a few variants each
CHECKS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("reduce", "bf16", {"m": 777, "k": 4096, "kind": "sum"}),
    ("reduce", "f32", {"m": 1000, "k": 96, "kind": "max"}),
    ("reduce", "f16", {"m": 3, "k": 40000, "kind": "mean"}),
    ("reduce", "f32", {"m": 513, "k": 12, "kind": "sum"}),
    ("softmax", "bf16", {"m": 999, "k": 1000}),
    ("softmax", "f32", {"m": 300, "k": 20000}),
    ("softmax", "f16", {"m": 5, "k": 65536}),
)


def all_variants(backend: CudaBackend, op: str, dtype: str, arch: str) -> list[Any]:
    space = load_space(op, "cuda")
    return [
        backend.render(space, params, dtype, "row", arch)
        for params in space.enumerate(dtype, "row", arch)
    ]


def summary(result: BenchResult) -> dict[str, Any]:
    return {
        "name": result.variant_name,
        "outcome": result.outcome.value,
        "median_us": result.timing.median_us if result.timing else None,
        "p20_us": result.timing.p20_us if result.timing else None,
        "p80_us": result.timing.p80_us if result.timing else None,
        "reps": result.timing.reps if result.timing else 0,
        "throughput": result.throughput,
        "unit": result.throughput_unit,
        "suspect": result.suspect,
        "log": result.log[-300:],
        "batch": result.provenance.get("batch"),
        "graph": result.provenance.get("cuda_graph"),
        "input_sets": result.provenance.get("input_sets"),
        "sm_clock_mhz": (result.provenance.get("nvml_after") or {}).get("sm_clock_mhz"),
        "suspect_reasons": result.provenance.get("suspect_reasons", []),
    }


def measure_problem(
    backend: CudaBackend,
    arch: str,
    op: str,
    dtype: str,
    dims: dict[str, Any],
    variants: dict[str, Any],
    limit: int | None = None,
) -> list[BenchResult]:
    problem = ReduceProblem(**dims) if op == "reduce" else SoftmaxProblem(**dims)
    request = TuneRequest(op=op, dtype=dtype, layout="row", problem=problem, backend="cuda")
    space = load_space(op, "cuda")
    kept, _ = candidate_params(request, arch, "cuda")
    chosen = [variants[space.name(params, dtype, "row")] for params in kept[:limit]]
    builds = backend.build(chosen)  # parallel; cache hits for what the start built
    results: list[BenchResult] = []
    best: float | None = None
    for variant in chosen:
        built = builds[variant.id]
        if not built.ok or built.artifact is None:
            log.error("%s did not compile: %s", variant.name, built.log[-500:])
            continue
        result = backend.run(
            variant,
            built.artifact,
            request,
            best * backend.config.abort_slower_than if best else None,
        )
        if result.ok and result.timing and (best is None or result.timing.median_us < best):
            best = result.timing.median_us
        results.append(result)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", default=".cache/cuda-smoke")
    parser.add_argument("--out", default="gpu_smoke.json")
    parser.add_argument("--arch", default=None, help="build for this arch (default: the GPU's)")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--ops", default="reduce,softmax")
    parser.add_argument("--dtype", default="f16")
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)))
    parser.add_argument("--elements", type=int, default=1 << 28)
    parser.add_argument("--warmup-s", type=float, default=0.02)
    parser.add_argument("--bench-s", type=float, default=0.02)
    parser.add_argument("--budget-s", type=float, default=240.0, help="stop sweeping after this")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    started = time.monotonic()
    config = EngineConfig(
        cache_dir=args.cache,
        warmup_seconds=args.warmup_s,
        bench_seconds=args.bench_s,
        run_timeout_s=60.0,
        min_reps=10,
        compile_timeout_s=300.0,
    )
    backend = CudaBackend(config)
    report: dict[str, Any] = {"compiler": backend.compiler_identity(), "sweep": {}, "checks": []}
    device = None
    if not args.build_only:
        device = backend.device()
        report["device"] = {
            "key": device.key(),
            "driver": device.driver,
            "runtime": device.runtime,
            **device.extra,
        }
    arch = args.arch or (device.arch if device else "sm_90")
    ops = args.ops.split(",")
    variants: dict[tuple[str, str], dict[str, Any]] = {}
    build_dtypes = {"f16", "bf16", "f32"} if args.build_only else {args.dtype}
    for op in ops:
        for dtype in ("f16", "bf16", "f32"):
            vs = all_variants(backend, op, dtype, arch)
            variants[(op, dtype)] = {v.name: v for v in vs}
            if dtype not in build_dtypes:
                continue
            builds = backend.build(vs)
            failed = [v.name for v in vs if not builds[v.id].ok]
            log.info(
                "%s %s: %d variants built, %d failed %s (%.0f s)",
                op,
                dtype,
                len(vs),
                len(failed),
                failed[:5],
                time.monotonic() - started,
            )
            for name in failed[:2]:
                variant = variants[(op, dtype)][name]
                log.error("%s:\n%s", name, builds[variant.id].log[-2000:])
            report.setdefault("build", {})[f"{op}_{dtype}"] = {
                "variants": len(vs),
                "failed": failed,
            }
    if args.build_only:
        Path(args.out).write_text(json.dumps(report, indent=1))
        return 0 if not any(b["failed"] for b in report["build"].values()) else 1

    report["copy_gb_per_s"] = [backend.measure_copy_bandwidth(1 << 30) for _ in range(2)]
    log.info("device copy: %s GB/s", report["copy_gb_per_s"])
    for op, dtype, dims in CHECKS:
        results = measure_problem(backend, arch, op, dtype, dims, variants[(op, dtype)], limit=8)
        report["checks"].append(
            {"op": op, "dtype": dtype, "dims": dims, "results": [summary(r) for r in results]}
        )
        bad = [(r.variant_name, r.outcome.value, r.log[:200]) for r in results if not r.ok]
        log.info("check %s %s %s: %d ok, bad %s", op, dtype, dims, sum(r.ok for r in results), bad)
    elem = ELEMENT_SIZE[args.dtype]
    sweep = [(k, op) for k in (int(x) for x in args.ks.split(",")) for op in ops]
    for k, op in sweep:
        if time.monotonic() - started > args.budget_s:
            log.warning("budget spent: stopping before %s k=%d", op, k)
            break
        shape: dict[str, Any] = {"m": args.elements // k, "k": k}
        if op == "reduce":
            shape["kind"] = "sum"
        results = measure_problem(backend, arch, op, args.dtype, shape, variants[(op, args.dtype)])
        winner = winning_result(results, config.tie_band)
        problem = ReduceProblem(**shape) if op == "reduce" else SoftmaxProblem(**shape)
        baseline = backend.request(
            {
                "cmd": "torch_baseline",
                "op": op,
                "dtype": args.dtype,
                "layout": "row",
                "problem": shape,
                "seed": 0,
            },
            120.0,
        )
        samples = sorted(baseline.get("samples_us") or [0.0])
        torch_us = samples[len(samples) // 2]
        torch_gbs = problem.bytes_moved(elem) / torch_us / 1e3 if torch_us else None
        report["sweep"][f"{op}_k{k}"] = {
            "dims": shape,
            "candidates": len(results),
            "winner": summary(winner) if winner else None,
            "torch_us": torch_us,
            "torch_gb_per_s": torch_gbs,
            "results": [summary(r) for r in results],
        }
        log.info(
            "%s k=%d: best %s %.0f GB/s (torch %.0f GB/s), %d candidates, %d not ok",
            op,
            k,
            winner.variant_name if winner else None,
            (winner.throughput or 0) if winner else 0,
            torch_gbs or 0,
            len(results),
            sum(not r.ok for r in results),
        )
        Path(args.out).write_text(json.dumps(report, indent=1))
    report["seconds"] = time.monotonic() - started
    Path(args.out).write_text(json.dumps(report, indent=1))
    backend.close()
    os.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
