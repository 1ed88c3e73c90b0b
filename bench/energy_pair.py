"""One shape tuned twice through a running service, for time and for energy, on a GPU worker:
both winners' time and joules per launch side by side (issue 12's energy pair).

    python bench/energy_pair.py --server http://127.0.0.1:8765 --op gemm \
        --problem m=1,n=4096,k=4096 --dtype f16 --layout rcr --max-variants 6

Both jobs go through `POST /v1/jobs` like any client's, so this also shows an energy job
running end to end (worker, NVML counter, upload, winner). The energy job's measurements carry
both a median and joules, so both winners are read from it: one run, side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.cli.common import make_client  # noqa: E402
from service.client import TunehubClient  # noqa: E402
from service.schemas.jobs import JobCreate  # noqa: E402


def parse_dims(text: str) -> dict[str, int]:
    return {key: int(value) for key, _, value in (p.partition("=") for p in text.split(","))}


def run_job(client: TunehubClient, args: argparse.Namespace, objective: str) -> Any:
    job = JobCreate.model_validate(
        {
            "op": args.op,
            "dtype": args.dtype,
            "layout": args.layout,
            "problems": [parse_dims(args.problem)],
            "device": {"backend": "cuda"},
            "budget": {"max_variants": args.max_variants},
            "objective": objective,
        }
    )
    job_id = client.submit_job(job).id
    done = client.wait(job_id, poll_s=0.5, timeout_s=args.timeout_s)
    print(f"[{objective}] job {job_id} {done.status} {done.error or ''}", flush=True)
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=None, help="default: TUNEHUB_SERVER, as the CLI")
    parser.add_argument("--token", default=None, help="default: TUNEHUB_TOKEN or the admin token")
    parser.add_argument("--op", required=True)
    parser.add_argument("--problem", required=True, help="dims as m=..,n=..,k=..")
    parser.add_argument("--dtype", default="f16")
    parser.add_argument("--layout", default=None)
    parser.add_argument("--max-variants", type=int, default=8)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the rows")
    args = parser.parse_args()

    with make_client(args.server, args.token) as client:
        by_time = run_job(client, args, "time")
        by_energy = run_job(client, args, "energy")
        measured = {m.variant_name: m for m in client.measurements(job_id=by_energy.id)}
    rows = []
    for objective, job in (("time", by_time), ("energy", by_energy)):
        winner = job.problems[0].winner if job.problems else None
        seen = measured.get(winner.variant_name) if winner else None
        rows.append(
            {
                "op": args.op,
                "problem": args.problem,
                "objective": objective,
                "winner": winner.variant_name if winner else None,
                "us_per_launch": seen.median_us if seen else None,
                "mj_per_launch": seen.energy_j * 1e3 if seen and seen.energy_j else None,
            }
        )
    print(f"{'objective':<9} {'winner':<44} {'us':>9} {'mJ':>9}")
    for row in rows:
        us = f"{row['us_per_launch']:.1f}" if row["us_per_launch"] else "-"
        mj = f"{row['mj_per_launch']:.3f}" if row["mj_per_launch"] else "-"
        print(f"{row['objective']:<9} {str(row['winner'])[:44]:<44} {us:>9} {mj:>9}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["winner"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
