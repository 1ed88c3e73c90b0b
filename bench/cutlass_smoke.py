"""Build, verify and time a set of CUTLASS variants (gemm and conv2d) on one GPU.

    # here (nvcc, no GPU): render and compile the set into a cache folder, with a manifest
    .venv/bin/python bench/cutlass_smoke.py build --cache .cache/cutlass --jobs 2
    # on the GPU host (python3 with torch): load every .so, verify against float32, time
    python3 bench/cutlass_smoke.py run --cache .cache/cutlass --out $OUT

``run`` compiles what the manifest lacks when nvcc and the CUTLASS headers are there.
Timing: CUDA graphs of back-to-back launches over rotated input sets (at least 2x the L2),
CUDA events, median/p20/p80 of the replays; outputs poisoned with NaN before verification;
cuBLAS / cuDNN through torch timed the same way beside them. This is a bench script, so it
prints its table; everything else goes to the JSON lines file under --out.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.compile import CompileCache, build_variants  # noqa: E402
from tuner.problems import Conv2dProblem, GemmProblem, Problem  # noqa: E402
from tuner.reference import tolerance  # noqa: E402
from tuner.render import render_variant  # noqa: E402
from tuner.spaces.cuda_conv2d import CudaConv2dSpace  # noqa: E402
from tuner.spaces.cuda_gemm import CudaGemmSpace  # noqa: E402

SM90_FLAGS = (
    "-std=c++17",
    "-O3",
    "-DNDEBUG",
    "-gencode=arch=compute_90a,code=sm_90a",
    "--expt-relaxed-constexpr",
)
L2_BYTES = 60 * 1024 * 1024

#: (op, dtype, layout, variant name) built and measured by this script
VARIANTS: tuple[tuple[str, str, str, str], ...] = (
    ("gemm", "f16", "rcr", "gemm_f16_rcr_128x256x64_c2x1_coop"),
    ("gemm", "f16", "rcr", "gemm_f16_rcr_64x128x64_c1x1_pingpong"),
    ("gemm", "f16", "rcr", "gemm_f16_rcr_128x128x64_c1x1_coop"),
    ("gemm", "f16", "rcr", "gemm_f16_rcr_256x128x64_c1x2_coop"),
    ("gemm", "f16", "rcr", "gemm_f16_rcr_128x256x64_c1x1_coop_streamk"),
    ("gemm", "f16", "rcr", "gemm_f16_rcr_64x256x64_c1x1_pingpong"),
    ("gemm", "f16", "rcr", "gemm_f16_rcr_128x128x64_c2x1_pingpong"),
    ("gemm", "f16", "rcr", "gemm_f16_rcr_128x128x64_c1x1_coop_streamk"),
    ("gemm", "f16", "rcr", "gemm_f16_rcr_128x256x64_c2x1_auto"),
    ("gemm", "f16", "rrr", "gemm_f16_rrr_128x256x64_c2x1_coop"),
    ("gemm", "bf16", "rcr", "gemm_bf16_rcr_128x256x64_c2x1_coop"),
    ("conv2d", "f16", "nhwc", "conv2d_f16_nhwc_128x128x64_w64x64_s3_opt_a8"),
    ("conv2d", "f16", "nhwc", "conv2d_f16_nhwc_128x128x32_w64x64_s4_opt_a8"),
)

PROBLEMS: dict[str, tuple[Problem, ...]] = {
    "gemm": (
        GemmProblem(8192, 8192, 8192),
        GemmProblem(4096, 11008, 4096),
        GemmProblem(128, 4096, 4096),
        GemmProblem(16, 4096, 4096),
    ),
    "conv2d": (  # ResNet-50 layers, batch 32
        Conv2dProblem(32, 56, 56, 64, 64, 3, 3, pad=1),
        Conv2dProblem(32, 56, 56, 256, 64, 1, 1),
        Conv2dProblem(32, 28, 28, 128, 128, 3, 3, pad=1),
        Conv2dProblem(32, 14, 14, 256, 256, 3, 3, pad=1),
    ),
}
SPACES = {"gemm": CudaGemmSpace(), "conv2d": CudaConv2dSpace()}


def _include_dirs() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("cutlass_library (pip nvidia-cutlass) is not importable")
    root = Path(next(iter(spec.submodule_search_locations))) / "source"
    return [str(root / "include"), str(root / "tools" / "util" / "include")]


def _nvcc_identity() -> str:
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=30)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("Cuda compilation tools")]
    return lines[0] if lines else out.stdout.strip()[-80:]


def _find_params(op: str, dtype: str, layout: str, name: str) -> dict[str, Any]:
    space = SPACES[op]
    for params in space.enumerate(dtype, layout, "sm_90"):
        if space.name(params, dtype, layout) == name:
            return params
    raise SystemExit(f"{name} is not in the {op} space")


def build(
    cache_dir: Path,
    jobs: int,
    only: list[str],
    compile_missing: bool = True,
    identity: str | None = None,
) -> dict[str, Any]:
    """Compile the set into the cache (or, without ``compile_missing``, only record in the
    manifest what the cache already holds). Names already built in the manifest are kept."""
    cache_dir = cache_dir.resolve()  # the compiler runs inside the staging folder
    manifest_path = cache_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    identity = identity or manifest.get("_identity") or _nvcc_identity()
    cache = CompileCache(cache_dir, artifact_name="kernel.so")
    variants = []
    for op, dtype, layout, name in VARIANTS:
        if (only and name not in only) or manifest.get(name, {}).get("ok"):
            continue
        params = _find_params(op, dtype, layout, name)
        variant = render_variant(SPACES[op], params, dtype, layout, "sm_90", SM90_FLAGS, identity)
        if compile_missing or cache.lookup(variant.id) is not None:
            variants.append((op, dtype, layout, variant))
    started = time.monotonic()
    if compile_missing:
        includes = _include_dirs()

        def argv(src: Path, out: Path, flags: Any) -> list[str]:
            return [
                "nvcc",
                *flags,
                *[f"-I{d}" for d in includes],
                "-shared",
                "-Xcompiler",
                "-fPIC",
                str(src),
                "-o",
                str(out),
            ]

        results = build_variants(
            cache,
            [v for *_, v in variants],
            argv,
            source_name="kernel.cu",
            workers=jobs,
            timeout_s=900,
        )
    else:
        results = build_variants(
            cache,
            [v for *_, v in variants],
            lambda *a: [],
            source_name="kernel.cu",
            workers=1,
            timeout_s=1,
        )
    manifest["_identity"] = identity
    for op, dtype, layout, variant in variants:
        res = results[variant.id]
        entry = cache.entry(variant.id)
        manifest[variant.name] = {
            "op": op,
            "dtype": dtype,
            "layout": layout,
            "id": variant.id,
            "ok": res.ok,
            "artifact": str((entry / "kernel.so").relative_to(cache_dir)) if res.ok else None,
            "compile_s": round(res.seconds, 1),
            "params": variant.params,
        }
        state = "ok" if res.ok else "FAILED"
        print(f"{variant.name}: {state} ({res.seconds:.0f} s{', cached' if res.cached else ''})")
        if not res.ok:
            print(res.log[-3000:])
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    print(f"built {len(variants)} in {time.monotonic() - started:.0f} s")
    return manifest


# ---------------------------------------------------------------- GPU side (torch) --------


def _gpu_state() -> dict[str, str]:
    fields = "clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        values = (s.strip() for s in out.stdout.split(","))
        return dict(zip(fields.split(","), values, strict=False))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}


class Loaded:
    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        self.lib.tunehub_can_run.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
        self.lib.tunehub_workspace_bytes.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
        self.lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
        self.lib.tunehub_run.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        self.lib.tunehub_describe.restype = ctypes.c_char_p


def _inputs(torch: Any, problem: Problem, dtype: str, layout: str, gen: Any) -> list[Any]:
    tdt = torch.float16 if dtype == "f16" else torch.bfloat16

    def uniform(*shape: int) -> Any:
        return (torch.rand(*shape, device="cuda", generator=gen) * 2 - 1).to(tdt)

    if isinstance(problem, GemmProblem):
        a = uniform(problem.m, problem.k)
        b = uniform(problem.n, problem.k) if layout[1] == "c" else uniform(problem.k, problem.n)
        return [a, b]
    assert isinstance(problem, Conv2dProblem)
    p = problem
    return [uniform(p.n, p.h, p.w, p.c), uniform(p.k, p.r, p.s, p.c)]


def _reference(torch: Any, problem: Problem, layout: str, inputs: list[Any]) -> Any:
    if isinstance(problem, GemmProblem):
        a, b = (t.float() for t in inputs)
        return a @ (b.t() if layout[1] == "c" else b)
    p = problem
    assert isinstance(p, Conv2dProblem)
    x = inputs[0].float().permute(0, 3, 1, 2)
    w = inputs[1].float().permute(0, 3, 1, 2)
    y = torch.nn.functional.conv2d(x, w, stride=p.stride, padding=p.pad, dilation=p.dilation)
    return y.permute(0, 2, 3, 1).contiguous()


def _out_shape(problem: Problem) -> tuple[int, ...]:
    if isinstance(problem, GemmProblem):
        return (problem.m, problem.n)
    assert isinstance(problem, Conv2dProblem)
    return (problem.n, problem.p, problem.q, problem.k)


def _verify(torch: Any, got: Any, expected: Any, dtype: str, k: int) -> tuple[bool, float, str]:
    rtol, atol = tolerance(dtype, k)
    g = got.float()
    if not bool(torch.isfinite(g).all()):
        return False, math.inf, "non-finite outputs (poison left or overflow)"
    err = (g - expected).abs()
    ok = bool((err <= atol + rtol * expected.abs()).all())
    rel = float(torch.linalg.vector_norm(g - expected) / torch.linalg.vector_norm(expected))
    return ok, float(err.max()), f"rel_l2={rel:.2e}"


def _time(torch: Any, launch: Any, n_sets: int, samples: int = 15) -> list[float]:
    """Per-launch microseconds from CUDA-graph replays of back-to-back launches."""
    for i in range(5):
        launch(i % n_sets)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(5):
        launch(i % n_sets)
    end.record()
    end.synchronize()
    est_us = start.elapsed_time(end) * 1e3 / 5
    reps = max(3, min(200, int(2000 / max(est_us, 1.0))))
    out: list[float] = []
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(reps):
                launch(i % n_sets)
        graph.replay()
        torch.cuda.synchronize()
        for _ in range(samples):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e3 / reps)
    except RuntimeError:  # capture refused: plain back-to-back launches
        torch.cuda.synchronize()
        for _ in range(samples):
            start.record()
            for i in range(reps):
                launch(i % n_sets)
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e3 / reps)
    return out


def _stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)

    def pct(q: float) -> float:
        return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]

    return {"median_us": pct(0.5), "p20_us": pct(0.2), "p80_us": pct(0.8), "min_us": s[0]}


def run(cache_dir: Path, out_dir: Path) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    manifest = json.loads((cache_dir / "manifest.json").read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "cutlass_smoke.jsonl"
    rows: list[dict[str, Any]] = []
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    state_before = _gpu_state()
    with log_path.open("w") as log:
        for op, problems in PROBLEMS.items():
            names = [n for n, e in manifest.items() if not n.startswith("_") and e["op"] == op]
            for problem in problems:
                for dtype, layout in sorted(
                    {(manifest[n]["dtype"], manifest[n]["layout"]) for n in names}
                ):
                    rows += _measure_group(
                        torch, manifest, cache_dir, op, dtype, layout, problem, gen, log
                    )
    state_after = _gpu_state()
    (out_dir / "gpu_state.json").write_text(
        json.dumps(
            {
                "before": state_before,
                "after": state_after,
                "device": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            },
            indent=1,
        )
    )
    print(f"{'problem':34} {'variant':48} {'outcome':8} {'us':>9} {'TFLOP/s':>8}")
    for r in rows:
        us = f"{r['median_us']:.1f}" if r.get("median_us") else "-"
        tf = f"{r['tflops']:.1f}" if r.get("tflops") else "-"
        print(f"{r['problem']:34} {r['variant'][:48]:48} {r['outcome']:8} {us:>9} {tf:>8}")
    print("gpu before:", state_before, "\ngpu after:", state_after)


def _measure_group(
    torch: Any,
    manifest: dict[str, Any],
    cache_dir: Path,
    op: str,
    dtype: str,
    layout: str,
    problem: Problem,
    gen: Any,
    log: Any,
) -> list[dict]:
    tdt = torch.float16 if dtype == "f16" else torch.bfloat16
    set_bytes = sum(2 * n for n in problem.operand_sizes().values())
    n_sets = max(1, min(8, math.ceil(2 * L2_BYTES / set_bytes)))
    sets = [_inputs(torch, problem, dtype, layout, gen) for _ in range(n_sets)]
    expected = _reference(torch, problem, layout, sets[0])
    outs = [torch.empty(_out_shape(problem), dtype=tdt, device="cuda") for _ in range(n_sets)]
    dims_list = [int(v) for v in problem.int_dims().values()]
    dims = (ctypes.c_int64 * len(dims_list))(*dims_list)
    rows: list[dict[str, Any]] = []
    key = f"{op} {dtype} {layout} " + "x".join(str(v) for v in dims_list[:7])

    def emit(row: dict[str, Any]) -> None:
        row.update({"problem": key, "dims": problem.int_dims(), "dtype": dtype, "layout": layout})
        if row.get("median_us"):
            row["tflops"] = problem.flops() / (row["median_us"] * 1e-6) / 1e12
        log.write(json.dumps(row) + "\n")
        log.flush()
        rows.append(row)

    for name, entry in manifest.items():
        if name.startswith("_"):
            continue
        if (entry["op"], entry["dtype"], entry["layout"]) != (op, dtype, layout):
            continue
        row: dict[str, Any] = {"variant": name}
        if not entry["ok"]:
            emit({**row, "outcome": "compile_error"})
            continue
        if SPACES[op].prune(entry["params"], problem, dtype, layout) is not None:
            emit({**row, "outcome": "pruned"})
            continue
        try:
            lib = Loaded(cache_dir / entry["artifact"]).lib
        except OSError as exc:
            emit({**row, "outcome": "load_error", "log": str(exc)[-500:]})
            continue
        code = lib.tunehub_can_run(dims, len(dims_list))
        if code != 0:
            emit({**row, "outcome": "refused", "code": code})
            continue
        ws_bytes = lib.tunehub_workspace_bytes(dims, len(dims_list))
        workspace = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
        arrays = [(ctypes.c_void_p * 2)(*(t.data_ptr() for t in s)) for s in sets]
        ptrs = [ctypes.cast(arr, ctypes.c_void_p) for arr in arrays]
        status = {"rc": 0}

        def launch(
            i: int,
            lib: Any = lib,
            ptrs: Any = ptrs,
            workspace: Any = workspace,
            ws_bytes: int = ws_bytes,
            status: dict = status,
        ) -> None:
            # the current stream, not a fixed one: graph capture runs on a side stream
            rc = lib.tunehub_run(
                ptrs[i],
                ctypes.c_void_p(outs[i].data_ptr()),
                dims,
                len(dims_list),
                ctypes.c_void_p(workspace.data_ptr()),
                ws_bytes,
                ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
            )
            status["rc"] = status["rc"] or rc

        outs[0].fill_(float("nan"))
        launch(0)
        torch.cuda.synchronize()
        if status["rc"]:
            emit({**row, "outcome": "runtime_error", "code": status["rc"]})
            continue
        ok, max_err, msg = _verify(torch, outs[0], expected, dtype, problem.reduction_length())
        row.update(
            {
                "max_abs_error": max_err,
                "verify": msg,
                "workspace_bytes": ws_bytes,
                "describe": lib.tunehub_describe().decode(),
            }
        )
        if not ok:
            emit({**row, "outcome": "wrong_result"})
            continue
        samples = _time(torch, launch, n_sets)
        emit(
            {
                **row,
                "outcome": "ok" if not status["rc"] else "runtime_error",
                **_stats(samples),
                "n_sets": n_sets,
            }
        )

    emit(_vendor_row(torch, op, layout, problem, sets, outs, n_sets))
    return rows


def _vendor_row(
    torch: Any, op: str, layout: str, problem: Problem, sets: list, outs: list, n_sets: int
) -> dict[str, Any]:
    if op == "gemm":

        def launch(i: int) -> None:
            a, b = sets[i]
            torch.matmul(a, b.t() if layout[1] == "c" else b, out=outs[i])

        name = "torch.matmul (cuBLAS)"
    else:
        p = problem
        assert isinstance(p, Conv2dProblem)
        xs = [s[0].permute(0, 3, 1, 2) for s in sets]  # NHWC memory seen as channels_last NCHW
        ws = [s[1].permute(0, 3, 1, 2) for s in sets]

        def launch(i: int) -> None:
            torch.nn.functional.conv2d(
                xs[i], ws[i], stride=p.stride, padding=p.pad, dilation=p.dilation
            )

        name = "F.conv2d channels_last (cuDNN)"
    return {"variant": name, "outcome": "ok", **_stats(_time(torch, launch, n_sets))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--cache", type=Path, default=Path(".cache/cutlass"))
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--only", nargs="*", default=[])
    b.add_argument("--no-compile", action="store_true", help="only record what is cached")
    r = sub.add_parser("run")
    r.add_argument("--cache", type=Path, default=Path(".cache/cutlass"))
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--build-missing", action="store_true")
    args = parser.parse_args()
    if args.cmd == "build":
        build(args.cache, args.jobs, args.only, compile_missing=not args.no_compile)
        return
    if args.build_missing and shutil.which("nvcc"):
        build(args.cache, 16, [])
    run(args.cache, args.out)


if __name__ == "__main__":
    main()
