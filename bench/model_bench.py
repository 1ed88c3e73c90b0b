"""Whole-model speed: a 7B-class decoder (and ResNet-50) in torch eager, TunableOp,
torch.compile and tunehub's PyTorch ops, timed side by side in one process (not a test).

    python bench/model_bench.py run --arms eager,tunableop,compile,tunehub --out OUT
    python bench/model_bench.py record --shapes OUT/shapes.jsonl      # the untuned shapes
    python bench/model_bench.py resnet --arms eager,tunehub --batches 1,8 --out OUT
    python bench/model_bench.py list     # precompile commands for every shape of the run

bench/h200_model_run.sh runs the whole flow on the H200: a service and a CUDA worker, the
recorded shapes tuned with ``tunehub tune --from-file``, the arms, and a second process on an
empty client cache (artifacts only). Decode steps are captured in CUDA graphs in every arm and
timed as graph replays; the arms' graphs of one batch size are timed in interleaved rounds of
rotated order (the median of the round medians), so drift of the power-capped GPU falls on all
arms alike. Prefill (one 2048-token prompt) runs as plain launches. Tokens/s is batch / step
time for decode and prompt tokens / forward time for prefill.

The per-op breakdown comes from torch.profiler over a few un-captured steps of each arm, with
a range per op class (bench/model_decoder.py's scopes); the torch.compile arm fuses across
those ranges, so its kernels are listed by name instead.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.model_decoder import (  # noqa: E402
    MISTRAL_7B,
    QWEN25_7B,
    TINY,
    Decoder,
    DecoderDims,
    TorchOps,
)
from bench.vendor_common import interleaved_medians  # noqa: E402

log = logging.getLogger("model_bench")

MODELS = {"mistral-7b": MISTRAL_7B, "qwen2.5-7b": QWEN25_7B, "tiny": TINY}
ARMS = ("eager", "tunableop", "compile", "tunehub")
#: op classes of the breakdown (bench/model_decoder.py scopes)
SCOPES = ("linear", "rms_norm", "attention", "rotary", "silu_mul", "softmax")


# -- tunehub's ops ---------------------------------------------------------------------------


class TunehubOps:
    """The same three ops through tunehub's PyTorch op library."""

    def __init__(self) -> None:
        from service.integrations import torch as tunehub_torch

        self.lib = tunehub_torch

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.lib.linear(x, weight)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self.lib.rms_norm(x, weight, eps)

    def softmax(self, x: torch.Tensor) -> torch.Tensor:
        return self.lib.softmax(x, -1)


# -- timing ----------------------------------------------------------------------------------


class Runtime:
    """Where the bench runs: CUDA (graphs, events) or, for a smoke run of the whole flow on a
    machine without a GPU (``--device cpu``, f32), plain calls and a wall clock."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.cuda = device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def elapsed_us(self, fn: Callable[[], Any], calls: int) -> float:
        """Microseconds per call of ``fn`` over ``calls`` back-to-back calls."""
        if not self.cuda:
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - started) * 1e6 / calls
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / calls

    def capture(self, fn: Callable[[], Any], warmup: int = 3) -> Callable[[], Any]:
        """Warm ``fn`` up (lazy loads, tuning, lookups happen here), then capture it in a CUDA
        graph on a side stream; returns what replays it (on the CPU: ``fn`` itself)."""
        if not self.cuda:
            for _ in range(warmup):
                fn()
            return fn
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return graph.replay


def replay_timer(
    runtime: Runtime, replay: Callable[[], Any], replays: int, windows: int = 3
) -> Callable[[], list[float]]:
    """One timing window: ``windows`` samples, each the mean of ``replays`` back-to-back
    replays, in microseconds."""
    return lambda: [runtime.elapsed_us(replay, replays) for _ in range(windows)]


# -- arms ------------------------------------------------------------------------------------


class Arm:
    """How one arm runs the model: its ops, and what it does around capture."""

    def __init__(self, name: str, model: Decoder, out: Path) -> None:
        self.name, self.model, self.out = name, model, out
        self.ops: Any = TunehubOps() if name == "tunehub" else TorchOps()
        self.compiled_decode: Any = None
        self.compiled_prefill: Any = None
        if name == "compile":
            # regional compilation: the layer body is compiled once and called for every layer
            # (same code, same shapes), as PyTorch recommends for cold-start time
            self.compiled_decode = torch.compile(model.decode_layer)
            self.compiled_prefill = torch.compile(model.prefill_layer)

    def __enter__(self) -> Arm:
        self.model.ops = self.ops
        if self.compiled_decode is not None:
            self.model.layer_fn = self.compiled_decode
            self.model.prefill_layer_fn = self.compiled_prefill
        if self.name == "tunableop":
            tunable = torch.cuda.tunable
            tunable.enable(True)
            tunable.tuning_enable(True)
            tunable.set_filename(str(self.out / "tunableop_results.csv"))
        return self

    def __exit__(self, *exc: object) -> None:
        self.model.layer_fn = self.model.decode_layer
        self.model.prefill_layer_fn = self.model.prefill_layer
        if self.name == "tunableop":
            torch.cuda.tunable.tuning_enable(False)
            torch.cuda.tunable.enable(False)


def breakdown(
    runtime: Runtime, model: Decoder, arm: Arm, step: Callable[[], Any], steps: int = 3
) -> dict[str, Any]:
    """Device microseconds per op class (per kernel name for the compiled arm) of one step."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if runtime.cuda else [])
    with arm:
        model.profile_scopes = arm.name != "compile"
        step()
        runtime.sync()
        with profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            runtime.sync()
        model.profile_scopes = False
    return _kernel_time(prof.events(), steps, by_scope=arm.name != "compile", cuda=runtime.cuda)


def _kernel_time(events: Any, steps: int, *, by_scope: bool, cuda: bool) -> dict[str, Any]:
    """Kernel microseconds per step: per op-class scope (the kernels its ops launched), or per
    kernel name (the compiled arm, whose fused kernels cross the scopes). The scopes' own GPU
    annotations are left out: they span the GPU timeline from a scope's first kernel to its
    last, launch gaps included (the 17:31 run's breakdown summed those)."""
    device = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    kernels = [e for e in events if e.device_type == device and e.name not in SCOPES]
    parts: dict[str, float] = {}
    if not cuda:  # the CPU smoke run: the scopes' CPU time
        for e in events:
            if e.name in SCOPES:
                parts[e.name] = parts.get(e.name, 0.0) + float(e.cpu_time_total) / steps
        return {"total_us": round(sum(parts.values()), 1), "parts_us": parts}
    total = sum(float(e.device_time) for e in kernels) / steps
    if by_scope:
        for e in events:  # a scope's CPU range: the device time of the kernels launched in it
            if e.device_type == torch.autograd.DeviceType.CPU and e.name in SCOPES:
                parts[e.name] = parts.get(e.name, 0.0) + float(e.device_time_total) / steps
        parts["other"] = max(0.0, total - sum(parts.values()))
    else:
        for e in kernels:
            parts[e.name[:60]] = parts.get(e.name[:60], 0.0) + float(e.device_time) / steps
        parts = dict(sorted(parts.items(), key=lambda kv: -kv[1])[:12])
    return {"total_us": round(total, 1), "parts_us": {k: round(v, 1) for k, v in parts.items()}}


def _safe_breakdown(
    runtime: Runtime, model: Decoder, arm: Arm, step: Callable[[], Any], steps: int = 3
) -> dict[str, Any]:
    """The breakdown, or the reason it failed (the timings of the row stand without it)."""
    try:
        return breakdown(runtime, model, arm, step, steps)
    except Exception as exc:
        log.exception("breakdown of arm %s failed", arm.name)
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def decode_rows(
    runtime: Runtime, model: Decoder, arms: list[Arm], args: argparse.Namespace
) -> Iterator[dict[str, Any]]:
    """Each batch size's row, as soon as it is measured."""
    for batch in _batches(args):
        cache = model.new_cache(batch, args.cache_len)
        tokens = torch.randint(0, model.dims.vocab, (batch, 1), device=runtime.device)
        position = torch.tensor([args.position], device=runtime.device)
        step = functools.partial(model.decode_step, tokens, position, cache)
        replays: dict[str, Callable[[], Any]] = {}
        row: dict[str, Any] = {"phase": "decode", "batch": batch, "arms": {}}
        reference: torch.Tensor | None = None
        for arm in arms:
            started = time.monotonic()
            try:
                with arm:
                    replays[arm.name] = runtime.capture(step)
                    probs = step().float()  # the same step, un-captured: its answer
            except Exception as exc:  # one arm's failure is reported; the others go on
                log.exception("decode batch %d: arm %s failed", batch, arm.name)
                row["arms"][arm.name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
                continue
            reference = probs if reference is None else reference
            row["arms"][arm.name] = {
                "setup_s": round(time.monotonic() - started, 1),
                # next-token probabilities against the first arm's (eager's), relative L2
                "rel_error": float((probs - reference).norm() / reference.norm()),
            }
        timers = {
            name: replay_timer(runtime, replay, args.replays) for name, replay in replays.items()
        }
        medians = interleaved_medians(timers, row, rounds=args.rounds)
        for name, us in medians.items():
            row["arms"][name].update({"step_us": round(us, 1), "tokens_per_s": batch * 1e6 / us})
        for arm in arms:
            if arm.name in medians and args.breakdown:
                row["arms"][arm.name]["breakdown"] = _safe_breakdown(runtime, model, arm, step)
        replays.clear()
        if runtime.cuda:
            torch.cuda.empty_cache()
        log.info("decode batch %d: %s", batch, _summary(row))
        yield row


def prefill_row(
    runtime: Runtime, model: Decoder, arms: list[Arm], args: argparse.Namespace
) -> dict[str, Any]:
    """One prompt's forward, as plain launches (no graph), timed in interleaved rounds."""
    tokens_n = args.prefill
    tokens = torch.randint(0, model.dims.vocab, (1, tokens_n), device=runtime.device)
    row: dict[str, Any] = {"phase": "prefill", "batch": 1, "tokens": tokens_n, "arms": {}}
    timers = {}
    for arm in arms:
        started = time.monotonic()
        try:
            with arm:
                for _ in range(2):
                    model.prefill(tokens)
                runtime.sync()
        except Exception as exc:
            log.exception("prefill: arm %s failed", arm.name)
            row["arms"][arm.name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            continue
        row["arms"][arm.name] = {"setup_s": round(time.monotonic() - started, 1)}

        def run(arm: Arm = arm) -> None:
            with arm:
                model.prefill(tokens)

        timers[arm.name] = replay_timer(runtime, run, 1)
    medians = interleaved_medians(timers, row, rounds=args.rounds)
    for name, us in medians.items():
        row["arms"][name].update({"step_us": round(us, 1), "tokens_per_s": tokens_n * 1e6 / us})
    if args.breakdown:
        for arm in arms:
            if arm.name in medians:
                row["arms"][arm.name]["breakdown"] = _safe_breakdown(
                    runtime, model, arm, functools.partial(model.prefill, tokens), steps=1
                )
    log.info("prefill %d: %s", tokens_n, _summary(row))
    return row


def _summary(row: dict[str, Any]) -> str:
    arms = row["arms"]
    base = arms.get("eager", {}).get("step_us")
    parts = []
    for name, figures in arms.items():
        if "step_us" not in figures:
            parts.append(f"{name} failed")
            continue
        ratio = f" {base / figures['step_us']:.3f}x" if base else ""
        parts.append(f"{name} {figures['step_us'] / 1000:.3f} ms{ratio}")
    return ", ".join(parts)


# -- commands --------------------------------------------------------------------------------


def _dims(args: argparse.Namespace) -> DecoderDims:
    dims = MODELS[args.model]
    return replace(dims, layers=args.layers) if args.layers else dims


def _batches(args: argparse.Namespace) -> list[int]:
    return [int(b) for b in args.batches.split(",") if b]


def _model(args: argparse.Namespace, runtime: Runtime, ops: Any) -> Decoder:
    # the CPU smoke run uses f32: the CPU backend's kernels are f32
    dtype = torch.float16 if runtime.cuda else torch.float32
    # rotary tables long enough for the cache and for the prompt
    positions = max(args.cache_len, args.prefill + 1)
    return Decoder(_dims(args), ops, dtype=dtype, device=runtime.device, max_positions=positions)


def cmd_run(args: argparse.Namespace) -> int:
    runtime = Runtime(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    started = time.monotonic()
    model = _model(args, runtime, TorchOps())
    arms = [Arm(name, model, out) for name in args.arms.split(",")]
    report: dict[str, Any] = {
        "model": model.dims.name,
        "layers": model.dims.layers,
        "dtype": str(model.dtype).removeprefix("torch."),
        "device": torch.cuda.get_device_name() if runtime.cuda else "cpu",
        "torch": torch.__version__,
        "cache_len": args.cache_len,
        "position": args.position,
        "weight_bytes": model.dims.weight_bytes(model.embed.element_size()),
        "rows": [],
    }
    path = out / f"model-{args.label}.json"

    def save() -> None:  # after every row: a later failure or timeout keeps what was measured
        if any(arm.name == "tunehub" for arm in arms):
            report["tunehub"] = arms_stats()
        report["seconds"] = round(time.monotonic() - started, 1)
        path.write_text(json.dumps(report, indent=1, default=str))

    with torch.no_grad():
        for row in decode_rows(runtime, model, arms, args):
            report["rows"].append(row)
            save()
        if args.prefill:
            report["rows"].append(prefill_row(runtime, model, arms, args))
            save()
    print(f"wrote {path}")
    return 0


def arms_stats() -> dict[str, Any]:
    from service.integrations import torch as tunehub_torch

    return tunehub_torch.stats().to_dict()


def cmd_record(args: argparse.Namespace) -> int:
    """Run tunehub's arm once at every batch size and at prefill with recording on: every
    shape the op library has no answer for lands in ``--shapes``."""
    from service.integrations import torch as tunehub_torch

    runtime = Runtime(args.device)
    model = _model(args, runtime, TunehubOps())
    with torch.no_grad(), tunehub_torch.record(args.shapes):
        for batch in _batches(args):
            cache = model.new_cache(batch, args.cache_len)
            tokens = torch.randint(0, model.dims.vocab, (batch, 1), device=runtime.device)
            model.decode_step(tokens, torch.tensor([args.position], device=runtime.device), cache)
            del cache
        if args.prefill:
            prompt = torch.randint(0, model.dims.vocab, (1, args.prefill), device=runtime.device)
            model.prefill(prompt)
    runtime.sync()
    with open(args.shapes) as recorded:
        print(f"recorded {sum(1 for _ in recorded)} shapes to {args.shapes}")
    return 0


def model_problems(dims: DecoderDims, batches: list[int], prefill: int) -> list[tuple[str, dict]]:
    """(op, problem) of every op a decode step at ``batches`` and one prefill run."""
    rows = sorted(set(batches) | ({prefill} if prefill else set()))
    problems: list[tuple[str, dict]] = []
    for name, (n, k) in dims.gemm_shapes().items():
        ms = sorted(set(batches) | {1}) if name == "lm_head" else rows
        problems += [("gemm", {"m": m, "n": n, "k": k}) for m in ms]
    problems += [("rms_norm", {"m": m, "k": dims.hidden}) for m in sorted(set(rows) | {1})]
    problems += [("softmax", {"m": m, "k": dims.vocab}) for m in sorted(set(batches) | {1})]
    return problems


def cmd_list(args: argparse.Namespace) -> int:
    """The bench/precompile_cuda.py commands that fill a compile cache for this run's shapes
    (the decoder's, and ResNet-50's convolutions at batch 1 and 8)."""
    from bench.model_resnet import resnet50_convs

    problems = model_problems(_dims(args), _batches(args), args.prefill)
    problems += [("conv2d", conv) for n in (1, 8) for conv in resnet50_convs(n)]
    by_op: dict[str, list[dict]] = {}
    for op, problem in problems:
        by_op.setdefault(op, []).append(problem)
    for op, listed in by_op.items():
        for start in range(0, len(listed), 8):
            flags = " ".join(
                "--problem " + ",".join(f"{k}={v}" for k, v in p.items())
                for p in listed[start : start + 8]
            )
            print(
                f"python bench/precompile_cuda.py --cache-dir .cache/tunehub --arch sm_90 "
                f"--op {op} --dtype f16 --max-variants {args.precompile_variants} {flags}"
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "record", "resnet", "resnet-record", "list"))
    parser.add_argument("--model", choices=sorted(MODELS), default="mistral-7b")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke run (f32)"
    )
    parser.add_argument("--layers", type=int, default=0, help="0: the model's own count")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prefill", type=int, default=2048, help="prompt tokens; 0 skips")
    parser.add_argument("--cache-len", type=int, default=1024)
    parser.add_argument("--position", type=int, default=512, help="decode at this position")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--breakdown", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--shapes", default="shapes.jsonl")
    parser.add_argument("--label", default="run")
    parser.add_argument("--precompile-variants", type=int, default=16)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per lookup otherwise
    if args.command == "record":
        return cmd_record(args)
    if args.command == "list":
        return cmd_list(args)
    if args.command.startswith("resnet"):
        from bench.model_resnet import cmd_resnet

        return cmd_resnet(args, record=args.command == "resnet-record")
    return cmd_run(args)


if __name__ == "__main__":
    raise SystemExit(main())
