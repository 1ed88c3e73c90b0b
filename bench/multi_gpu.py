"""One `tunehub worker` driving several GPUs (or CPU slots): tasks per second, busy overlap,
and the same variant timed on each GPU.

    python bench/multi_gpu.py precompile --cache-dir .cache/tunehub     # here, no GPU needed
    python bench/multi_gpu.py run --backend cuda --devices 0,1 --out OUT  # on the GPU host
    python bench/multi_gpu.py run --backend cpu --slots 2 --out OUT       # CPU slots

``run`` starts `tunehub serve --no-local-worker` (SQLite in a fresh data dir) and one
`tunehub worker` with the chosen devices, submits one GEMM and one softmax job with many
problems, and waits for both (``--timeout``). From the stored leases (lease start, task end)
and the measurements' ``slot`` provenance it derives tasks/s and how long two or more slots
were busy at once; a sampler beside it reads each GPU's utilization from nvidia-smi. Then,
with the worker stopped, the winners of a few problems are timed again on every chosen GPU
(the CUDA backend with one harness per GPU, each on ``CUDA_VISIBLE_DEVICES=<index>``) and the
spread across GPUs is compared with the engine's tie band. Writes ``<out>/<label>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.client import TunehubClient  # noqa: E402
from service.schemas.configs import TokenCreate  # noqa: E402
from service.schemas.jobs import JobCreate, JobOut  # noqa: E402
from tuner.backends.cuda_devices import PCI_ORDER_ENV  # noqa: E402
from tuner.engine import candidate_params  # noqa: E402
from tuner.problems import problem_from_dict  # noqa: E402
from tuner.registry import load_backend_class, load_space  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402

#: the jobs: (op, dtype, layout, problems, max_variants) per backend; GEMM shapes share the
#: same two leading CUTLASS variants, so the precompiled cache holds every build
JOBS: dict[str, list[tuple[str, str, str, list[dict[str, Any]], int]]] = {
    "cuda": [
        (
            "gemm",
            "f16",
            "rcr",
            [{"m": m, "n": n, "k": 4096} for m in (2048, 4096, 8192) for n in (2048, 4096, 8192)],
            2,
        ),
        (
            "softmax",
            "f16",
            "row",
            [{"m": m, "k": k} for m in (8192, 32768) for k in (1024, 2048, 4096, 8192)],
            6,
        ),
    ],
    "cpu": [
        (
            "gemm",
            "f32",
            "rcr",
            [{"m": m, "n": n, "k": 256} for m in (64, 128, 256) for n in (128, 256)],
            3,
        ),
        (
            "softmax",
            "f32",
            "row",
            [{"m": m, "k": k} for m in (256, 1024) for k in (512, 1024, 2048)],
            4,
        ),
    ],
}
#: winners re-timed on every GPU after the job (per op)
AGREEMENT_PROBLEMS_PER_OP = 2
START_TIMEOUT_S = 60.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- precompile (here) -----------------------------------------------------------------------


def precompile(cache_dir: str, arch: str, workers: int) -> int:
    """Build every variant the CUDA jobs will ask for into ``cache_dir`` (same ids as there)."""
    backend = load_backend_class("cuda")(
        EngineConfig(cache_dir=cache_dir, compile_workers=workers, compile_timeout_s=900)
    )
    variants = {}
    for op, dtype, layout, problems, cap in JOBS["cuda"]:
        space = load_space(op, "cuda")
        for dims in problems:
            request = TuneRequest(
                op=op,
                dtype=dtype,
                layout=layout,
                backend="cuda",
                problem=problem_from_dict(op, dims),
                budget=Budget(max_variants=cap),
            )
            candidates, _ = candidate_params(request, arch, "cuda")
            for params in candidates[:cap]:
                variant = backend.render(space, params, dtype, layout, arch)
                variants[variant.id] = variant
    started = time.monotonic()
    results = backend.build(list(variants.values()))
    failed = [v.name for v in variants.values() if not results[v.id].ok]
    cached = sum(1 for r in results.values() if r.cached)
    log(
        f"{len(variants)} variants ({cached} cached before), {len(failed)} failed, "
        f"{time.monotonic() - started:.0f} s {failed}"
    )
    return 1 if failed else 0


# -- GPU busy sampling -----------------------------------------------------------------------


class GpuSampler:
    """nvidia-smi utilization of every GPU, about five times a second, in a thread."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        argv = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            try:
                text = subprocess.run(
                    argv, capture_output=True, text=True, timeout=10, check=False
                ).stdout
            except (OSError, subprocess.TimeoutExpired):
                return
            reading = {}
            for line in text.splitlines():
                index, _, util = (p.strip() for p in line.partition(","))
                if index.isdigit() and util.isdigit():
                    reading[int(index)] = int(util)
            self.samples.append((time.time(), reading))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def summary(self, devices: list[int], start: float, end: float) -> dict[str, Any]:
        window = [r for t, r in self.samples if start <= t <= end]
        busy = {d: sum(1 for r in window if r.get(d, 0) > 0) for d in devices}
        any_busy = sum(1 for r in window if any(r.get(d, 0) > 0 for d in devices))
        all_busy = sum(1 for r in window if all(r.get(d, 0) > 0 for d in devices))
        return {
            "samples": len(window),
            "busy_fraction": {
                str(d): round(busy[d] / len(window), 3) if window else None for d in devices
            },
            "all_busy_over_any_busy": round(all_busy / any_busy, 3) if any_busy else None,
        }


# -- one run ---------------------------------------------------------------------------------


def _wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    with TunehubClient(url) as probe:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"tunehub serve exited with {proc.returncode}")
            with contextlib.suppress(Exception):
                probe.healthz()
                return
            time.sleep(0.3)
    raise SystemExit("tunehub serve did not answer /healthz in time")


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """SIGINT stops uvicorn cleanly; the worker stops on SIGTERM."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def _intervals(database_url: str, job_ids: list[str]) -> list[dict[str, Any]]:
    """Per task: its lease's start, the task's last update (its end) and the slot that ran it."""
    from sqlalchemy import select

    from service.store.db import make_engine, make_sessionmaker
    from service.store.models import Lease, Measurement, Task

    engine = make_engine(database_url)
    rows = []
    try:
        with make_sessionmaker(engine)() as session:
            for task in session.scalars(select(Task).where(Task.job_id.in_(job_ids))):
                lease = session.get(Lease, task.lease_id) if task.lease_id else None
                slot = session.scalar(
                    select(Measurement.provenance).where(Measurement.task_id == task.id).limit(1)
                )
                rows.append(
                    {
                        "task_id": task.id,
                        "status": task.status,
                        "slot": (slot or {}).get("slot", "?"),
                        "start": lease.created_at.timestamp() if lease else None,
                        "end": task.updated_at.timestamp(),
                    }
                )
    finally:
        engine.dispose()
    return rows


def overlap(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Seconds with >= 1 and >= 2 slots busy (from lease start to task end)."""
    events = []
    for row in rows:
        if row["start"] is not None:
            events += [(row["start"], 1), (row["end"], -1)]
    events.sort()
    busy_any = busy_two = 0.0
    level, last = 0, None
    for moment, step in events:
        if last is not None:
            busy_any += (moment - last) if level >= 1 else 0.0
            busy_two += (moment - last) if level >= 2 else 0.0
        level += step
        last = moment
    per_slot: dict[str, int] = defaultdict(int)
    for row in rows:
        per_slot[row["slot"]] += 1
    return {
        "busy_any_s": round(busy_any, 2),
        "busy_two_or_more_s": round(busy_two, 2),
        "two_or_more_over_any": round(busy_two / busy_any, 3) if busy_any else None,
        "tasks_per_slot": dict(sorted(per_slot.items())),
    }


def submit_jobs(client: TunehubClient, backend: str) -> list[JobOut]:
    jobs = []
    for op, dtype, layout, problems, cap in JOBS[backend]:
        body = {
            "op": op,
            "dtype": dtype,
            "layout": layout,
            "problems": problems,
            "device": {"backend": backend},
            "budget": {"max_variants": cap},
        }
        jobs.append(client.submit_job(JobCreate.model_validate(body)))
    return jobs


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data_dir or f"/tmp/tunehub-multi-{args.label}-{os.getpid()}")
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    root = str(Path(__file__).resolve().parents[1])
    env = {
        **os.environ,
        **PCI_ORDER_ENV,
        "TUNEHUB_DATA_DIR": str(data),
        "TUNEHUB_DATABASE_URL": f"sqlite:///{data / 'tunehub.db'}",
        "TUNEHUB_CACHE_DIR": str(Path(args.cache_dir).resolve()),
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
        "PYTHONUNBUFFERED": "1",
    }
    cli = [sys.executable, "-m", "service.cli"]
    # the serve log stays in the data dir: the device tool brings back at most 8 files
    serve_log = open(data / "serve.log", "wb")  # noqa: SIM115
    worker_log = open(out / f"{args.label}-worker.log", "wb")  # noqa: SIM115
    serve = subprocess.Popen(
        [*cli, "serve", "--no-local-worker", "--migrate", "--port", str(port)],
        env=env,
        stdout=serve_log,
        stderr=subprocess.STDOUT,
    )
    worker: subprocess.Popen[bytes] | None = None
    result: dict[str, Any] = {"label": args.label, "backend": args.backend}
    deadline = time.monotonic() + args.timeout
    try:
        _wait_healthy(url, serve)
        admin = (data / "admin-token").read_text().strip()
        with TunehubClient(url, admin) as user:
            token = user.create_token(TokenCreate(name="bench-worker", scopes=["worker"])).token
            jobs = submit_jobs(user, args.backend)
            tasks_total = sum(len(j.problems) for j in jobs)
            log(f"submitted {len(jobs)} jobs, {tasks_total} tasks; starting the worker")
            worker_argv = [*cli, "worker", "--server", url, "--token", token]
            worker_argv += ["--backend", args.backend]
            if args.devices:
                worker_argv += ["--devices", args.devices]
            if args.slots != 1:
                worker_argv += ["--slots", str(args.slots)]
            devices = [int(d) for d in args.devices.split(",")] if args.devices else []
            with GpuSampler() if args.backend == "cuda" else contextlib.nullcontext() as sampler:
                started = time.time()
                worker = subprocess.Popen(
                    worker_argv, env=env, stdout=worker_log, stderr=subprocess.STDOUT
                )
                finished = False
                while time.monotonic() < deadline:
                    states = [user.get_job(j.id) for j in jobs]
                    if all(s.status in ("done", "failed", "cancelled") for s in states):
                        finished = True
                        break
                    if worker.poll() is not None:
                        log(f"the worker exited with {worker.returncode}")
                        break
                    time.sleep(0.5)
                ended = time.time()
                _stop(worker)
                states = [user.get_job(j.id) for j in jobs]
                if sampler is not None:
                    result["nvidia_smi"] = sampler.summary(devices, started, ended)
            rows = _intervals(env["TUNEHUB_DATABASE_URL"], [j.id for j in jobs])
            done = [r for r in rows if r["status"] == "done"]
            leased = [r for r in rows if r["start"] is not None]
            first = min((r["start"] for r in leased), default=started)
            last = max((r["end"] for r in done), default=ended)
            result.update(
                finished=finished,
                devices=args.devices,
                slots=args.slots,
                tasks_total=tasks_total,
                tasks_done=len(done),
                tasks_failed=sum(1 for r in rows if r["status"] == "failed"),
                wall_s_worker_start_to_last_task=round(last - started, 2),
                wall_s_first_lease_to_last_task=round(last - first, 2),
                tasks_per_s=round(len(done) / (last - first), 3) if last > first else None,
                tasks_per_s_from_worker_start=round(len(done) / (last - started), 3),
                leases=overlap(rows),
                jobs=[
                    {
                        "op": s.op,
                        "status": s.status,
                        "problems": [
                            {
                                "problem": p.problem,
                                "status": p.status,
                                "winner": p.winner.variant_name if p.winner else None,
                                "median_us": p.winner.median_us if p.winner else None,
                                "error": p.error,
                            }
                            for p in s.problems
                        ],
                    }
                    for s in states
                ],
            )
            log(
                f"{len(done)}/{tasks_total} tasks done in {last - first:.1f} s from the first "
                f"lease: {result['tasks_per_s']} tasks/s; leases {result['leases']}"
            )
            if args.backend == "cuda" and args.agreement and time.monotonic() < deadline:
                result["agreement"] = agreement(user, states, devices, args, deadline)
    finally:
        if worker is not None:
            _stop(worker)
        _stop(serve, signal.SIGINT)
        serve_log.close()
        worker_log.close()
        (out / f"{args.label}.json").write_text(json.dumps(result, indent=2, default=str))
        log(f"wrote {out / (args.label + '.json')}")
    return 0 if result.get("finished") else 1


# -- the same variant on each GPU ------------------------------------------------------------


def agreement(
    user: TunehubClient,
    states: list[JobOut],
    devices: list[int],
    args: argparse.Namespace,
    deadline: float,
) -> dict[str, Any]:
    """Winners of a few problems, timed again on every GPU (twice each), against the tie band."""
    config = EngineConfig(cache_dir=str(Path(args.cache_dir).resolve()))
    backends = {d: load_backend_class("cuda")(replace(config, device_index=d)) for d in devices}
    rows = []
    try:
        for state in states:
            space = load_space(state.op, "cuda")
            picked = [p for p in state.problems if p.winner][:AGREEMENT_PROBLEMS_PER_OP]
            for problem in picked:
                assert problem.winner is not None
                request = TuneRequest(
                    op=state.op,
                    dtype=state.dtype,
                    layout=state.layout,
                    backend="cuda",
                    problem=problem_from_dict(state.op, problem.problem),
                )
                row: dict[str, Any] = {
                    "op": state.op,
                    "problem": problem.problem,
                    "variant": problem.winner.variant_name,
                    "stored_median_us": problem.winner.median_us,
                    "median_us": {},
                }
                for index, backend in backends.items():
                    if time.monotonic() > deadline:
                        break
                    arch = backend.device().arch
                    variant = backend.render(
                        space, problem.winner.params, state.dtype, state.layout, arch
                    )
                    built = backend.build([variant])[variant.id]
                    times = []
                    for _ in range(2):
                        measured = backend.run(variant, str(built.artifact), request)
                        times.append(measured.timing.median_us if measured.timing else None)
                    row["median_us"][str(index)] = times
                all_times = [t for ts in row["median_us"].values() for t in ts if t]
                if all_times:
                    row["spread"] = round(max(all_times) / min(all_times) - 1.0, 4)
                    row["within_tie_band"] = row["spread"] <= config.tie_band
                rows.append(row)
                log(f"agreement {state.op} {problem.problem}: {row['median_us']}")
    finally:
        for backend in backends.values():
            backend.close()
    return {"tie_band": config.tie_band, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("precompile", help="build the CUDA jobs' variants into a cache")
    pre.add_argument("--cache-dir", default=".cache/tunehub")
    pre.add_argument("--arch", default="sm_90")
    pre.add_argument("--workers", type=int, default=0)
    go = sub.add_parser("run", help="serve + one worker + the jobs; write <out>/<label>.json")
    go.add_argument("--backend", choices=sorted(JOBS), default="cuda")
    go.add_argument("--devices", default="", help="GPU indices for the worker, like 0,1")
    go.add_argument("--slots", type=int, default=1, help="CPU slots (backend cpu)")
    go.add_argument("--cache-dir", default=".cache/tunehub")
    go.add_argument("--data-dir", default="")
    go.add_argument("--out", default="bench/results/multi_gpu")
    go.add_argument("--label", default="run")
    go.add_argument("--timeout", type=float, default=180.0, help="seconds for the whole run")
    go.add_argument("--no-agreement", dest="agreement", action="store_false")
    args = parser.parse_args()
    if args.command == "precompile":
        return precompile(args.cache_dir, args.arch, args.workers)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
