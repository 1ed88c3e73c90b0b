"""Seeding a tunehub database with many best configs fast (bulk INSERTs), for bench/load.py.

A team's cache holds many GEMM winners for one device; this writes ``count`` of them (random
log-uniform shapes, distinct keys) with their measurements straight into a migrated database
in a few thousand rows per statement, which takes seconds where ``/v1/import`` takes minutes.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from service.store.db import make_engine, upgrade
from service.store.keys import device_row, ensure_variants, toolchain_row
from service.store.models import BestConfig, Measurement
from service.store.tokens import create_token

__all__ = ["H200", "seed", "shapes"]

H200: dict[str, Any] = {
    "backend": "cuda",
    "name": "NVIDIA H200",
    "arch": "sm_90",
    "sm_count": 132,
    "driver": "560.35",
    "runtime": "13.0",
    "memory_bytes": 141 << 30,
}
TOOLCHAIN: dict[str, Any] = {"compiler": "nvcc 13.0", "template_version": "bench", "libraries": {}}
VARIANTS = 64
_CHUNK = 1000


def shapes(count: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """``count`` distinct GEMM shapes with log-uniform dims in [1, 16384]."""
    seen: set[tuple[int, int, int]] = set()
    while len(seen) < count:
        seen.add(
            (
                int(2 ** rng.uniform(0, 14)),
                int(2 ** rng.uniform(0, 14)),
                int(2 ** rng.uniform(0, 14)),
            )
        )
    return sorted(seen)


def seed(url: str, count: int, rng_seed: int = 0) -> tuple[list[tuple[int, int, int]], str]:
    """Migrate ``url`` and store ``count`` f16 rcr GEMM best configs on an H200; returns the
    shapes and an admin token."""
    upgrade(url)
    rng = random.Random(rng_seed)
    problems = shapes(count, rng)
    engine = make_engine(url)
    now = datetime.now(UTC).replace(tzinfo=None)
    try:
        with Session(engine) as session:
            device = device_row(session, **H200)
            toolchain = toolchain_row(session, **TOOLCHAIN)
            names = [f"gemm_f16_rcr_v{i}" for i in range(VARIANTS)]
            ensure_variants(session, "gemm", [(f"sha-{n}", n, {"name": n}) for n in names])
            token = create_token(session, "bench-admin", ["admin"])
            base = session.scalar(select(Measurement.id).order_by(Measurement.id.desc())) or 0
            for start in range(0, count, _CHUNK):
                measurements: list[dict[str, Any]] = []
                best: list[dict[str, Any]] = []
                for offset, (m, n, k) in enumerate(problems[start : start + _CHUNK]):
                    mid = base + start + offset + 1
                    median = 1.0 + rng.random() * 1000
                    key = {
                        "op": "gemm",
                        "dtype": "f16",
                        "layout": "rcr",
                        "problem": {"m": m, "n": n, "k": k},
                        "problem_key": f"m={m},n={n},k={k}",
                        "device_id": device.id,
                        "toolchain_id": toolchain.id,
                    }
                    measurements.append(
                        {
                            **key,
                            "id": mid,
                            "variant_id": f"sha-{names[mid % VARIANTS]}",
                            "outcome": "ok",
                            "median_us": median,
                            "p20_us": median * 0.99,
                            "p80_us": median * 1.01,
                            "min_us": median * 0.98,
                            "reps": 100,
                            "throughput": 2.0 * m * n * k / median / 1e6,
                            "throughput_unit": "TFLOP/s",
                            "log": "",
                            "provenance": {},
                            "suspect": False,
                            "created_at": now,
                        }
                    )
                    best.append(
                        {**key, "measurement_id": mid, "created_at": now, "updated_at": now}
                    )
                session.execute(insert(Measurement), measurements)
                session.execute(insert(BestConfig), best)
            session.commit()
    finally:
        engine.dispose()
    return problems, token
