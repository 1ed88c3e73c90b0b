"""The swap-AB decode GEMM against cuBLAS on the decode shapes of bench/vs_vendor_gemm.py: the
head of the family's order (and a spread of the rest) built and timed per shape, with
torch.matmul (cuBLAS) interleaved on the same inputs and the weight-streaming limit.

    python3 bench/swapab_sweep.py --out $OUT [--per-shape 12]   # on the GPU host

Every time is the harness's (batches of back-to-back launches in a CUDA graph, input sets
rotated over >= 2x L2, CUDA events, median), as in bench/vs_vendor_gemm.py; `of limit` is
bytes(W) / copy rate over the time. Writes swapab-sweep.json and swapab-sweep.md under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.vendor_common import time_artifacts  # noqa: E402
from bench.vs_vendor_gemm import DTYPE, ELEMENT_BYTES, LAYOUT, MODEL_LAYERS  # noqa: E402
from tuner.problems import GemmProblem  # noqa: E402
from tuner.spaces import cuda_gemm_swapab as swapab  # noqa: E402
from tuner.spaces.base import Params  # noqa: E402
from tuner.spaces.cuda_gemm import CudaGemmSpace  # noqa: E402
from tuner.types import EngineConfig  # noqa: E402

DECODE_MS = (4, 16, 64)
#: the axes a spread covers beyond the head of the order
_SPREAD = ("w_tiles", "warps", "slices", "splits", "unroll")


def picks(problem: GemmProblem, count: int) -> list[Params]:
    """The first half of ``count`` from the family's order, then the first candidate of each
    combination of the ``_SPREAD`` axes not yet taken (what the order might be missing)."""
    space = CudaGemmSpace()
    kept = [
        p
        for p in space.enumerate(DTYPE, LAYOUT, "sm_90")
        if p["family"] == swapab.FAMILY and space.prune(p, problem, DTYPE, LAYOUT) is None
    ]
    ordered = swapab.order(kept, problem)
    chosen = ordered[: count // 2]
    seen = {tuple(p[a] for a in _SPREAD) for p in chosen}
    for p in ordered[count // 2 :]:
        key = tuple(p[a] for a in _SPREAD)
        if len(chosen) < count and key not in seen:
            chosen.append(p)
            seen.add(key)
    return chosen


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from tuner.backends.cuda import CudaBackend
    from tuner.backends.cuda_harness import Harness, probe

    space = CudaGemmSpace()
    backend = CudaBackend(EngineConfig(cache_dir=args.cache_dir, compile_timeout_s=240))
    arch = backend.device().arch
    shapes = [(model, layer, m, n, k) for model, layer, n, k in MODEL_LAYERS for m in DECODE_MS]
    plans = []
    for model, layer, m, n, k in shapes:
        variants = [
            backend.render(space, p, DTYPE, LAYOUT, arch)
            for p in picks(GemmProblem(m, n, k), args.per_shape)
        ]
        plans.append(((model, layer, m, n, k), variants))
    unique = {v.id: v for _, variants in plans for v in variants}
    started = time.monotonic()
    built = backend.build(list(unique.values()))
    backend.close()
    print(f"[build] {len(unique)} variants in {time.monotonic() - started:.0f}s", flush=True)
    harness = Harness(probe())
    copy_gbps = float(harness.copy({"bytes": 1 << 30})["gb_per_s"])
    rows = []
    for (model, layer, m, n, k), variants in plans:
        row: dict[str, Any] = {"model": model, "layer": layer, "m": m, "n": n, "k": k}
        row["order"] = [v.name for v in variants]
        req = {
            "cmd": "run", "op": "gemm", "dtype": DTYPE, "layout": LAYOUT,
            "problem": {"m": m, "n": n, "k": k}, "seed": 0, "warmup_s": 0.02,
            "bench_s": args.bench_s, "min_samples": 10, "max_samples": 10_000, "abort_us": None,
        }  # fmt: skip
        artifacts = {v.name: built[v.id].artifact if built[v.id].ok else None for v in variants}
        row["build_errors"] = {
            v.name: built[v.id].log[-300:] for v in variants if not built[v.id].ok
        }
        times = time_artifacts(harness, req, row, artifacts)
        work = harness.workload_for(req)
        pairs = [(i[0], i[1].t(), o) for i, o in zip(work.inputs, work.outputs, strict=True)]

        def cublas(i: int, stream: int, pairs: list = pairs) -> None:
            a, b, c = pairs[i]
            torch.matmul(a, b, out=c)

        run = harness.wl.time_launches(
            cublas, len(pairs), warmup_s=0.02, bench_s=args.bench_s, min_samples=10,
            max_samples=10_000, abort_us=None,
        )  # fmt: skip
        torch.cuda.synchronize()
        row["cublas_us"] = statistics.median(run.samples_us)
        row["times_us"] = dict(sorted(times.items(), key=lambda item: item[1]))
        row["stream_limit_us"] = n * k * ELEMENT_BYTES / (copy_gbps * 1e3)
        best = next(iter(row["times_us"].items()), (None, None))
        print(f"[sweep] {model} {layer} m={m}: best {best} cublas {row['cublas_us']:.2f}us "
              f"limit {row['stream_limit_us']:.2f}us", flush=True)  # fmt: skip
        rows.append(row)
    return {"device": torch.cuda.get_device_name(0), "copy_gbps": copy_gbps, "rows": rows}


def write_page(out: Path, payload: dict[str, Any]) -> None:
    lines = [
        f"# swap-AB decode GEMM sweep on {payload['device']}",
        "",
        f"f16, rcr (D = X W^T, W [n,k]); copy rate {payload['copy_gbps']:.0f} GB/s; `of limit` "
        "is bytes(W) / copy rate over the time. Best swapab variant per shape vs torch.matmul.",
        "",
        "| model | layer | m | n | k | best swapab | us | cuBLAS us | vs cuBLAS | of limit | "
        "cuBLAS of limit | rank in order |",
        "|" + "---|" * 12,
    ]
    for r in payload["rows"]:
        if not r["times_us"]:
            continue
        name, us = next(iter(r["times_us"].items()))
        rank = r["order"].index(name)
        cells = [r["model"], r["layer"], r["m"], r["n"], r["k"], f"`{name}`", f"{us:.1f}",
                 f"{r['cublas_us']:.1f}", f"{r['cublas_us'] / us:.2f}x",
                 f"{r['stream_limit_us'] / us:.2f}", f"{r['stream_limit_us'] / r['cublas_us']:.2f}",
                 rank]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    (out / "swapab-sweep.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--per-shape", type=int, default=12)
    parser.add_argument("--bench-s", type=float, default=0.1)
    parser.add_argument("--report", type=Path, help="write the page of a raw JSON and exit")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        write_page(args.out, json.loads(args.report.read_text()))
        return 0
    payload = sweep(args)
    (args.out / "swapab-sweep.json").write_text(json.dumps(payload, indent=1))
    write_page(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
