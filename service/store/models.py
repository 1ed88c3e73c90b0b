"""SQLAlchemy 2 models. Every schema change is an Alembic migration (migrations/versions).

Keys, what decides "the same" (service/store/keys.py makes them): a device is backend + name +
arch + sm_count; a toolchain is its key text; a problem is op + dtype + layout + canonical
problem key; a variant is the sha256 of its source.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, get_args

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from service.schemas.measurement import MeasuredValues, max_length, plain_type

__all__ = [
    "Base",
    "UTCDateTime",
    "utcnow",
    "new_id",
    "Device",
    "Toolchain",
    "Job",
    "Task",
    "Worker",
    "WorkerDevice",
    "Lease",
    "Variant",
    "Measurement",
    "BestConfig",
    "ApiToken",
    "TokenDevice",
    "ClientMeasurement",
    "ClientBestConfig",
    "VariantBuild",
    "Artifact",
]


#: a measured value's Python type -> its column type (text: String of its max_length)
_COLUMN_TYPES: dict[type, type[TypeEngine[Any]]] = {float: Float, int: BigInteger}


def _measured_columns() -> type:
    """The ``measurements`` columns of the measurement's field set (MeasuredValues), mapped
    here and nowhere else: a float is a Float, an int a BigInteger, text a String of its
    max_length; a value that may be None is a nullable column; defaults are the model's."""
    columns: dict[str, Any] = {}
    for name, field in MeasuredValues.model_fields.items():
        kinds = set(get_args(plain_type(field.annotation))) or {plain_type(field.annotation)}
        nullable = type(None) in kinds
        (kind,) = kinds - {type(None)}
        column_type = String(max_length(field)) if kind is str else _COLUMN_TYPES[kind]()
        columns[name] = mapped_column(column_type, nullable=nullable, default=field.default)
    return type("MeasuredColumns", (), columns)


if TYPE_CHECKING:

    class MeasuredColumns:
        """The type checker's view of the columns code reads as attributes (the columns
        themselves are made from the field set: a new value needs a line here only where
        code reads it as ``measurement.<name>`` rather than by name)."""

        median_us: Mapped[float | None]
        p20_us: Mapped[float | None]
        p80_us: Mapped[float | None]
        min_us: Mapped[float | None]
        reps: Mapped[int | None]
        throughput: Mapped[float | None]
        throughput_unit: Mapped[str]
        compile_seconds: Mapped[float | None]
        energy_j: Mapped[float | None]

else:
    MeasuredColumns = _measured_columns()


class ResultKeyColumns:
    """A result's key and its problem: what a measurement and a best config both carry."""

    op: Mapped[str] = mapped_column(String(16))
    dtype: Mapped[str] = mapped_column(String(8))
    layout: Mapped[str] = mapped_column(String(16))
    problem: Mapped[dict[str, Any]] = mapped_column()
    problem_key: Mapped[str] = mapped_column(Text)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    toolchain_id: Mapped[int] = mapped_column(ForeignKey("toolchains.id"))


class ClientKeyColumns:
    """A client result's key: what a client measurement and a client best config both carry
    (``op`` is an op family such as ``triton:<kernel hash>``, ``key_text`` the canonical
    autotune key)."""

    op: Mapped[str] = mapped_column(String(80))
    key_text: Mapped[str] = mapped_column(Text)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    toolchain_id: Mapped[int] = mapped_column(ForeignKey("toolchains.id"))


#: what makes two results "the same" (one best config each); measurements carry these columns too
BEST_CONFIG_KEY = ("op", "dtype", "layout", "problem_key", "device_id", "toolchain_id")


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class UTCDateTime(TypeDecorator[datetime]):
    """Stored as naive UTC on every database, returned as aware UTC."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON}


class Device(Base):
    __tablename__ = "devices"
    __table_args__ = (
        UniqueConstraint("backend", "name", "arch", "sm_count", name="uq_devices_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    backend: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    arch: Mapped[str] = mapped_column(String(64))
    sm_count: Mapped[int] = mapped_column(Integer)
    driver: Mapped[str] = mapped_column(String(100), default="")
    runtime: Mapped[str] = mapped_column(String(100), default="")
    memory_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    #: the device's copy rate (GB/s, read + written) and peak rates (TFLOP/s by dtype), as an
    #: admin recorded them (None: the product's defaults, service.store.bounds): no
    #: measurement may beat them (service.store.checks)
    copy_gbps: Mapped[float | None] = mapped_column(Float, default=None)
    peak_tflops: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    def key(self) -> str:
        return f"{self.backend}:{self.name}:{self.arch}:{self.sm_count}"


class Toolchain(Base):
    __tablename__ = "toolchains"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(Text, unique=True)
    compiler: Mapped[str] = mapped_column(String(200))
    template_version: Mapped[str] = mapped_column(String(100))
    libraries: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status", "status"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    op: Mapped[str] = mapped_column(String(16))
    dtype: Mapped[str] = mapped_column(String(8))
    layout: Mapped[str] = mapped_column(String(16))
    #: the device selector as submitted: {backend, name?, arch?}
    device: Mapped[dict[str, Any]] = mapped_column()
    #: copy of device["backend"], so leasing can filter in SQL
    backend: Mapped[str] = mapped_column(String(16))
    strategy: Mapped[str] = mapped_column(String(32))
    budget: Mapped[dict[str, Any]] = mapped_column()
    objective: Mapped[str] = mapped_column(String(16))
    seed: Mapped[int] = mapped_column(BigInteger, default=0)
    #: 2: each winner is re-measured on another host (service.store.confirm), same device key
    confirm: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    error: Mapped[str | None] = mapped_column(Text, default=None)
    #: the token that submitted it, its owner: only it or an admin may cancel the job (None:
    #: a job stored before owners, which only an admin cancels)
    token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", name="fk_jobs_token_id"), default=None, index=True
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Task(Base):
    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_status_created", "status", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    problem: Mapped[dict[str, Any]] = mapped_column()
    problem_key: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    lease_id: Mapped[str | None] = mapped_column(String(32), default=None, index=True)
    lease_owner: Mapped[str | None] = mapped_column(String(32), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    #: this task's own winner (the best config may keep an older one inside the tie band)
    #: plain int, no foreign key: tasks and measurements would reference each other
    winner_measurement_id: Mapped[int | None] = mapped_column(Integer, default=None)
    #: a re-measuring task (job confirm 2): the task whose winner it confirms and the device
    #: it must run on (who may take it: service.store.confirm)
    confirm_of: Mapped[str | None] = mapped_column(String(32), default=None)
    confirm_device_id: Mapped[int | None] = mapped_column(Integer, default=None)
    #: the variant names its job could not tell from its fastest (tuner.winner), winner first
    tie_set: Mapped[list[Any] | None] = mapped_column(default=None)
    #: budgeted candidates its budget left unmeasured (0: complete)
    unmeasured: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    #: the token that registered the worker: only it may lease, heartbeat and upload for it
    token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", name="fk_workers_token_id"), default=None, index=True
    )
    #: the host it runs on (tuner.host: sha256 of the machine id); None: an agent too old to
    #: say, whose measurements never confirm (service.store.confirm)
    host_fingerprint: Mapped[str | None] = mapped_column(String(64), default=None)
    #: the physical devices it measures on (GPU UUIDs or host + PCI bus ids; the CPU: host +
    #: model), hashed
    device_uids: Mapped[list[Any] | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class WorkerDevice(Base):
    __tablename__ = "worker_devices"

    worker_id: Mapped[str] = mapped_column(
        ForeignKey("workers.id", ondelete="CASCADE"), primary_key=True
    )
    device_id: Mapped[int] = mapped_column(
        ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True
    )


class Lease(Base):
    """History of leases, so a heartbeat can tell an unknown lease (404) from a lost one (409)."""

    __tablename__ = "leases"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    worker_id: Mapped[str] = mapped_column(ForeignKey("workers.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Variant(Base):
    __tablename__ = "variants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    op: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(300))
    params: Mapped[dict[str, Any]] = mapped_column()


class Measurement(ResultKeyColumns, MeasuredColumns, Base):
    __tablename__ = "measurements"
    __table_args__ = (
        Index("ix_measurements_problem", "op", "dtype", "layout", "problem_key", "device_id"),
        # one row per variant per lease: a retried upload adds nothing
        UniqueConstraint("lease_id", "variant_id", name="uq_measurements_lease_variant"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[str | None] = mapped_column(
        ForeignKey("tasks.id", ondelete="SET NULL"), default=None, index=True
    )
    job_id: Mapped[str | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="SET NULL"), default=None, index=True
    )
    variant_id: Mapped[str] = mapped_column(ForeignKey("variants.id"))
    # op ... toolchain_id: the result's key (ResultKeyColumns)
    outcome: Mapped[str] = mapped_column(String(32))
    # median_us ... energy_j: the measured values, one column each (MeasuredColumns)
    log: Mapped[str] = mapped_column(Text, default="")
    provenance: Mapped[dict[str, Any]] = mapped_column(default=dict)
    suspect: Mapped[bool] = mapped_column(Boolean, default=False)
    #: who uploaded it (None for imported rows); plain ids: leases go with their tasks
    lease_id: Mapped[str | None] = mapped_column(String(32), default=None)
    worker_id: Mapped[str | None] = mapped_column(String(32), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class BestConfig(ResultKeyColumns, Base):
    __tablename__ = "best_configs"
    __table_args__ = (UniqueConstraint(*BEST_CONFIG_KEY, name="uq_best_configs_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # op ... toolchain_id: the result's key (ResultKeyColumns)
    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurements.id"))
    #: another host (another machine and physical device, same device key) re-measured the
    #: winner in the tie band (service.store.confirm)
    confirmed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: the variant names the deciding job could not tell from its fastest, the winner first
    tie_set: Mapped[list[Any] | None] = mapped_column(default=None)
    #: budgeted candidates left unmeasured by the most complete job of the key (0: complete)
    unmeasured: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: a winner that beat this one by more than TUNEHUB_RECORD_MARGIN, held (not served)
    #: until another host confirms it (service.store.confirm); plain int, as on tasks
    pending_measurement_id: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    #: stamped by the database on every write that changes this row's answer (triggers of
    #: migration 0010), read by service.store.read_model; never written by the code
    revision: Mapped[int | None] = mapped_column(BigInteger, index=True)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    #: sha256 hex of the token; the plaintext is never stored
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class TokenDevice(Base):
    """A device a worker token may serve, as an admin mapped it: a device key
    (``backend:name:arch:sm_count``) and, optionally, the hashed id of the physical device
    (``tuner.host.device_uid``) its registration must carry. A token with no rows serves any
    device (unless TUNEHUB_DEVICE_MAP_REQUIRED); see service.store.device_map."""

    __tablename__ = "token_devices"
    __table_args__ = (Index("ix_token_devices_token_id", "token_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"))
    device_key: Mapped[str] = mapped_column(String(400))
    device_uid: Mapped[str | None] = mapped_column(String(100), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ClientMeasurement(ClientKeyColumns, Base):
    """A config of a client's own kernel (e.g. a Triton autotune candidate), as the client
    timed it. Kept apart from worker-verified measurements; ``op`` is ``triton:<hash>``."""

    __tablename__ = "client_measurements"
    __table_args__ = (Index("ix_client_measurements_key", "op", "key_text", "device_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # op, key_text, device_id, toolchain_id: the client result's key (ClientKeyColumns)
    kernel_name: Mapped[str] = mapped_column(String(200))
    key: Mapped[dict[str, Any]] = mapped_column()
    config_name: Mapped[str] = mapped_column(String(300))
    params: Mapped[dict[str, Any]] = mapped_column()
    outcome: Mapped[str] = mapped_column(String(32))
    median_us: Mapped[float | None] = mapped_column(Float, default=None)
    p20_us: Mapped[float | None] = mapped_column(Float, default=None)
    p80_us: Mapped[float | None] = mapped_column(Float, default=None)
    log: Mapped[str] = mapped_column(Text, default="")
    provenance: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: the token that uploaded it (tokens are never deleted, only revoked)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ClientBestConfig(ClientKeyColumns, Base):
    """The winner per client key; a separate table, so it cannot touch best_configs."""

    __tablename__ = "client_best_configs"
    __table_args__ = (
        UniqueConstraint(
            "op", "key_text", "device_id", "toolchain_id", name="uq_client_best_configs_key"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # op, key_text, device_id, toolchain_id: the client result's key (ClientKeyColumns)
    measurement_id: Mapped[int] = mapped_column(ForeignKey("client_measurements.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class VariantBuild(Base):
    """What rebuilds a variant's artifact (tuner.types.BuildRecord), once per variant id: the
    id hashes the rendered source, flags, compiler and template version, so one record fits
    every upload of the variant."""

    __tablename__ = "variant_builds"

    variant_id: Mapped[str] = mapped_column(
        ForeignKey("variants.id", ondelete="CASCADE"), primary_key=True
    )
    source: Mapped[str] = mapped_column(Text)
    variant_source: Mapped[str | None] = mapped_column(Text, default=None)
    flags: Mapped[list[Any]] = mapped_column()
    build_flags: Mapped[list[Any]] = mapped_column()
    compiler: Mapped[str] = mapped_column(Text)
    compiler_name: Mapped[str] = mapped_column(String(200))
    template_version: Mapped[str] = mapped_column(String(100))
    needs: Mapped[list[Any]] = mapped_column()
    link: Mapped[list[Any]] = mapped_column()
    #: who uploaded it; plain ids, as on measurements
    worker_id: Mapped[str | None] = mapped_column(String(32), default=None)
    lease_id: Mapped[str | None] = mapped_column(String(32), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


#: what makes two artifacts "the same": one per variant, device arch and toolchain
ARTIFACT_KEY = ("variant_id", "arch", "toolchain_id")


class Artifact(Base):
    """A variant's built shared object for one arch and toolchain, stored by content: the file
    is ``<artifact dir>/<storage_path>`` (``<sha256[:2]>/<sha256>``)."""

    __tablename__ = "artifacts"
    __table_args__ = (
        UniqueConstraint(*ARTIFACT_KEY, name="uq_artifacts_key"),
        Index("ix_artifacts_sha256", "sha256"),
        Index("ix_artifacts_lease_id", "lease_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    variant_id: Mapped[str] = mapped_column(ForeignKey("variants.id", ondelete="CASCADE"))
    arch: Mapped[str] = mapped_column(String(64))
    toolchain_id: Mapped[int] = mapped_column(ForeignKey("toolchains.id"))
    backend: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    storage_path: Mapped[str] = mapped_column(Text)
    worker_id: Mapped[str | None] = mapped_column(String(32), default=None)
    lease_id: Mapped[str | None] = mapped_column(String(32), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
