"""Alembic migrations on SQLite and PostgreSQL, and the app's refusal of an unmigrated DB."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from service.api.app import create_app
from service.errors import DatabaseNotMigrated
from service.settings import Settings
from service.store.db import current_revision, downgrade, head_revision, make_engine, upgrade

TABLES = {
    "devices",
    "toolchains",
    "jobs",
    "tasks",
    "workers",
    "worker_devices",
    "leases",
    "variants",
    "measurements",
    "best_configs",
    "api_tokens",
    "client_measurements",
    "client_best_configs",
    "variant_builds",
    "artifacts",
    "token_devices",
}
#: the tables before 0009
TABLES_0008 = TABLES - {"token_devices"}


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _settings(url: str, tmp_path: Path, **extra: object) -> Settings:
    return Settings(database_url=url, data_dir=tmp_path, cache_dir=tmp_path, **extra)


def test_upgrade_then_downgrade_round_trip(empty_database_url: str) -> None:
    assert current_revision(empty_database_url) is None
    upgrade(empty_database_url)
    assert current_revision(empty_database_url) == head_revision()
    assert _tables(empty_database_url) == TABLES
    downgrade(empty_database_url, "base")
    assert current_revision(empty_database_url) is None
    assert _tables(empty_database_url) == set()
    upgrade(empty_database_url)
    assert _tables(empty_database_url) == TABLES


def test_best_configs_key_is_unique(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    engine = make_engine(empty_database_url)
    try:
        uniques = inspect(engine).get_unique_constraints("best_configs")
    finally:
        engine.dispose()
    columns = [tuple(u["column_names"]) for u in uniques]
    assert ("op", "dtype", "layout", "problem_key", "device_id", "toolchain_id") in columns


def _pg_triggers(url: str, table: str) -> list[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return list(
                connection.execute(
                    text(
                        "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                        "WHERE c.relname = :table AND NOT t.tgisinternal"
                    ),
                    {"table": table},
                ).scalars()
            )
    finally:
        engine.dispose()


def test_0007_adds_the_artifact_tables_and_its_downgrade_removes_them(
    empty_database_url: str,
) -> None:
    upgrade(empty_database_url, "0006")
    assert _tables(empty_database_url) == TABLES_0008 - {"artifacts", "variant_builds"}
    upgrade(empty_database_url, "0007")
    assert current_revision(empty_database_url) == "0007"
    assert _tables(empty_database_url) == TABLES_0008
    engine = make_engine(empty_database_url)
    try:
        uniques = inspect(engine).get_unique_constraints("artifacts")
        indexes = {i["name"] for i in inspect(engine).get_indexes("artifacts")}
    finally:
        engine.dispose()
    assert ("variant_id", "arch", "toolchain_id") in [tuple(u["column_names"]) for u in uniques]
    assert {"ix_artifacts_sha256", "ix_artifacts_lease_id"} <= indexes
    postgresql = empty_database_url.startswith("postgresql")
    if postgresql:  # a stored artifact changes best answers: it moves the change signal
        assert _pg_triggers(empty_database_url, "artifacts") == ["tunehub_note_change"]
    downgrade(empty_database_url, "0006")
    assert current_revision(empty_database_url) == "0006"
    assert _tables(empty_database_url) == TABLES_0008 - {"artifacts", "variant_builds"}
    if postgresql:  # the other tables keep their triggers
        assert _pg_triggers(empty_database_url, "best_configs") == ["tunehub_note_change"]


def _columns(url: str, table: str) -> set[str]:
    engine = make_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def test_0008_adds_host_identity_tie_sets_and_completeness_and_downgrades(
    empty_database_url: str,
) -> None:
    upgrade(empty_database_url, "0007")
    assert "confirm_exclude_token_id" in _columns(empty_database_url, "tasks")
    upgrade(empty_database_url, "0008")
    assert current_revision(empty_database_url) == "0008"
    assert {"host_fingerprint", "device_uids"} <= _columns(empty_database_url, "workers")
    for table in ("tasks", "best_configs"):
        assert {"tie_set", "unmeasured"} <= _columns(empty_database_url, table)
    assert "confirm_exclude_token_id" not in _columns(empty_database_url, "tasks")
    downgrade(empty_database_url, "0007")
    assert current_revision(empty_database_url) == "0007"
    assert not {"host_fingerprint", "device_uids"} & _columns(empty_database_url, "workers")
    assert "confirm_exclude_token_id" in _columns(empty_database_url, "tasks")
    assert "tie_set" not in _columns(empty_database_url, "best_configs")


def test_0009_adds_owners_rates_held_records_and_device_maps_and_downgrades(
    empty_database_url: str,
) -> None:
    upgrade(empty_database_url, "0008")
    assert "token_id" not in _columns(empty_database_url, "jobs")
    upgrade(empty_database_url, "0009")
    assert "token_id" in _columns(empty_database_url, "jobs")
    assert {"copy_gbps", "peak_tflops"} <= _columns(empty_database_url, "devices")
    assert "pending_measurement_id" in _columns(empty_database_url, "best_configs")
    assert "token_devices" in _tables(empty_database_url)
    downgrade(empty_database_url, "0008")
    assert "token_id" not in _columns(empty_database_url, "jobs")
    assert "copy_gbps" not in _columns(empty_database_url, "devices")
    assert "pending_measurement_id" not in _columns(empty_database_url, "best_configs")
    assert "token_devices" not in _tables(empty_database_url)


def test_app_refuses_an_unmigrated_database(empty_database_url: str, tmp_path: Path) -> None:
    with pytest.raises(DatabaseNotMigrated, match="tunehub db upgrade"):
        create_app(_settings(empty_database_url, tmp_path))


def test_app_refuses_an_outdated_database(empty_database_url: str, tmp_path: Path) -> None:
    upgrade(empty_database_url)
    downgrade(empty_database_url, "base")
    with pytest.raises(DatabaseNotMigrated, match="tunehub db upgrade"):
        create_app(_settings(empty_database_url, tmp_path))


def test_migrate_on_start_upgrades(empty_database_url: str, tmp_path: Path) -> None:
    app = create_app(_settings(empty_database_url, tmp_path, migrate_on_start=True))
    assert current_revision(empty_database_url) == head_revision()
    app.state.engine.dispose()


def test_sqlite_file_dir_is_created_on_first_use(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'dir' / 'tunehub.db'}"
    upgrade(url)
    assert (tmp_path / "new" / "dir" / "tunehub.db").exists()


def test_default_database_is_a_sqlite_file_in_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    assert settings.database_url == f"sqlite:///{tmp_path / 'data' / 'tunehub.db'}"
    assert settings.local_worker_enabled
    assert not Settings(database_url="postgresql+psycopg://x@h/db").local_worker_enabled
