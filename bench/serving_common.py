"""The two phases every serving benchmark runs in one device call (bench/serving_epilogue.py,
bench/serving_moe.py): tune each problem with the engine, then time each winner's artifact
beside what a user would call, interleaved in rounds, in this process.

A script supplies its problems (a row of labels and a ``TuneRequest`` each), the timers of the
user's calls for a row, and its totals; this module keeps the loop, the deadline, the rows and
the JSON it writes (after tuning, then again with the comparison)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from bench.vendor_common import Timer, artifact_timer, interleaved_medians, summary
from tuner.engine import tune
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces._cublaslt_extras import SOURCE_HEURISTIC
from tuner.types import EngineConfig, TuneRequest

__all__ = ["engine_config", "compare_rows", "run", "tune_rows"]

Row = dict[str, Any]


def engine_config(cache_dir: str) -> EngineConfig:
    """The engine's settings of a serving run: short timing windows, generous build limits."""
    return EngineConfig(
        cache_dir=cache_dir,
        bench_seconds=0.05,
        warmup_seconds=0.03,
        min_reps=10,
        compile_timeout_s=240,
        run_timeout_s=60,
    )


def _lt_key(params: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(params.get(key) for key in lt.ATTRIBUTES)


def discovery_sources(answer: list[dict[str, Any]]) -> dict[tuple[Any, ...], str]:
    """The cuBLASLt discovery's answer as {attributes: source} (``heuristic`` or
    ``enumerated``), the first source of each algorithm."""
    sources: dict[tuple[Any, ...], str] = {}
    for item in answer:
        sources.setdefault(_lt_key(item), item.get("source", SOURCE_HEURISTIC))
    return sources


def candidate_rows(results: Iterable[Any], answer: list[dict[str, Any]]) -> list[Row]:
    """Each candidate's summary; a cuBLASLt one also names where discovery found it."""
    sources = discovery_sources(answer)
    rows = []
    for result in results:
        row = summary(result)
        source = (
            sources.get(_lt_key(result.params)) if result.params.get("algo") is not None else None
        )
        if source:
            row["source"] = source
        rows.append(row)
    return rows


def tune_rows(
    problems: Iterable[tuple[Row, TuneRequest]], config: EngineConfig, deadline: float
) -> list[Row]:
    """Tunes each request on the CUDA backend; a row each, with the winner, its artifact and
    every candidate, or ``tune_error`` (past the deadline, or the engine's error: recorded,
    the run goes on)."""
    from tuner.backends.cuda import CudaBackend

    backend = CudaBackend(config)
    rows: list[Row] = []
    try:
        print(f"device {backend.device().key()}", flush=True)
        for row, request in problems:
            rows.append(row)
            label = {k: v for k, v in row.items() if k not in ("problem", "counts")}
            if time.monotonic() > deadline:
                row["tune_error"] = "deadline"
                continue
            started = time.monotonic()
            try:
                result = tune(request, backend, config)
            except Exception as exc:  # e.g. no family fuses it here
                row["tune_error"] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"[tune] {label}: {row['tune_error']}", flush=True)
                continue
            win = result.winner
            hit = backend.cache.lookup(win.variant_id) if win else None
            row.update(
                op=request.op,
                seconds=round(time.monotonic() - started, 1),
                winner=win.variant_name if win else None,
                winner_library=win.params.get("library") if win else None,
                winner_us=win.timing.median_us if win and win.timing else None,
                artifact=str(hit.artifact) if hit and hit.artifact else None,
                candidates=candidate_rows(result.results, backend.last_discovery),
            )
            if backend.last_discovery:
                found = list(discovery_sources(backend.last_discovery).values())
                row["discovery"] = {s: found.count(s) for s in sorted(set(found))}
            print(f"[tune] {label}: {row['winner']} {row['winner_us']} us", flush=True)
    finally:
        backend.close()
    return rows


def compare_rows(
    rows: list[Row],
    deadline: float,
    *,
    dtype: str,
    timing: dict[str, Any],
    rounds: int,
    user_timers: Callable[[Any, Any, dict[str, Any], Row], dict[str, Timer]],
) -> None:
    """Times each tuned row's artifact (``tunehub``) beside ``user_timers(torch, harness, req,
    row)`` in ``rounds`` interleaved rounds; writes ``times_us`` and ``speedup`` (theirs over
    tunehub's) into the row, or ``compare_error`` past the deadline."""
    import torch

    from tuner.backends.cuda_harness import Harness, probe

    harness = Harness(probe())
    for row in rows:
        if not row.get("artifact"):
            continue
        if time.monotonic() > deadline:
            row["compare_error"] = "deadline"
            continue
        req = {
            "cmd": "run",
            "op": row["op"],
            "dtype": dtype,
            "layout": row["layout"],
            "problem": row["problem"],
            "seed": 0,
            **timing,
            "abort_us": None,
        }
        timers = {"tunehub": artifact_timer(harness, req, row["artifact"])}
        timers.update(user_timers(torch, harness, req, row))
        times = interleaved_medians(timers, row, rounds)
        torch.cuda.synchronize()
        row["times_us"] = times
        if "tunehub" in times:
            row["speedup"] = {k: v / times["tunehub"] for k, v in times.items() if k != "tunehub"}
        print(f"[compare] {row.get('model', '')} {row['layer']}: {times}", flush=True)


def run(
    args: argparse.Namespace,
    tune_phase: Callable[[argparse.Namespace, EngineConfig, float], list[Row]],
    compare_phase: Callable[[list[Row], float], None],
    totals: Callable[[list[Row]], dict[str, Any]],
    rounds: int,
) -> int:
    """The run: tune until ``--compare-reserve-s`` before ``--deadline-s``, write the rows,
    compare, write them again with the device, date, torch and the totals."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.deadline_s
    rows = tune_phase(args, engine_config(args.cache_dir), deadline - args.compare_reserve_s)
    meta: dict[str, Any] = {
        "tune_wall_seconds": round(time.monotonic() - started, 1),
        "compare_rounds": rounds,
        "command": "python3 " + " ".join(sys.argv),
    }
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    compare_phase(rows, deadline)
    import torch

    meta.update(
        device=torch.cuda.get_device_name(0),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        torch=torch.__version__,
    )
    payload = {"meta": meta, "totals": totals(rows), "rows": rows}
    args.out.write_text(json.dumps(payload, indent=1, default=str))
    print(json.dumps(payload["totals"]), flush=True)
    return 0
