"""The service's settings: one pydantic-settings class, read from ``TUNEHUB_*`` variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import platformdirs
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    """Everything the service, the worker agent and the CLI read from the environment."""

    model_config = SettingsConfigDict(env_prefix="TUNEHUB_", extra="ignore")

    #: empty means a SQLite file ``tunehub.db`` inside ``data_dir``
    database_url: str = ""
    host: str = "127.0.0.1"
    port: int = 8765
    data_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("tunehub")))
    cache_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_cache_dir("tunehub")))
    #: run a worker inside the service; None means on for SQLite, off otherwise
    local_worker: bool | None = None
    migrate_on_start: bool = False
    lease_seconds: int = Field(default=120, ge=1)
    read_token_required: bool = False
    #: 0: every lookup checks the database's change signal (one cheap query) before answering
    #: from the in-memory read model; > 0: a lookup may answer from memory up to this many
    #: milliseconds behind a commit (service.store.read_model)
    lookup_staleness_ms: int = Field(default=0, ge=0, le=60_000)
    #: request bodies over this many bytes are refused with 413 (``/v1/import``: its own)
    max_body_bytes: int = Field(default=8 << 20, ge=1024)
    max_import_bytes: int = Field(default=64 << 20, ge=1024)
    #: where uploaded artifacts are kept, content-addressed (``<dir>/<sha[:2]>/<sha>``); point
    #: it at a shared volume to share it; empty means ``<data_dir>/artifacts``
    artifact_dir: Path | None = None
    #: an artifact over this many bytes is refused with 413
    max_artifact_bytes: int = Field(default=64 << 20, ge=1024)
    #: a lease may store at most this many artifacts (its winner, and a stored winner it
    #: measured again); a further one is refused with 409
    max_artifacts_per_lease: int = Field(default=4, ge=1, le=1000)
    #: refuse uploaded measurements whose variant the op's space does not accept for the
    #: problem and device (tuner.acceptance); off only for tests that upload synthetic variants
    verify_variants: bool = True
    #: 2: every job without its own ``confirm`` asks a second worker to re-measure winners
    confirm: int = Field(default=1, ge=1, le=2)
    #: a new winner faster than the stored one by more than this fraction of its median (0.3:
    #: 30% faster) is a record: held, and served only once another host confirms it
    #: (service.store.confirm); None: off
    record_margin: float | None = Field(default=None, gt=0, lt=1)
    #: a worker token an admin mapped to no device (tunehub token devices) may serve none
    #: (service.store.device_map); off: an unmapped token serves any device
    device_map_required: bool = False
    compile_workers: int = Field(default=0, ge=0)
    bench_seconds: float = Field(default=0.2, gt=0)
    #: a benchmark file (the format of docs/benchmarks/h200.json): the web UI draws its vendor
    #: figures beside GEMM/conv2d winners and its copy rate as the bandwidth ceiling
    ui_benchmark_file: Path | None = None
    #: device copy rate in GB/s by part of a device name, e.g. {"H200": 4125} (JSON in the
    #: environment): the ceiling of the UI's bandwidth plots
    copy_gbps: dict[str, float] = Field(default_factory=dict)

    @field_validator("artifact_dir", mode="before")
    @classmethod
    def _blank_is_default(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _default_database(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'tunehub.db'}"
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def artifact_root(self) -> Path:
        """The artifact directory: ``artifact_dir``, else ``<data_dir>/artifacts``."""
        return self.artifact_dir if self.artifact_dir else self.data_dir / "artifacts"

    @property
    def local_worker_enabled(self) -> bool:
        return self.is_sqlite if self.local_worker is None else self.local_worker

    def ensure_dirs(self) -> None:
        """Create the data and cache dirs (called on first use, not at import)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cache_dir.mkdir(parents=True, exist_ok=True)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
