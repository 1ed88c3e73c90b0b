"""A best config's answer (``BestConfigOut``) from a lookup's row (:mod:`service.store.lookup`:
the row's columns are the best config, its measurement, variant, device, toolchain and the
winner's artifact for the device's arch, read in one statement)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Row

from service.schemas.artifacts import ArtifactRef
from service.schemas.common import DeviceOut, ToolchainOut
from service.schemas.configs import BestConfigOut
from service.store.artifacts import artifact_ref
from service.store.rows import columns

__all__ = ["AnswerParts", "best_answer"]

_Part = TypeVar("_Part")


@dataclass
class AnswerParts:
    """The device and toolchain answer models built so far: a batch, or the read model over
    its life, names a few of them many times, and each is built once. A device is keyed by
    its id with the columns a new report may change (driver, runtime, memory), so a row read
    after such a change gets its new answer; a toolchain's columns are its key."""

    devices: dict[tuple[Any, ...], DeviceOut] = field(default_factory=dict)
    toolchains: dict[int, ToolchainOut] = field(default_factory=dict)


def _once(built: dict[Any, _Part], key: Any, build: Callable[[], _Part]) -> _Part:
    """The part built for ``key`` so far, else ``build()`` (kept for the next rows)."""
    found = built.get(key)
    if found is None:
        found = built[key] = build()
    return found


def _device(row: Row[Any], seen: AnswerParts) -> DeviceOut:
    return _once(
        seen.devices,
        (row.device_id, row.driver, row.runtime, row.memory_bytes),
        lambda: DeviceOut(
            **columns(row, "backend", "arch", "sm_count", "driver", "runtime", "memory_bytes"),
            name=row.device_name,
            key=f"{row.backend}:{row.device_name}:{row.arch}:{row.sm_count}",  # Device.key
        ),
    )


def _toolchain(row: Row[Any], seen: AnswerParts) -> ToolchainOut:
    return _once(
        seen.toolchains,
        row.toolchain_id,
        lambda: ToolchainOut(
            **columns(row, "compiler", "template_version"),
            libraries=dict(row.libraries or {}),
            key=row.toolchain_key,
        ),
    )


def best_answer(
    op: str,
    dtype: str,
    layout: str,
    problem: dict[str, Any],
    row: Row[Any],
    exact: bool,
    distance: float,
    seen: AnswerParts,
) -> BestConfigOut:
    """The answer to a lookup of ``problem`` from the chosen row (``distance`` from it)."""
    return BestConfigOut(
        op=op,
        dtype=dtype,
        layout=layout,
        problem=problem,
        tuned_problem=row.problem,
        exact=exact,
        distance=round(distance, 6),
        **columns(row, "variant_id", "variant_name", "params", "measured_at", "confirmed"),
        **columns(row, "median_us", "p20_us", "p80_us", "throughput", "throughput_unit"),
        device=_device(row, seen),
        toolchain=_toolchain(row, seen),
        tie_set=list(row.tie_set or [row.variant_name]),
        complete=row.unmeasured == 0,
        unmeasured=row.unmeasured,
        # best configs are kept for the time objective; energy winners stay on their jobs
        objective="time",
        energy_j=row.energy_j,
        artifact=_artifact(row),
    )


def _artifact(row: Row[Any]) -> ArtifactRef | None:
    """The winner's artifact for its arch and toolchain, if a worker uploaded one."""
    if row.artifact_sha256 is None:
        return None
    return artifact_ref(
        row.artifact_sha256,
        row.artifact_size,
        row.variant_id,
        row.arch,
        row.toolchain_key,
        row.backend,
    )
