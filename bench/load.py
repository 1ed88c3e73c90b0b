"""Load on one API process: lookups/s and latency, the 1,000-problem batch, concurrent job
submissions. Not a test: it writes docs/benchmarks/load.md (and a JSON of the figures).

For each database (SQLite file, PostgreSQL) and each size (100 and 100,000 best configs,
seeded with bulk INSERTs by bench/load_seed.py) it starts ``uvicorn`` in a subprocess (one
process, as ``tunehub serve`` runs it) and measures:

- exact lookups (``GET /v1/configs/best`` of stored shapes) at 16 and 64 concurrent
  connections, and nearest-shape lookups at 16, with ``wrk`` (C, one thread, so the load
  generator takes little of the 2 cores), p50/p99 from its latency distribution, plus the
  server's own CPU seconds per request (from /proc), which says what a core would sustain
  when the machine is shared;
- the 1,000-problem batch (``POST /v1/configs/query``: 800 exact, 200 nearest), median of 10;
- concurrent job submissions (64 httpx clients in one event loop, 10 jobs each), then every
  accepted id looked up in the database: a lost job is one answered 202 but not stored.

Run from the repository root (needs ``wrk``: apt-get install wrk; PostgreSQL at
TUNEHUB_BENCH_PG_URL, default postgresql+psycopg://postgres@127.0.0.1:5432/postgres):

    .venv/bin/python bench/load.py

``--databases postgresql --merge`` re-measures only those rows and keeps the others (with the
page's date) from the JSON already written; the page names what was re-measured when.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import json
import logging
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load_seed import seed  # noqa: E402
from service.store.db import make_engine  # noqa: E402
from service.store.models import Job  # noqa: E402

log = logging.getLogger("bench.load")

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "load.md"
#: the profile and the analysis, written by hand; appended to the page
NOTES = Path(__file__).with_name("load_notes.md")
COMMAND = ".venv/bin/python bench/load.py"
PG_URL = os.environ.get(
    "TUNEHUB_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
SIZES = (100, 100_000)
CLIENTS = (16, 64)
BATCH = 1000
BATCH_REPEATS = 10
SUBMITTERS = 64
JOBS_EACH = 10
# targets of issue 8
TARGET_RATE = 2000.0
TARGET_P99_MS = 25.0
TARGET_SIZE_RATIO = 1.3
TARGET_BATCH_MS = 150.0

_WRK_SCRIPT = """
local paths = {}
for line in io.lines(os.getenv("WRK_PATHS")) do paths[#paths + 1] = line end
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i * 7919) % #paths + 1])
end
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _database(kind: str, workdir: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{workdir / f'load-{uuid.uuid4().hex[:8]}.db'}"
        return
    name = f"tunehub_bench_{uuid.uuid4().hex[:10]}"
    url = make_url(PG_URL)
    admin = {
        "host": url.host or "127.0.0.1",
        "port": url.port or 5432,
        "user": url.username or "postgres",
        "password": url.password,
        "dbname": url.database or "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**admin) as connection:  # type: ignore[arg-type]
        connection.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(**admin) as connection:  # type: ignore[arg-type]
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


@contextmanager
def _server(url: str, workdir: Path) -> Iterator[tuple[str, int]]:
    """One uvicorn process over ``url``; yields its base URL and pid."""
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TUNEHUB_DATABASE_URL": url,
        "TUNEHUB_LOCAL_WORKER": "0",
        "TUNEHUB_DATA_DIR": str(workdir / "data"),
        "TUNEHUB_CACHE_DIR": str(workdir / "cache"),
    }
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "service.api.app:create_app",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]
    process = subprocess.Popen(command, env=env, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on {base}")
            time.sleep(0.2)
        yield base, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _milliseconds(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip())
    if match is None:
        raise ValueError(f"wrk latency {text!r}")
    value, unit = float(match.group(1)), match.group(2)
    return value / 1000 if unit == "us" else (value * 1000 if unit == "s" else value)


def _wrk(base: str, pid: int, paths: list[str], clients: int, seconds: float, tmp: Path) -> dict:
    """Run wrk over ``paths`` (after a short warm-up); requests/s, p50/p99, server CPU."""
    path_file, script = tmp / "paths.txt", tmp / "paths.lua"
    path_file.write_text("".join(p + "\n" for p in paths))
    script.write_text(_WRK_SCRIPT)
    env = {**os.environ, "WRK_PATHS": str(path_file)}

    def run(duration: float) -> str:
        command = [
            "wrk",
            "-t1",
            f"-c{clients}",
            f"-d{round(duration)}s",
            "--latency",
            "-s",
            str(script),
        ]
        done = subprocess.run(
            [*command, base], env=env, capture_output=True, text=True, timeout=duration + 60
        )
        if done.returncode != 0:
            raise RuntimeError(f"wrk failed: {done.stderr}")
        return done.stdout

    run(2)
    cpu_before = _cpu_seconds(pid)
    started = time.monotonic()
    out = run(seconds)
    wall = time.monotonic() - started
    cpu = _cpu_seconds(pid) - cpu_before
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    p50 = _milliseconds(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _milliseconds(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "clients": clients,
        "requests": requests,
        "rate": rate,
        "p50_ms": p50,
        "p99_ms": p99,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "server_cpu_ms_per_request": 1000 * cpu / max(requests, 1),
        "server_cpu_share": cpu / wall,
    }


def _wrk_median(
    base: str, pid: int, paths: list[str], clients: int, seconds: float, tmp: Path, repeats: int
) -> dict:
    """The median run (by lookups/s) of ``repeats``: the machine is shared, so one run can
    land on a busy moment; every run's rate is kept."""
    runs = sorted(
        (_wrk(base, pid, paths, clients, seconds, tmp) for _ in range(repeats)),
        key=lambda r: r["rate"],
    )
    return {**runs[len(runs) // 2], "rates": [r["rate"] for r in runs]}


def _batch(base: str, problems: list[tuple[int, int, int]], rng: random.Random) -> dict:
    exact = rng.sample(problems, min(len(problems), BATCH * 4 // 5))
    queries: list[dict[str, Any]] = [
        {"op": "gemm", "dtype": "f16", "problem": {"m": m, "n": n, "k": k}} for m, n, k in exact
    ]
    while len(queries) < BATCH:
        m, n, k = rng.choice(problems)
        queries.append({"op": "gemm", "dtype": "f16", "problem": {"m": m + 1, "n": n, "k": k}})
    timings: list[float] = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for _ in range(BATCH_REPEATS + 1):
            started = time.perf_counter()
            response = client.post("/v1/configs/query", json={"queries": queries})
            timings.append(1000 * (time.perf_counter() - started))
            response.raise_for_status()
            results = response.json()["results"]
            assert len(results) == BATCH and all(r["result"] for r in results), results[:3]
    timings = timings[1:]  # the first one also warms the index
    return {
        "queries": BATCH,
        "median_ms": statistics.median(timings),
        "min_ms": min(timings),
        "max_ms": max(timings),
    }


async def _submit_all(base: str, token: str) -> tuple[list[str], dict[str, int], float]:
    body = {
        "op": "gemm",
        "dtype": "f16",
        "problems": [{"m": 128, "n": 128, "k": 128}],
        "device": {"backend": "cuda"},
        "strategy": "exhaustive",
        "budget": {"max_variants": 4},
    }
    headers = {"Authorization": f"Bearer {token}"}
    accepted: list[str] = []
    failed: dict[str, int] = {}
    limits = httpx.Limits(max_connections=SUBMITTERS)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:

        async def submitter() -> None:
            for _ in range(JOBS_EACH):
                try:
                    response = await client.post("/v1/jobs", json=body, headers=headers)
                except httpx.TransportError as exc:
                    reason = type(exc).__name__
                    failed[reason] = failed.get(reason, 0) + 1
                    continue
                if response.status_code == 202:
                    accepted.append(response.json()["id"])
                else:
                    reason = f"HTTP {response.status_code}"
                    failed[reason] = failed.get(reason, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(submitter() for _ in range(SUBMITTERS)))
        seconds = time.perf_counter() - started
    return accepted, failed, seconds


def _submissions(base: str, url: str, token: str) -> dict:
    accepted, failed, seconds = asyncio.run(_submit_all(base, token))
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            stored = set(session.scalars(select(Job.id).where(Job.id.in_(accepted))))
    finally:
        engine.dispose()
    return {
        "clients": SUBMITTERS,
        "sent": SUBMITTERS * JOBS_EACH,
        "accepted": len(accepted),
        "refused": sum(failed.values()),
        "refusals": failed,
        "lost": len(set(accepted) - stored),
        "jobs_per_s": len(accepted) / seconds,
    }


def _paths(problems: list[tuple[int, int, int]], rng: random.Random, near: bool) -> list[str]:
    chosen = rng.sample(problems, min(len(problems), 2000))
    shift = 1 if near else 0
    return [f"/v1/configs/best?op=gemm&dtype=f16&m={m + shift}&n={n}&k={k}" for m, n, k in chosen]


def measure(kind: str, size: int, seconds: float, workdir: Path, repeats: int) -> dict:
    rng = random.Random(size)
    with _database(kind, workdir) as url:
        started = time.perf_counter()
        problems, token = seed(url, size)
        seeded = time.perf_counter() - started
        log.info("%s: %d best configs seeded in %.1f s", kind, size, seeded)
        with _server(url, workdir) as (base, pid):
            exact_paths = _paths(problems, rng, False)
            lookups = [
                {
                    **_wrk_median(base, pid, exact_paths, c, seconds, workdir, repeats),
                    "kind": "exact",
                }
                for c in CLIENTS
            ]
            near = _wrk_median(
                base, pid, _paths(problems, rng, True), CLIENTS[0], seconds, workdir, repeats
            )
            lookups.append({**near, "kind": "nearest"})
            batch = _batch(base, problems, rng)
            submissions = _submissions(base, url, token)
    return {
        "database": kind,
        "best_configs": size,
        "seed_seconds": seeded,
        "lookups": lookups,
        "batch": batch,
        "submissions": submissions,
    }


def _machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}"


def _wrk_version() -> str:
    done = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    return (done.stdout or done.stderr).splitlines()[0].strip()


def render(results: list[dict], meta: dict) -> str:
    lines = [
        "# Load: lookups, batch and submissions against one API process",
        "",
        f"- Date: {meta['date']}; device: this development machine, {meta['machine']}, shared "
        f"with other engineers' work (load average {meta['load_before']} before, "
        f"{meta['load_after']} after).",
        *(
            f"- Re-measured {u['date']} (`{COMMAND} {u['args']}`, load average "
            f"{u['load_before']} before, {u['load_after']} after): the {u['rows']} rows; "
            "the other rows are from the date above."
            for u in meta.get("updates", [])
        ),
        f"- Command: `{COMMAND}` (figures also in `{meta['json']}`).",
        f"- Server: one `uvicorn` process (`{meta['uvicorn']}`, loop and HTTP parser "
        f"`auto`: {meta['stack']}), no access log; SQLite in WAL mode; PostgreSQL on "
        "127.0.0.1 (same machine).",
        f"- Load generator: `{meta['wrk']}` with one thread (C, a few % of a core), each "
        f"connection sending requests back to back for {meta['seconds']} s after a 2 s "
        "warm-up, over up to 2,000 stored shapes (exact) or the same shapes with m+1 "
        f"(nearest); each figure is the median of {meta.get('repeats', 1)} such runs (by "
        "lookups/s; the machine is shared, so runs differ). Batch and submissions: httpx "
        "from this script.",
        "- Server CPU ms/request: CPU time of the uvicorn process during the run divided by "
        "the requests served; 1000 / that is what one free core would sustain.",
        "",
        "## Lookups (`GET /v1/configs/best`)",
        "",
        "| database | best configs | kind | clients | lookups/s | p50 ms | p99 ms | "
        "server CPU ms/req | server CPU share | non-2xx | lookups/s of every run |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        for lk in r["lookups"]:
            lines.append(
                f"| {r['database']} | {r['best_configs']:,} | {lk['kind']} | {lk['clients']} | "
                f"{lk['rate']:.0f} | {lk['p50_ms']:.1f} | {lk['p99_ms']:.1f} | "
                f"{lk['server_cpu_ms_per_request']:.2f} | {lk['server_cpu_share']:.2f} | "
                f"{lk['non_2xx']} | {' / '.join(f'{x:.0f}' for x in lk.get('rates', []))} |"
            )
    lines += [
        "",
        f"## Batch (`POST /v1/configs/query`, {BATCH} problems: up to {BATCH * 4 // 5} "
        "exact, as many as are stored, the rest nearest)",
        "",
        "| database | best configs | median ms | min ms | max ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        b = r["batch"]
        lines.append(
            f"| {r['database']} | {r['best_configs']:,} | {b['median_ms']:.0f} | "
            f"{b['min_ms']:.0f} | {b['max_ms']:.0f} |"
        )
    lines += [
        "",
        f"## Concurrent submissions ({SUBMITTERS} clients x {JOBS_EACH} `POST /v1/jobs`)",
        "",
        "| database | best configs | sent | accepted | not accepted (why) | lost | jobs/s |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for r in results:
        s = r["submissions"]
        lines.append(
            f"| {r['database']} | {r['best_configs']:,} | {s['sent']} | {s['accepted']} | "
            f"{_refusals(s)} | {s['lost']} | {s['jobs_per_s']:.0f} |"
        )
    lines += ["", "## Against the targets of issue 8", ""]
    lines += _verdicts(results)
    notes = NOTES.read_text() if NOTES.exists() else ""
    return "\n".join(lines) + "\n" + ("\n" + notes if notes else "")


def _refusals(s: dict) -> str:
    why = s.get("refusals") or {}
    detail = ", ".join(f"{n} {reason}" for reason, n in sorted(why.items()))
    return f"{s['refused']}" + (f" ({detail})" if detail else "")


def _verdicts(results: list[dict]) -> list[str]:
    out: list[str] = []

    def lookup(db: str, size: int, clients: int, kind: str = "exact") -> dict | None:
        for r in results:
            if r["database"] == db and r["best_configs"] == size:
                for lk in r["lookups"]:
                    if lk["clients"] == clients and lk["kind"] == kind:
                        return lk
        return None

    small, large = lookup("sqlite", SIZES[0], 16), lookup("sqlite", SIZES[-1], 16)
    if small is not None:
        met = small["rate"] >= TARGET_RATE and small["p99_ms"] <= TARGET_P99_MS
        capacity = 1000 / small["server_cpu_ms_per_request"]
        out.append(
            f"- SQLite, 16 clients: {small['rate']:.0f} lookups/s, p99 {small['p99_ms']:.1f} ms "
            f"(target >= {TARGET_RATE:.0f}/s, p99 <= {TARGET_P99_MS:.0f} ms): "
            f"{'met' if met else 'missed'}; the server spent "
            f"{small['server_cpu_ms_per_request']:.2f} ms of CPU per lookup, so a free core "
            f"would sustain about {capacity:.0f}/s."
        )
    for db in ("sqlite", "postgresql"):
        a, b = lookup(db, SIZES[0], 16), lookup(db, SIZES[-1], 16)
        if a is not None and b is not None:
            ratio = a["rate"] / b["rate"]
            cpu_ratio = b["server_cpu_ms_per_request"] / a["server_cpu_ms_per_request"]
            out.append(
                f"- {db}: {SIZES[-1]:,} configs vs {SIZES[0]}: throughput ratio {ratio:.2f}x, "
                f"CPU per lookup ratio {cpu_ratio:.2f}x (target <= {TARGET_SIZE_RATIO}x): "
                f"{'met' if max(ratio, cpu_ratio) <= TARGET_SIZE_RATIO else 'missed'}."
            )
    del large
    for r in results:
        b = r["batch"]
        out.append(
            f"- batch, {r['database']} {r['best_configs']:,}: median {b['median_ms']:.0f} ms "
            f"(target <= {TARGET_BATCH_MS:.0f} ms): "
            f"{'met' if b['median_ms'] <= TARGET_BATCH_MS else 'missed'}."
        )
    lost = sum(r["submissions"]["lost"] for r in results)
    out.append(f"- lost jobs over all runs: {lost} (target 0): {'met' if lost == 0 else 'missed'}.")
    return out


def _merged(
    saved: dict, fresh: list[dict], meta: dict, argv: list[str] | None
) -> tuple[list[dict], dict]:
    """The saved rows with the freshly measured (database, size) rows put in their place, and
    the saved page's metadata plus a note of this update."""
    by_key = {(r["database"], r["best_configs"]): r for r in fresh}
    results = [by_key.pop((r["database"], r["best_configs"]), r) for r in saved["results"]]
    results += by_key.values()
    rows = ", ".join(f"{r['database']} {r['best_configs']:,}" for r in fresh)
    update = {
        "date": meta["date"],
        "args": " ".join(sys.argv[1:] if argv is None else argv),
        "rows": rows,
        "load_before": meta["load_before"],
        "load_after": meta["load_after"],
    }
    merged_meta = {**saved["meta"], "json": meta["json"]}
    merged_meta["updates"] = [*saved["meta"].get("updates", []), update]
    return results, merged_meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--seconds", type=float, default=5.0, help="each wrk run")
    parser.add_argument("--repeats", type=int, default=3, help="wrk runs per figure (median)")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--from-json", type=Path, help="re-render the page from a JSON this script wrote"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="replace only the measured (database, size) rows of the JSON already written",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        args.out.write_text(render(saved["results"], saved["meta"]))
        print(f"wrote {args.out}")
        return 0
    if shutil.which("wrk") is None:
        print("bench/load.py needs wrk (apt-get install wrk)", file=sys.stderr)
        return 2
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tunehub-load-") as tmp:
        for kind in args.databases.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                results.append(measure(kind, size, args.seconds, Path(tmp), args.repeats))
                log.info("%s", json.dumps(results[-1]))
    import uvicorn

    json_path = args.out.with_suffix(".json")
    meta = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(),
        "load_before": load_before,
        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "uvicorn": f"uvicorn {uvicorn.__version__}",
        "stack": ", ".join(
            f"{name} {'installed' if importlib.util.find_spec(name) else 'absent'}"
            for name in ("uvloop", "httptools")
        ),
        "wrk": _wrk_version(),
        "seconds": args.seconds,
        "repeats": args.repeats,
        "json": json_path.relative_to(REPO) if json_path.is_relative_to(REPO) else json_path,
    }
    if args.merge and json_path.exists():
        results, meta = _merged(json.loads(json_path.read_text()), results, meta, argv)
    json_path.write_text(
        json.dumps({"meta": {**meta, "json": str(meta["json"])}, "results": results}, indent=1)
    )
    text = render(results, meta)
    # bench/load_distinct.py's section (between its markers) stays at the top of the page
    start, end = "<!-- load_distinct:start -->", "<!-- load_distinct:end -->"
    old = args.out.read_text() if args.out.exists() else ""
    if start in old and end in old:
        section = old[old.index(start) : old.index(end) + len(end)]
        title, _, rest = text.partition("\n")
        text = f"{title}\n\n{section}\n\n## Repeated shapes (issue 8)\n\n{rest.lstrip()}"
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
