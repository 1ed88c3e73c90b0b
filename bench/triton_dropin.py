"""Time to first result of the Triton autotune drop-in, on a GPU host (not a test).

    python3 bench/triton_dropin.py --out DIR                 # on the GPU host
    python3 bench/triton_dropin.py --out DIR --device cpu    # Triton's CPU interpreter

Starts ``tunehub serve`` (SQLite, no local worker) on this host, then runs fresh Python
processes that each launch a row-softmax Triton kernel (fp16, 4096 rows, n_cols 1024, 4096,
16384; 8 configs: num_warps x num_stages) once per shape:

1. ``first``: the drop-in with empty caches: a miss, so it benchmarks the configs with
   ``do_bench`` and uploads them;
2. ``second``: another client cache and another Triton cache dir (as another machine would
   have): the service answers, nothing is benchmarked;
3. ``offline``: the server stopped, the second process's client cache: stale answers;
4. ``triton``: plain ``triton.autotune`` in a fresh process, for reference.

Each shape's time to first result runs from the launch call to the synchronized output
(lookup, benchmarking, JIT compiles and the run); every output is checked against
torch.softmax. Writes DIR/triton_dropin.json and prints a table. With ``--device cpu`` the
same runs use Triton's interpreter (TRITON_INTERPRET=1, 64 rows, n_cols 256 and 1024, timed
with a wall clock): a check of the flow across processes, not a performance figure; the
plain ``triton.autotune`` reference needs CUDA events and is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROWS = 4096
SHAPES = (1024, 4096, 16384)
PORT = 8799


def child(mode: str, device: str) -> None:
    started = time.perf_counter()
    import torch
    import triton
    import triton.language as tl

    from service.integrations.triton import autotune

    imported = time.perf_counter() - started
    configs = [triton.Config({}, num_warps=w, num_stages=s) for w in (2, 4, 8, 16) for s in (1, 3)]
    decorate = (
        autotune(configs=configs, key=["n_cols"])
        if mode == "tunehub"
        else triton.autotune(configs=configs, key=["n_cols"])
    )

    @decorate
    @triton.jit
    def row_softmax(out_ptr, in_ptr, row_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e / tl.sum(e, axis=0)
        tl.store(out_ptr + row * row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

    shapes = []
    rows, sizes = (ROWS, SHAPES) if device == "cuda" else (64, (256, 1024))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    dtype = torch.float16 if device == "cuda" else torch.float32
    for n_cols in sizes:
        x = torch.randn(rows, n_cols, device=device, dtype=dtype)
        out = torch.empty_like(x)
        sync()
        start = time.perf_counter()
        row_softmax[(rows,)](out, x, x.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
        sync()
        seconds = time.perf_counter() - start
        expected = torch.softmax(x.float(), dim=-1).to(dtype)
        row: dict[str, Any] = {
            "n_cols": n_cols,
            "first_result_s": round(seconds, 4),
            "correct": bool(torch.allclose(out, expected, atol=2e-3, rtol=1e-2)),
        }
        if mode == "tunehub":
            event = row_softmax.events[-1]
            row.update(source=event.source, benchmarked=event.benchmarked, config=event.config,
                       uploaded=event.uploaded)  # fmt: skip
        else:
            row.update(source="triton.autotune", benchmarked=len(configs),
                       config=str(row_softmax.best_config))  # fmt: skip
        shapes.append(row)
    print(json.dumps({
        "mode": mode,
        "import_s": round(imported, 3),
        "process_s": round(time.perf_counter() - started, 3),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)",
        "triton": triton.__version__,
        "torch": torch.__version__,
        "shapes": shapes,
    }))  # fmt: skip


def run_child(name: str, mode: str, env: dict[str, str], log: Path, device: str) -> dict[str, Any]:
    if device == "cpu":
        env = {**env, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--device", device],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    log.write_text(proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"run": name, **json.loads(proc.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("/tmp/triton-dropin"))
    parser.add_argument("--child", choices=("tunehub", "triton"))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.device)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="th-dropin-"))
    base = {**os.environ, "TUNEHUB_DATA_DIR": str(work / "server"), "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--no-local-worker", "--migrate",
         "--port", str(PORT)],
        env=base, stdout=open(args.out / "serve.log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        import httpx

        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{PORT}/healthz").raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        token = subprocess.run(
            [sys.executable, "-m", "service.cli", "token", "create", "--name", "build",
             "--scope", "submit"],
            env=base, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

        def env(name: str) -> dict[str, str]:
            return {
                **base,
                "TUNEHUB_SERVER": f"http://127.0.0.1:{PORT}",
                "TUNEHUB_TOKEN": token,
                "TUNEHUB_CLIENT_CACHE": str(work / f"client-{name}"),
                "TRITON_CACHE_DIR": str(work / f"triton-{name}"),
            }

        dev = args.device
        runs = [run_child("first", "tunehub", env("first"), args.out / "first.log", dev)]
        runs.append(run_child("second", "tunehub", env("second"), args.out / "second.log", dev))
    finally:
        server.terminate()
        server.wait(timeout=30)
    offline = {**env("second"), "TRITON_CACHE_DIR": str(work / "triton-offline")}
    runs.append(run_child("offline", "tunehub", offline, args.out / "offline.log", dev))
    if dev == "cuda":
        runs.append(run_child("triton", "triton", env("triton"), args.out / "triton.log", dev))
    command = "python3 bench/triton_dropin.py" + (" --device cpu" if dev == "cpu" else "")
    meta = {"date": time.strftime("%Y-%m-%d"), "command": command}
    (args.out / "triton_dropin.json").write_text(json.dumps({**meta, "runs": runs}, indent=1))
    print(f"{'run':8} {'n_cols':>6} {'source':16} {'bench':>5} {'first s':>8} ok  config")
    for run in runs:
        for row in run["shapes"]:
            print(
                f"{run['run']:8} {row['n_cols']:6d} {row['source']:16} {row['benchmarked']:5d} "
                f"{row['first_result_s']:8.3f} {'y' if row['correct'] else 'N'}   {row['config']}"
            )
        print(f"{run['run']:8} process {run['process_s']:.2f} s (imports {run['import_s']:.2f} s)")


if __name__ == "__main__":
    main()
