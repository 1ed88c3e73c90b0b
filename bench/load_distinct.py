"""Lookups on many distinct shapes, with a writer, against 1 and 2 API processes (issue 24).

For each database (SQLite, and a fresh PostgreSQL database): import 20,000 configs through
``POST /v1/import`` (timed: configs/s), start ``tunehub serve --workers 1`` and
``--workers 2`` side by side on the same database, then alternate wrk runs between them
(1, 2, 1, 2, ...; the machine is shared, so the two are measured in the same minutes). Each
run: 16 connections, URLs for distinct shapes in random order (half stored shapes, half
shapes never stored: nearest answers), more URLs than a run sends, while a writer imports one
new config every 200 ms through the server under test. Per run: lookups/s, p50/p99 (wrk),
and the server's CPU per lookup (utime + stime of every server process, /proc/<pid>/stat,
over the run, divided by the lookups; it includes the writer's imports and the read model's
refreshes).

    .venv/bin/python bench/load_distinct.py [--seconds 8] [--repeats 3] [--databases ...]

Writes docs/benchmarks/load-distinct.json and the section between the markers in
docs/benchmarks/load.md. Needs wrk (``apt-get install wrk``) and, for PostgreSQL, the server
at TUNEHUB_BENCH_PG_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/postgres).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load import (  # noqa: E402
    _WRK_SCRIPT,
    REPO,
    _cpu_seconds,
    _database,
    _free_port,
    _machine,
    _milliseconds,
    _wrk_version,
)
from service.cli.serve import create_token_in_db  # noqa: E402
from service.store.db import upgrade  # noqa: E402
from service.store.validation import parse_problem  # noqa: E402
from tuner.acceptance import variant_rejection  # noqa: E402

OUT_JSON = REPO / "docs" / "benchmarks" / "load-distinct.json"
OUT_MD = REPO / "docs" / "benchmarks" / "load.md"
START, END = "<!-- load_distinct:start -->", "<!-- load_distinct:end -->"
COMMAND = ".venv/bin/python bench/load_distinct.py"
CONFIGS = 20_000
CLIENTS = 16
WRITE_EVERY_S = 0.2
URLS = 200_000
#: a wrk run per server before the measured ones (the processes load the imported answers)
WARMUP_S = 4.0
DEVICE = {
    "backend": "cpu",
    "name": "Bench CPU 9000",
    "arch": "x86_64-avx2",
    "sm_count": 8,
    "driver": "",
    "runtime": "",
    "memory_bytes": 1 << 34,
}
TOOLCHAIN = {"compiler": "g++ 12.2.0", "template_version": "bench", "libraries": {}}
VARIANTS = [
    ("reduce_f32_p4_a2_u2", {"pack": 4, "acc": 2, "unroll": 2}),
    ("reduce_f32_p1_a1_u1", {"pack": 1, "acc": 1, "unroll": 1}),
]
TARGETS = {"cpu_ms": 0.25, "scaling": 1.7, "p99_ms": 25.0, "import_rate": 5000.0}


def _shape(rng: random.Random) -> tuple[int, int]:
    return int(2 ** rng.uniform(0, 14)), 16 * int(2 ** rng.uniform(0, 10))


def _record(m: int, k: int, rng: random.Random) -> dict[str, Any]:
    problem = {"m": m, "k": k, "kind": "sum"}
    parsed = parse_problem("reduce", problem, ["problem"])
    arch = DEVICE["arch"]
    for name, params in VARIANTS:
        if variant_rejection("reduce", "cpu", "f32", "row", arch, parsed, params, name) is None:
            break
    else:
        raise RuntimeError(f"no bench variant fits {problem}")
    median = 5.0 + m * k * 4 / 1e3 * (1 + rng.random())  # 1 GB/s or slower: always possible
    return {
        "op": "reduce",
        "dtype": "f32",
        "layout": "row",
        "problem": problem,
        "device": DEVICE,
        "toolchain": TOOLCHAIN,
        "variant": {
            "id": hashlib.sha256(name.encode()).hexdigest(),
            "name": name,
            "params": params,
        },
        "measurement": {
            "outcome": "ok",
            "median_us": median,
            "p20_us": median * 0.99,
            "p80_us": median * 1.01,
            "min_us": median * 0.98,
            "created_at": "2026-12-01T10:00:00+00:00",
        },
    }


def _url(m: int, k: int) -> str:
    return f"/v1/configs/best?op=reduce&dtype=f32&layout=row&m={m}&k={k}&kind=sum"


def _process_tree(pid: int) -> list[int]:
    found = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        found += _process_tree(int(child))
    return found


def _tree_cpu(pid: int) -> float:
    total = 0.0
    for p in _process_tree(pid):
        try:
            total += _cpu_seconds(p)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


@contextmanager
def _serve(url: str, workers: int, workdir: Path, staleness_ms: int) -> Iterator[tuple[str, int]]:
    """``tunehub serve --workers N`` over ``url``; yields its base URL and the parent pid."""
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TUNEHUB_DATABASE_URL": url,
        "TUNEHUB_DATA_DIR": str(workdir / f"data{workers}"),
        "TUNEHUB_CACHE_DIR": str(workdir / "cache"),
        "TUNEHUB_LOOKUP_STALENESS_MS": str(staleness_ms),
    }
    command = [sys.executable, "-m", "service.cli", "serve", "--no-local-worker"]
    command += ["--port", str(port), "--workers", str(workers)]
    log = (workdir / f"serve{workers}.log").open("w")
    process = subprocess.Popen(command, env=env, cwd=REPO, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tunehub serve did not start on {base}")
            time.sleep(0.5)
        yield base, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


class _Writer(threading.Thread):
    """Imports one new config every WRITE_EVERY_S through the server under test."""

    def __init__(self, base: str, token: str, rng: random.Random, taken: set[tuple[int, int]]):
        super().__init__(daemon=True)
        self.base, self.token, self.rng, self.taken = base, token, rng, taken
        self.stop = threading.Event()
        self.written = 0
        self.failed = 0

    def run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30) as client:
            while not self.stop.wait(WRITE_EVERY_S):
                m, k = _shape(self.rng)
                while (m, k) in self.taken:
                    m, k = _shape(self.rng)
                self.taken.add((m, k))
                try:
                    response = client.post(
                        "/v1/import",
                        content=json.dumps(_record(m, k, self.rng)) + "\n",
                        headers={
                            "Authorization": f"Bearer {self.token}",
                            "Content-Type": "application/x-ndjson",
                        },
                    )
                except httpx.HTTPError:
                    self.failed += 1
                    continue
                self.written += response.status_code == 200
                self.failed += response.status_code != 200


def _wrk(base: str, pid: int, paths_file: Path, script: Path, seconds: float) -> dict[str, Any]:
    env = {**os.environ, "WRK_PATHS": str(paths_file)}
    command = ["wrk", "-t1", f"-c{CLIENTS}", f"-d{round(seconds)}s", "--latency", "-s"]
    command += [str(script), base]
    cpu_before, started = _tree_cpu(pid), time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds + 60)
    wall, cpu = time.monotonic() - started, _tree_cpu(pid) - cpu_before
    out = done.stdout
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed: {done.stderr}")
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "requests": requests,
        "rate": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50_ms": _milliseconds(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),  # type: ignore[union-attr]
        "p99_ms": _milliseconds(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),  # type: ignore[union-attr]
        "non_2xx": int(errors.group(1)) if errors else 0,
        "server_cpu_ms_per_lookup": 1000 * cpu / max(requests, 1),
        "server_cpu_share": cpu / wall,
    }


def measure(
    kind: str, seconds: float, repeats: int, workdir: Path, staleness_ms: int = 0
) -> dict[str, Any]:
    rng = random.Random(24)
    stored: set[tuple[int, int]] = set()
    while len(stored) < CONFIGS:
        stored.add(_shape(rng))
    records = [_record(m, k, rng) for m, k in sorted(stored)]
    print(kind, "records ready", flush=True)
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    near: list[tuple[int, int]] = []
    while len(near) < URLS // 2:
        shape = _shape(rng)
        if shape not in stored:
            near.append(shape)
    ordered = sorted(stored)
    exact = [rng.choice(ordered) for _ in range(URLS // 2)]
    paths = [_url(m, k) for m, k in exact + near]
    rng.shuffle(paths)
    paths_file, script = workdir / f"paths-{kind}.txt", workdir / "paths.lua"
    paths_file.write_text("".join(p + "\n" for p in paths))
    script.write_text(_WRK_SCRIPT.replace("(i * 7919) % #paths + 1", "(i - 1) % #paths + 1"))
    result: dict[str, Any] = {
        "database": kind,
        "staleness_ms": staleness_ms,
        "configs": CONFIGS,
        "runs": [],
    }
    with _database(kind, workdir) as url:
        upgrade(url)
        token = create_token_in_db(url, "bench", ["admin"])
        with (
            _serve(url, 1, workdir, staleness_ms) as (base1, pid1),
            _serve(url, 2, workdir, staleness_ms) as (base2, pid2),
        ):
            started, cpu_before = time.monotonic(), _tree_cpu(pid1)
            response = httpx.post(
                f"{base1}/v1/import",
                content=body,
                headers={
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/x-ndjson",
                },
                timeout=600,
            )
            took, import_cpu = time.monotonic() - started, _tree_cpu(pid1) - cpu_before
            answer = response.json()
            if response.status_code != 200 or answer["inserted"] != CONFIGS:
                raise RuntimeError(f"import: {response.status_code} {str(answer)[:300]}")
            result["import_seconds"] = took
            result["import_rate"] = CONFIGS / took
            # what one free core would sustain (the server's CPU; PostgreSQL's not counted)
            result["import_rate_per_cpu_second"] = CONFIGS / max(import_cpu, 1e-9)
            print(kind, f"import {CONFIGS} in {took:.1f} s: {CONFIGS / took:.0f}/s", flush=True)
            for base, pid in ((base1, pid1), (base2, pid2)):  # warm-up, not counted
                _wrk(base, pid, paths_file, script, WARMUP_S)
            taken = set(stored)
            for _ in range(repeats):
                for workers, base, pid in ((1, base1, pid1), (2, base2, pid2)):
                    writer = _Writer(base, token, rng, taken)
                    writer.start()
                    try:
                        run = _wrk(base, pid, paths_file, script, seconds)
                    finally:
                        writer.stop.set()
                        writer.join()
                    run |= {
                        "workers": workers,
                        "writes": writer.written,
                        "write_errors": writer.failed,
                    }
                    run["load_before"] = os.getloadavg()[0]
                    result["runs"].append(run)
                    print(kind, json.dumps(run), flush=True)
    return result


def _median(values: list[float]) -> float:
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(values) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def summary(result: dict[str, Any]) -> dict[str, Any]:
    by = {w: [r for r in result["runs"] if r["workers"] == w] for w in (1, 2)}
    pairs = list(zip(by[1], by[2], strict=True))
    return {
        "rate_1": _median([r["rate"] for r in by[1]]),
        "rate_2": _median([r["rate"] for r in by[2]]),
        "scaling": _median([b["rate"] / max(a["rate"], 1e-9) for a, b in pairs]),
        "p99_1": _median([r["p99_ms"] for r in by[1]]),
        "p99_2": _median([r["p99_ms"] for r in by[2]]),
        "cpu_1": _median([r["server_cpu_ms_per_lookup"] for r in by[1]]),
        "cpu_2": _median([r["server_cpu_ms_per_lookup"] for r in by[2]]),
    }


def _per_cpu(result: dict[str, Any]) -> str:
    rate = result.get("import_rate_per_cpu_second")
    return "not measured" if rate is None else f"{rate:.0f}"


def _label(result: dict[str, Any]) -> str:
    staleness = result.get("staleness_ms", 0)
    return result["database"] + (f", staleness {staleness} ms" if staleness else "")


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        START,
        "## Distinct shapes, with a writer, 1 and 2 API processes (issue 24)",
        "",
        f"- Date: {meta.get('merged', meta['date'])}; device: {meta['machine']}. The machine "
        "is shared: other "
        "engineers' tests and builds ran during the runs (load average in the table), so "
        "figures move between runs; 1 and 2 processes were measured alternately, in the same "
        "minutes.",
        "- Commands: "
        + "; ".join(sorted({f"`{r['command']}`" for r in results if "command" in r}))
        + " (raw figures: `docs/benchmarks/load-distinct.json`).",
        f"- Load: `{meta['wrk']}`, one thread, {CLIENTS} connections, {URLS:,} URLs in random "
        f"order (half stored shapes: exact; half never stored: nearest) over {CONFIGS:,} "
        "stored reduce configs on one device, so no URL repeats within a run; a writer imports "
        f"one new config every {int(WRITE_EVERY_S * 1000)} ms through the server under test.",
        "- Server: `tunehub serve --workers N` (uvicorn, httptools, uvloop), "
        "`TUNEHUB_LOOKUP_STALENESS_MS=0` (every lookup checks the change signal) unless a row "
        "says otherwise (`--staleness-ms`). Server CPU: "
        "utime + stime of all its processes over the run / lookups (includes the writer's "
        "imports); PostgreSQL's own backends are not counted.",
        "- Import: the 20,000 configs in one `POST /v1/import`, every check on (variants "
        "verified against the space).",
        "",
        "| database | processes | lookups/s | p50 ms | p99 ms | server CPU ms/lookup | "
        "cores the server got | non-2xx | writes | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        for r in result["runs"]:
            lines.append(
                f"| {_label(result)} | {r['workers']} | {r['rate']:.0f} | {r['p50_ms']:.1f} "
                f"| {r['p99_ms']:.1f} | {r['server_cpu_ms_per_lookup']:.3f} "
                f"| {r['server_cpu_share']:.2f} | {r['non_2xx']} "
                f"| {r['writes']} | {r['load_before']:.1f} |"
            )
    lines += ["", "| database | import configs/s (per server CPU-second) | lookups/s 1 -> 2 "
              "processes (median) | 2/1 (median of pairs) | p99 ms 1 / 2 | CPU ms/lookup 1 / 2 |",
              "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for result in results:
        s = summary(result)
        lines.append(
            f"| {_label(result)} | {result['import_rate']:.0f} "
            f"({_per_cpu(result)}) | {s['rate_1']:.0f} -> "
            f"{s['rate_2']:.0f} | {s['scaling']:.2f}x | {s['p99_1']:.1f} / {s['p99_2']:.1f} | "
            f"{s['cpu_1']:.3f} / {s['cpu_2']:.3f} |"
        )
    lines += ["", "Against the targets (at most 0.25 ms CPU per lookup, 2/1 >= 1.7x, p99 <= "
              "25 ms, import >= 5,000/s):", ""]  # fmt: skip
    for result in results:
        s = summary(result)
        checks = [
            ("CPU per lookup", max(s["cpu_1"], s["cpu_2"]) <= TARGETS["cpu_ms"]),
            ("scaling", s["scaling"] >= TARGETS["scaling"]),
            ("p99", max(s["p99_1"], s["p99_2"]) <= TARGETS["p99_ms"]),
            ("import", result["import_rate"] >= TARGETS["import_rate"]),
        ]
        said = ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in checks)
        lines.append(f"- {_label(result)}: {said}.")
    lines += ["", 'See "Reading the distinct-shape figures" below for the causes.', END]
    return "\n".join(lines) + "\n"


def write_section(section: str) -> None:
    text = OUT_MD.read_text()
    if START in text:
        before, rest = text.split(START, 1)
        text = before + section + "\n" + rest.split(END, 1)[1].lstrip("\n")
    else:
        title, _, rest = text.partition("\n")
        text = f"{title}\n\n{section}\n\n## Repeated shapes (issue 8)\n\n{rest.lstrip()}"
    OUT_MD.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="each wrk run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per process count")
    parser.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tunehub-load-distinct"))
    parser.add_argument("--staleness-ms", type=int, default=0, help="TUNEHUB_LOOKUP_STALENESS_MS")
    parser.add_argument(
        "--merge", action="store_true", help="keep the other rows of the JSON (and the date)"
    )
    parser.add_argument("--render", action="store_true", help="only rewrite load.md from the JSON")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(OUT_JSON.read_text())
        write_section(render(saved["results"], saved["meta"]))
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(),
        "wrk": _wrk_version(),
        "seconds": args.seconds,
        "repeats": args.repeats,
    }
    results = [
        measure(kind, args.seconds, args.repeats, args.workdir, args.staleness_ms)
        for kind in args.databases
    ]
    command = " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])])
    for result in results:
        result["command"] = command
    if args.merge and OUT_JSON.exists():
        old = json.loads(OUT_JSON.read_text())
        new_keys = {(r["database"], r["staleness_ms"]) for r in results}
        kept = [
            r for r in old["results"] if (r["database"], r.get("staleness_ms", 0)) not in new_keys
        ]
        results = kept + results
        meta["merged"] = f"{old['meta']['date']} and {meta['date']}"
        meta["date"] = old["meta"]["date"]
    OUT_JSON.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    write_section(render(results, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
