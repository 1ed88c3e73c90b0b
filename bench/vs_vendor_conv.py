"""conv2d on CNN layers: tunehub's answer (cuDNN engine configs and CUTLASS 2.x kernels) against
cuDNN's default, in one GPU run.

    python3 bench/vs_vendor_conv.py --out $OUT [--deadline-s 200]      # on the GPU host
    python3 bench/vs_vendor_conv.py --precompile --cache-dir .stage/conv/.cache/tunehub
                                         # here: the CUTLASS heads of every shape (no GPU)
    python3 bench/vs_vendor_conv.py --report bench/results/h200-conv-vendor.json \
        --out docs/benchmarks                                           # the page, anywhere

Shapes (f16, NHWC x, KRSC w), batch 1 and 8: ResNet-50 (torchvision v1.5: the stride on the
3x3) 3x3 and 1x1 layers of every stage, its stride-2 3x3 and 1x1 downsample layers; ConvNeXt-T
stride-2 2x2 downsample layers and 1x1 pointwise (MLP) layers. Depthwise and grouped layers are
not conv2d problems tunehub takes (no groups), nor 3-channel stems (16-byte channel rows).

Phase 1 tunes every shape with the engine (CUDA backend, harness subprocess): budget = every
config discovery returns (cuDNN engine configs; on 1x1 stride-1 layers also cuBLASLt's
algorithms for the GEMM the layer is) plus the CUTLASS head (``_CUTLASS_HEAD``), at most
``--max-variants`` within ``--shape-seconds``. ``--full-list-1x1``: the 1x1 layers take every
config discovered (no ``--max-variants`` cap) within ``--full-list-seconds``, printing their
progress; both time caps shrink in proportion when the time left before the tuning deadline
(``--deadline-s`` less ``--compare-reserve-s``) would not cover them (``shape_seconds``).
``--only-1x1``: the 1x1 layers alone.

Phase 2 (bench/conv_compare.py) re-times, in this process with one function (batches of
back-to-back launches in a CUDA graph, input sets rotated over >= 2x L2, CUDA events, median),
interleaved per shape on the same inputs: the winner, the cuDNN default (heuristic mode A's
first engine config, the candidate every tuning job tries first) and
torch.nn.functional.conv2d on channels_last f16 tensors (torch's cuDNN path, benchmark off; and
once more with cudnn.benchmark on, shown beside it, not counted in the ratios); and the
output-buffer controls: the winner and the default writing one fixed output (torch's
conditions), torch's cuDNN op writing the rotated outputs (tunehub's conditions). The page
(bench/conv_report.py) puts them side by side to tell an output-buffer lead from a kernel lead.

A ~6-minute device budget for the whole bench (the 1x1 question):
    python3 bench/vs_vendor_conv.py --out $OUT --full-list-1x1 --deadline-s 330 \
        --compare-reserve-s 70 --max-variants 14 --shape-seconds 5 --full-list-seconds 20
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

from bench.conv_compare import COMPARE_ROUNDS, phase_compare  # noqa: E402
from bench.conv_report import TIE_BAND, write_report  # noqa: E402
from bench.vendor_common import summary  # noqa: E402
from tuner.engine import candidate_params, tune  # noqa: E402
from tuner.problems import Conv2dProblem  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402

#: (model, layer, h, c, k, r, stride, pad) at the layer's input
LAYERS = [
    ("resnet50", "l1.conv2 3x3", 56, 64, 64, 3, 1, 1),
    ("resnet50", "l1.conv3 1x1", 56, 64, 256, 1, 1, 0),
    ("resnet50", "l2.conv2 3x3 s2", 56, 128, 128, 3, 2, 1),
    ("resnet50", "l2.down 1x1 s2", 56, 256, 512, 1, 2, 0),
    ("resnet50", "l3.conv2 3x3", 14, 256, 256, 3, 1, 1),
    ("resnet50", "l3.conv1 1x1", 14, 1024, 256, 1, 1, 0),
    ("resnet50", "l4.conv2 3x3 s2", 14, 512, 512, 3, 2, 1),
    ("resnet50", "l4.conv2 3x3", 7, 512, 512, 3, 1, 1),
    ("convnext-t", "down2 2x2 s2", 56, 96, 192, 2, 2, 0),
    ("convnext-t", "down3 2x2 s2", 28, 192, 384, 2, 2, 0),
    ("convnext-t", "s1.pwconv1 1x1", 56, 96, 384, 1, 1, 0),
    ("convnext-t", "s3.pwconv2 1x1", 14, 1536, 384, 1, 1, 0),
]
BATCHES = (1, 8)
DTYPE, LAYOUT = "f16", "nhwc"
#: CUTLASS kernels each shape's budget holds after the cuDNN configs
_CUTLASS_HEAD = 3


def shapes() -> list[dict[str, Any]]:
    out = []
    for batch in BATCHES:
        for model, layer, h, c, k, r, stride, pad in LAYERS:
            out.append(
                {
                    "model": model,
                    "layer": layer,
                    "n": batch,
                    "h": h,
                    "w": h,
                    "c": c,
                    "k": k,
                    "r": r,
                    "s": r,
                    "stride": stride,
                    "pad": pad,
                    "dilation": 1,
                }
            )
    return out


def _problem(shape: dict[str, Any]) -> Conv2dProblem:
    return Conv2dProblem(**{k: shape[k] for k in Conv2dProblem.dim_names})


def precompile(cache_dir: str, workers: int) -> int:
    """Build every shape's CUTLASS head here (the cuDNN configs are found on the GPU)."""
    from tuner.backends.cuda import CudaBackend
    from tuner.registry import load_space

    backend = CudaBackend(
        EngineConfig(cache_dir=cache_dir, compile_workers=workers, compile_timeout_s=1800)
    )
    space = load_space("conv2d", "cuda")
    wanted: dict[str, Any] = {}
    for shape in shapes():
        request = TuneRequest("conv2d", DTYPE, LAYOUT, _problem(shape), backend="cuda")
        kept, _ = candidate_params(request, "sm_90", "cuda")
        for params in kept[:_CUTLASS_HEAD]:
            variant = backend.render(space, params, DTYPE, LAYOUT, "sm_90")
            wanted[variant.id] = variant
    print(f"{len(wanted)} CUTLASS variants: {sorted(v.name for v in wanted.values())}", flush=True)
    started = time.monotonic()
    results = backend.build(list(wanted.values()))
    failed = [v.name for v in wanted.values() if not results[v.id].ok]
    print(f"built in {time.monotonic() - started:.0f} s; failed: {failed}", flush=True)
    return 1 if failed else 0


def is_1x1(shape: dict[str, Any]) -> bool:
    """A 1x1 layer (any stride): the shapes ``--full-list-1x1`` tunes over every config."""
    return shape["r"] == 1 and shape["s"] == 1


def shape_seconds(nominal: list[float], index: int, seconds_left: float) -> float:
    """Seconds shape ``index`` may tune: its nominal cap, or less when the time left before the
    tuning deadline would not cover the nominal caps of it and every later shape (then each
    gets its proportional share, so the last shapes are not starved)."""
    remaining = sum(nominal[index:])
    if remaining <= 0 or seconds_left <= 0:
        return 0.0
    return min(nominal[index], seconds_left * nominal[index] / remaining)


class TuneProgress:
    """A :class:`tuner.engine.TuneObserver` printing one line every ``every`` candidates (and
    the last): how far a long (whole-list) shape is, and its best so far."""

    def __init__(self, label: str, every: int = 16) -> None:
        self.label = label
        self.every = every
        self.started = time.monotonic()
        self.best: tuple[float, str] | None = None

    def on_start(self, total: int, pruned: int) -> None:
        print(f"[tune]   {self.label}: {total} candidates ({pruned} pruned)", flush=True)

    def on_result(self, result: Any, done: int, total: int) -> None:
        if (
            result.ok
            and result.timing
            and (self.best is None or result.timing.median_us < self.best[0])
        ):
            self.best = (result.timing.median_us, result.variant_name)
        if done % self.every and done != total:
            return
        best = f"best {self.best[0]:.2f} us {self.best[1]}" if self.best else "none verified"
        print(
            f"[tune]   {self.label}: {done}/{total} in {time.monotonic() - self.started:.0f}s, "
            f"{best}",
            flush=True,
        )


def phase_tune(
    args: argparse.Namespace, config: EngineConfig, deadline: float, todo: list[dict[str, Any]]
) -> list[dict]:
    """Tune every shape of ``todo``; a whole-list shape (``--full-list-1x1``) takes every config
    discovered (cuDNN's, and cuBLASLt's on stride-1 1x1 layers) plus the CUTLASS head, within
    ``--full-list-seconds``."""
    from tuner.backends.cuda import CudaBackend

    whole = [bool(args.full_list_1x1 and is_1x1(shape)) for shape in todo]
    nominal = [args.full_list_seconds if w else args.shape_seconds for w in whole]
    backend = CudaBackend(config)
    rows: list[dict[str, Any]] = []
    try:
        device = backend.device()
        print(f"device {device.key()} driver {device.driver}", flush=True)
        for i, shape in enumerate(todo):
            seconds_cap = shape_seconds(nominal, i, deadline - time.monotonic())
            if seconds_cap < 1.0:
                print(f"[tune] deadline, stopping at shape {i}", flush=True)
                break
            problem = _problem(shape)
            probe = TuneRequest("conv2d", DTYPE, LAYOUT, problem, backend="cuda")
            found = backend.discover(probe, device.arch)
            discovery = list(backend.last_discovery) if found else []
            # cuDNN engine configs, and (1x1 stride-1 layers) cuBLASLt algorithms of the GEMM
            n_cudnn = sum(1 for p in found if p.get("library") == "cudnn")
            cap = len(found) + _CUTLASS_HEAD if whole[i] else args.max_variants
            budget = Budget(
                max_variants=max(1, min(cap, len(found) + _CUTLASS_HEAD)),
                max_seconds=seconds_cap,
            )
            request = TuneRequest("conv2d", DTYPE, LAYOUT, problem, "cuda", budget=budget)
            label = f"{shape['model']} {shape['layer']} n={shape['n']}"
            started = time.monotonic()
            result = tune(request, backend, config, TuneProgress(label) if whole[i] else None)
            seconds = time.monotonic() - started
            win = result.winner
            first = result.results[0] if result.results else None
            default = first if first and first.params.get("library") == "cudnn" else None
            hit = backend.cache.lookup(win.variant_id) if win else None
            dhit = backend.cache.lookup(default.variant_id) if default else None
            rows.append(
                {
                    **shape,
                    "budget": budget.max_variants,
                    "budget_seconds": round(seconds_cap, 1),
                    "full_list": whole[i],
                    "discovered": n_cudnn,
                    "discovered_cublaslt": len(found) - n_cudnn,
                    "discovered_heur_a": sum(1 for d in discovery if d.get("source") == "heur_a"),
                    # the whole list where every config was asked: a later run can build them
                    "discovery": discovery if whole[i] else discovery[:3],
                    "seconds": round(seconds, 2),
                    "winner": win.variant_name if win else None,
                    "winner_params": win.params if win else None,
                    "winner_us": win.timing.median_us if win and win.timing else None,
                    "vendor_default": default.variant_name if default else None,
                    "vendor_default_ok": bool(default and default.ok),
                    "vendor_default_artifact": str(dhit.artifact) if dhit else None,
                    "artifact": str(hit.artifact) if hit and hit.artifact else None,
                    "candidates": [summary(r) for r in result.results],
                }
            )
            ok = sum(1 for r in result.results if r.ok)
            print(
                f"[tune] {label}: {rows[-1]['winner']} {rows[-1]['winner_us']} us, "
                f"{ok}/{len(result.results)} ok of {budget.max_variants} budgeted ({n_cudnn} "
                f"cuDNN configs, {len(found) - n_cudnn} cuBLASLt algorithms) in {seconds:.1f}s "
                f"of {seconds_cap:.0f}s",
                flush=True,
            )
    finally:
        backend.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--deadline-s", type=float, default=200.0)
    parser.add_argument("--compare-reserve-s", type=float, default=45.0)
    parser.add_argument("--shape-seconds", type=float, default=12.0)
    parser.add_argument("--max-variants", type=int, default=24)
    parser.add_argument(
        "--full-list-1x1",
        action="store_true",
        help="1x1 layers: budget every cuDNN config discovered plus the CUTLASS head",
    )
    parser.add_argument(
        "--full-list-seconds",
        type=float,
        default=25.0,
        help="a whole-list shape's time cap (both caps shrink to fit --deadline-s)",
    )
    parser.add_argument("--only-1x1", action="store_true", help="tune and time 1x1 layers only")
    parser.add_argument("--precompile", action="store_true", help="build the CUTLASS heads here")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--report", type=Path, help="write the page of a raw JSON and exit")
    args = parser.parse_args(argv)
    if args.precompile:
        return precompile(args.cache_dir, args.workers)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        write_report(args.out, json.loads(args.report.read_text()))
        return 0
    started = time.monotonic()
    deadline = started + args.deadline_s
    config = EngineConfig(
        cache_dir=args.cache_dir,
        bench_seconds=0.04,
        warmup_seconds=0.03,
        min_reps=10,
        compile_timeout_s=240,
        run_timeout_s=60,
        tie_band=TIE_BAND,
    )
    todo = [s for s in shapes() if is_1x1(s) or not args.only_1x1]
    rows = phase_tune(args, config, deadline - args.compare_reserve_s, todo)
    tune_wall = time.monotonic() - started
    raw = args.out / "h200-conv-vendor.json"
    meta: dict[str, Any] = {
        "tune_wall_seconds": tune_wall,
        "command": "python3 " + " ".join(sys.argv),
        "compare_rounds": COMPARE_ROUNDS,
    }
    raw.write_text(json.dumps({"meta": meta, "rows": rows}, default=str))
    phase_compare(rows, deadline, DTYPE, LAYOUT)
    import torch

    from tuner.vendor_paths import cudnn_version

    meta.update(
        device=torch.cuda.get_device_name(0),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        torch=torch.__version__,
        cudnn=cudnn_version(),
        torch_cudnn=torch.backends.cudnn.version(),
        compare_wall_seconds=time.monotonic() - started - tune_wall,
    )
    payload = {"meta": meta, "rows": rows}
    raw.write_text(json.dumps(payload, indent=1, default=str))
    write_report(args.out, payload)
    print(
        f"wrote {raw} and the page (tuning {tune_wall:.0f}s, "
        f"comparing {meta['compare_wall_seconds']:.0f}s)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
