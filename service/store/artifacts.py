"""Built artifacts and build records in the database: who may upload, what is kept, what is read.

Rules (docs/artifacts.md): a worker token uploads only for a lease one of its workers holds
(:func:`service.store.tokens.check_lease_owner`, :func:`service.store.queue.held_task`), and
only for a variant that lease measured with outcome ``ok``. The build record comes first (once
per variant id; it must hash to the id, :func:`tuner.artifacts.record_problem`), then the
artifact, keyed by (variant, the measured device's arch, the measured toolchain). A key holds
one sha256: the same bytes again are a no-op, other bytes a Conflict. A lease stores at most
``max_per_lease`` artifacts.

The upload route checks before it reads a body (:func:`plan_artifact`), then stores the file
and the row (:func:`record_artifact`); nothing here touches files (:mod:`service.store.blobs`).
Nothing commits: the caller does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.errors import Conflict, Forbidden, InvalidInput, NotFound
from service.schemas.artifacts import ArtifactRef, VariantBuildIn, VariantBuildOut, artifact_url
from service.store.keys import insert_ignore
from service.store.models import (
    ApiToken,
    Artifact,
    Device,
    Lease,
    Measurement,
    Toolchain,
    Variant,
    VariantBuild,
    utcnow,
)
from service.store.queue import held_task
from service.store.tokens import check_lease_owner
from tuner.artifacts import record_problem
from tuner.types import ABI_VERSION, BuildRecord

__all__ = [
    "ArtifactPlan",
    "measured_variant",
    "store_build",
    "plan_artifact",
    "record_artifact",
    "artifact_by_sha",
    "build_out",
    "artifact_ref",
]


@dataclass(frozen=True)
class ArtifactPlan:
    """An upload that may proceed: its key, who uploads it, and what is stored there now."""

    lease_id: str
    worker_id: str
    variant_id: str
    arch: str
    toolchain_id: int
    toolchain_key: str
    backend: str
    #: the sha256 stored under the key already (the same bytes: the upload is a retry)
    stored_sha256: str | None


def measured_variant(
    session: Session, lease_id: str, variant_id: str, token: ApiToken
) -> tuple[Lease, Measurement, Device, Toolchain]:
    """The lease's verified measurement of ``variant_id``: Forbidden for another token's lease
    or a variant the lease did not measure, NotFound for an unknown lease, Conflict for a lease
    no longer held or a variant that did not verify."""
    check_lease_owner(session, lease_id, token)
    lease, _task = held_task(session, lease_id)
    measurement = session.scalar(
        select(Measurement).where(
            Measurement.lease_id == lease.id, Measurement.variant_id == variant_id
        )
    )
    if measurement is None:
        raise Forbidden(
            f"variant {variant_id} was not measured on lease {lease_id}: a worker uploads "
            "artifacts only of the variants it measured on that lease"
        )
    if measurement.outcome != "ok":
        raise Conflict(
            f"variant {variant_id} has outcome {measurement.outcome!r} on lease {lease_id}: "
            "only a verified variant (outcome ok) has an artifact"
        )
    device = session.get(Device, measurement.device_id)
    toolchain = session.get(Toolchain, measurement.toolchain_id)
    assert device is not None and toolchain is not None  # foreign keys
    return lease, measurement, device, toolchain


def store_build(
    session: Session, lease_id: str, variant_id: str, body: VariantBuildIn, token: ApiToken
) -> bool:
    """Store the build record of a variant the lease measured; False when one is stored
    already (the id hashes everything that matters, so the first one stays). InvalidInput
    when the record does not hash to the variant id."""
    if body.variant_id != variant_id:
        raise InvalidInput(["body", "variant_id"], f"must be the path's variant id {variant_id}")
    lease, _measurement, device, _toolchain = measured_variant(session, lease_id, variant_id, token)
    if session.get(VariantBuild, variant_id) is not None:
        return False
    variant = session.get(Variant, variant_id)
    assert variant is not None  # measurements reference it
    record = BuildRecord(
        variant_id=variant_id,
        name=variant.name,
        op=variant.op,
        **_build_fields(body, tuple),
    )
    problem = record_problem(record, device.backend)
    if problem is not None:
        raise InvalidInput(["body", "source"], problem)
    row = body.model_dump(exclude={"variant_id"})
    row.update(variant_id=variant_id, worker_id=lease.worker_id, lease_id=lease.id)
    insert_ignore(session, VariantBuild, [{**row, "created_at": utcnow()}])
    return True


def _stored(session: Session, variant_id: str, arch: str, toolchain_id: int) -> Artifact | None:
    return session.scalar(
        select(Artifact).where(
            Artifact.variant_id == variant_id,
            Artifact.arch == arch,
            Artifact.toolchain_id == toolchain_id,
        )
    )


def _check_room(session: Session, lease_id: str, max_per_lease: int) -> None:
    count = (
        session.scalar(select(func.count(Artifact.id)).where(Artifact.lease_id == lease_id)) or 0
    )
    if count >= max_per_lease:
        raise Conflict(
            f"lease {lease_id} stored {count} artifacts, the most one lease may "
            "(TUNEHUB_MAX_ARTIFACTS_PER_LEASE)"
        )


def plan_artifact(
    session: Session,
    lease_id: str,
    variant_id: str,
    sha256: str,
    token: ApiToken,
    max_per_lease: int,
) -> ArtifactPlan:
    """Whether the lease may upload ``sha256`` as the artifact of ``variant_id`` (checked
    before the body is read). Raises as :func:`measured_variant`, and Conflict when the
    build record is missing, the key holds other bytes, or the lease has no room left."""
    lease, measurement, device, toolchain = measured_variant(session, lease_id, variant_id, token)
    if session.get(VariantBuild, variant_id) is None:
        raise Conflict(
            f"variant {variant_id} has no build record: upload it first "
            f"(PUT /v1/leases/{lease_id}/builds/{variant_id})"
        )
    stored = _stored(session, variant_id, device.arch, measurement.toolchain_id)
    if stored is not None and stored.sha256 != sha256:
        raise Conflict(_other_bytes(stored, device.arch))
    if stored is None:
        _check_room(session, lease.id, max_per_lease)
    return ArtifactPlan(
        lease_id=lease.id,
        worker_id=lease.worker_id,
        variant_id=variant_id,
        arch=device.arch,
        toolchain_id=measurement.toolchain_id,
        toolchain_key=toolchain.key,
        backend=device.backend,
        stored_sha256=stored.sha256 if stored is not None else None,
    )


def _other_bytes(stored: Artifact, arch: str) -> str:
    return (
        f"variant {stored.variant_id} has an artifact for {arch} and this toolchain already, "
        f"with sha256 {stored.sha256}: other bytes for the same variant, arch and toolchain "
        "are refused"
    )


def record_artifact(
    session: Session,
    plan: ArtifactPlan,
    sha256: str,
    size: int,
    storage_path: str,
    max_per_lease: int,
) -> tuple[ArtifactRef, bool]:
    """Store the artifact row of a checked upload whose file is in place; (its ArtifactRef,
    whether it was stored now). Conflict when other bytes took the key meanwhile."""
    stored = _stored(session, plan.variant_id, plan.arch, plan.toolchain_id)
    now = utcnow()
    if stored is None:
        _check_room(session, plan.lease_id, max_per_lease)
        row = {
            "variant_id": plan.variant_id,
            "arch": plan.arch,
            "toolchain_id": plan.toolchain_id,
            "backend": plan.backend,
            "sha256": sha256,
            "size": size,
            "storage_path": storage_path,
            "worker_id": plan.worker_id,
            "lease_id": plan.lease_id,
            "created_at": now,
        }
        insert_ignore(session, Artifact, [row])  # a concurrent twin: ON CONFLICT DO NOTHING
        stored = _stored(session, plan.variant_id, plan.arch, plan.toolchain_id)
        assert stored is not None
        created = stored.lease_id == plan.lease_id and stored.created_at == now
    else:
        created = False
    if stored.sha256 != sha256:
        raise Conflict(_other_bytes(stored, plan.arch))
    ref = artifact_ref(
        stored.sha256, stored.size, stored.variant_id, stored.arch, plan.toolchain_key,
        stored.backend,
    )  # fmt: skip
    return ref, created


def artifact_ref(
    sha256: str, size: int, variant_id: str, arch: str, toolchain_key: str, backend: str
) -> ArtifactRef:
    """What an upload answers and a best answer names."""
    return ArtifactRef(
        sha256=sha256,
        size=size,
        variant_id=variant_id,
        arch=arch,
        toolchain=toolchain_key,
        backend=backend,
        url=artifact_url(sha256),
        abi=ABI_VERSION,
    )


def artifact_by_sha(session: Session, sha256: str) -> Artifact:
    """An artifact row with this content; NotFound when no worker uploaded such bytes."""
    row = session.scalar(select(Artifact).where(Artifact.sha256 == sha256).limit(1))
    if row is None:
        raise NotFound(f"no artifact with sha256 {sha256} is stored")
    return row


#: a build record's fields that a worker sends and the store keeps as they came
_BUILD_VALUES = ("source", "variant_source", "compiler", "compiler_name", "template_version")
#: ... and its sequences (tuples in ``tuner.types.BuildRecord``, lists on the wire)
_BUILD_SEQUENCES = ("flags", "build_flags", "needs", "link")


def _build_fields(
    build: VariantBuildIn | VariantBuild, sequence: Callable[[Iterable[str]], Sequence[str]]
) -> dict[str, Any]:
    """The build record fields of an upload or a stored row, sequences made by ``sequence``."""
    return {
        **{field: getattr(build, field) for field in _BUILD_VALUES},
        **{field: sequence(getattr(build, field)) for field in _BUILD_SEQUENCES},
    }


def build_out(session: Session, variant_id: str) -> VariantBuildOut:
    """The build record of a variant; NotFound when absent."""
    found = session.execute(
        select(VariantBuild, Variant).join(Variant, Variant.id == VariantBuild.variant_id)
        .where(VariantBuild.variant_id == variant_id)
    ).first()  # fmt: skip
    if found is None:
        known = session.get(Variant, variant_id) is not None
        why = (
            "no worker uploaded its artifact yet"
            if known
            else "no variant with this id was measured here"
        )
        raise NotFound(f"variant {variant_id} has no build record: {why}")
    build, variant = found
    return VariantBuildOut(
        variant_id=variant.id,
        name=variant.name,
        op=variant.op,
        **_build_fields(build, list),
        created_at=build.created_at,
    )
