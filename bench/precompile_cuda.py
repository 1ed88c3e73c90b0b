"""Compile, on a machine without a GPU, the CUDA variants a job would build, into a cache folder
that can travel to a GPU host (same nvcc version there: the variant ids include it).

    python bench/precompile_cuda.py --cache-dir .cache/tunehub --arch sm_90 \
        --op gemm --dtype f16 --layout rcr --problem m=8192,n=8192,k=8192 --max-variants 24
    python bench/precompile_cuda.py --cache-dir .cache/tunehub --arch sm_90 --op rms_norm \
        --dtype f16 --problem m=1,k=4096 --problem m=8,k=4096 --problem m=32,k=4096 \
        --problem m=2048,k=4096 --max-variants 104      # Mistral-7B's norms, decode and prefill

It renders exactly what ``tuner.engine.tune`` would render for each request (same space order,
same pruning, same flags), and the vendor discovery builds (the programs that ask cuBLASLt and
cuDNN for their algorithms on the device), so the worker on the GPU host finds every build in
its cache; only the vendor algorithms a discovery names are built there. A variant that several
problems share is built once. ``--layout`` defaults to the op's first.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.backends.cuda import CudaBackend  # noqa: E402
from tuner.engine import candidate_params  # noqa: E402
from tuner.problems import LAYOUTS, problem_from_dict  # noqa: E402
from tuner.registry import load_space  # noqa: E402
from tuner.spaces._vendor_discovery import VendorDiscoverySpace  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest, Variant  # noqa: E402


def parse_dims(text: str) -> dict[str, int | str]:
    dims: dict[str, int | str] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        dims[key] = int(value) if value.lstrip("-").isdigit() else value
    return dims


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--op", required=True)
    parser.add_argument("--dtype", default="f16")
    parser.add_argument("--layout", default=None, help="default: the op's first layout")
    parser.add_argument(
        "--problem", required=True, action="append", help="dims as m=..,n=..,k=.. (repeatable)"
    )
    parser.add_argument("--max-variants", type=int, default=24)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    config = EngineConfig(
        cache_dir=args.cache_dir, compile_workers=args.workers, compile_timeout_s=900
    )
    backend = CudaBackend(config)
    layout = args.layout or LAYOUTS[args.op][0]
    space = load_space(args.op, "cuda")
    variants: dict[str, Variant] = {}
    for text in args.problem:
        request = TuneRequest(
            op=args.op,
            dtype=args.dtype,
            layout=layout,
            backend="cuda",
            problem=problem_from_dict(args.op, parse_dims(text)),
            budget=Budget(max_variants=args.max_variants),
        )
        candidates, _ = candidate_params(request, args.arch, "cuda")
        for params in candidates[: args.max_variants]:
            variant = backend.render(space, params, args.dtype, layout, args.arch)
            variants.setdefault(variant.id, variant)
        if isinstance(space, VendorDiscoverySpace):  # the builds that ask cuBLASLt / cuDNN
            for discovery in space.discoveries(request.problem):
                variant = backend.render(space, discovery.params, args.dtype, layout, args.arch)
                variants.setdefault(variant.id, variant)
    started = time.monotonic()
    results = backend.build(list(variants.values()))
    failed = [v.name for v in variants.values() if not results[v.id].ok]
    cached = sum(1 for r in results.values() if r.cached)
    print(
        f"{len(variants)} variants ({cached} already cached), {len(failed)} failed, "
        f"{time.monotonic() - started:.0f} s; failed: {failed}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
