"""The measurement's field set (service/schemas/measurement.py) is the one list every consumer
carries: the upload, the answer, the ORM columns, the agent's conversion, replays, the export
and the import. And a new field is three edits: proven by making them in a scratch copy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from sqlalchemy import BigInteger, Float, String

from service.agent.wire import measured_values, measurement_in
from service.schemas.configs import MeasurementOut
from service.schemas.measurement import MEASURED_FIELDS, MeasuredValues
from service.schemas.worker import MeasurementIn
from service.store import replays
from service.store.models import Measurement
from service.store.transfer import MeasurementRecord
from tuner.types import BenchResult, Outcome, Timing

REPO = Path(__file__).resolve().parents[3]
MEASURED = set(MEASURED_FIELDS)
#: what each consumer carries beside the measured values
RUN = {"outcome", "log", "provenance", "suspect"}
VARIANT = {"variant_id", "variant_name", "params"}
KEY = {"op", "dtype", "layout", "problem"}


def test_the_wire_models_carry_exactly_the_set() -> None:
    assert set(MeasurementIn.model_fields) - MEASURED == VARIANT | RUN | {"retimed"}
    out_rest = VARIANT | RUN | KEY | {"id", "job_id", "task_id", "device", "toolchain"}
    assert set(MeasurementOut.model_fields) - MEASURED == out_rest | {"created_at"}
    assert MEASURED <= set(MeasurementIn.model_fields) and MEASURED <= set(
        MeasurementOut.model_fields
    )
    assert set(MeasurementRecord.model_fields) - MEASURED == {
        "outcome",
        "provenance",
        "suspect",
        "created_at",
    }
    assert MEASURED <= set(MeasurementRecord.model_fields)


def test_the_orm_columns_are_the_set_typed_by_it() -> None:
    columns = Measurement.__table__.c
    rest = {
        "id",
        "task_id",
        "job_id",
        "problem_key",
        "device_id",
        "toolchain_id",
        "lease_id",
        "worker_id",
        "created_at",
    }
    assert set(columns.keys()) - MEASURED == (KEY | RUN | rest | {"variant_id"})
    assert MEASURED <= set(columns.keys())
    for name, field in MeasuredValues.model_fields.items():
        column = columns[name]
        expected = {"throughput_unit": String, "reps": BigInteger}.get(name, Float)
        assert isinstance(column.type, expected), name
        assert column.nullable == (field.default is None), name


def test_the_agent_replays_and_export_read_the_set_by_name() -> None:
    result = BenchResult(
        "ab" * 32,
        "v",
        {"pack": 4},
        Outcome.OK,
        Timing(2.0, 1.9, 2.1, 1.8, 50),
        throughput=3.0,
        throughput_unit="GB/s",
        compile_seconds=0.25,
        energy_j=0.5,
    )
    values = measured_values(result)
    assert tuple(values) == MEASURED_FIELDS
    assert values == {
        "median_us": 2.0,
        "p20_us": 1.9,
        "p80_us": 2.1,
        "min_us": 1.8,
        "reps": 50,
        "throughput": 3.0,
        "throughput_unit": "GB/s",
        "compile_seconds": 0.25,
        "energy_j": 0.5,
    }
    assert measurement_in(result).model_dump(include=MEASURED) == values
    assert set(replays.COMPARED_FIELDS) == MEASURED | RUN
    # what a re-timing replaces: a chosen subset, named from the same set
    from service.agent import uploads
    from service.store import results

    assert set(uploads._TIMING) <= MEASURED | RUN
    assert set(results._RETIMED_FIELDS) <= MEASURED | RUN


#: run inside the scratch copy, where one field (clock_mhz) was added in three files
_ROUND_TRIP = r"""
import json, sys
from pathlib import Path
from fastapi.testclient import TestClient
from service.agent.wire import measurement_in
from service.api.app import create_app
from service.settings import Settings
from service.store.db import upgrade
from service.store.tokens import create_token
from tuner.types import BenchResult, Outcome, Timing

CPU = {"backend": "cpu", "name": "x86", "arch": "x86_64-avx2", "sm_count": 4}
TC = {"compiler": "g++ 12.2.0", "template_version": "abc123", "libraries": {}}


def service(name):
    url = f"sqlite:///{Path(sys.argv[1]) / name}.db"
    upgrade(url)
    tmp = Path(sys.argv[1]) / name
    app = create_app(Settings(database_url=url, data_dir=tmp / "data", cache_dir=tmp / "cache",
                              local_worker=False, verify_variants=False))
    with app.state.sessionmaker() as session:
        tokens = {s: create_token(session, s, [s]) for s in ("admin", "worker", "submit", "read")}
        session.commit()
    return app, {s: {"Authorization": f"Bearer {t}"} for s, t in tokens.items()}


result = BenchResult("ab" * 32, "v1", {"pack": 4}, Outcome.OK, Timing(2.0, 1.9, 2.1, 1.8, 50),
                     throughput=1.0, throughput_unit="GB/s", clock_mhz=1980.0)
item = measurement_in(result).model_dump(mode="json")
app, h = service("a")
with TestClient(app) as client:
    job = client.post("/v1/jobs", headers=h["submit"], json={
        "op": "reduce", "dtype": "f32", "problems": [{"m": 1024, "k": 4096, "kind": "sum"}],
        "device": {"backend": "cpu"}}).json()
    worker = client.post("/v1/workers", headers=h["worker"],
                         json={"name": "w", "devices": [CPU]}).json()["id"]
    lease = client.post("/v1/leases", headers=h["worker"],
                        json={"worker_id": worker, "backends": ["cpu"]}).json()
    sent = client.post(f"/v1/leases/{lease['lease_id']}/results", headers=h["worker"],
                       json={"device": CPU, "toolchain": TC, "measurements": [item], "final": True})
    assert sent.status_code == 200, sent.text
    listed = client.get("/v1/measurements", params={"job_id": job["id"]}).json()
    exported = client.get("/v1/export", headers=h["admin"]).text
app_b, h_b = service("b")
with TestClient(app_b) as client:
    imported = client.post("/v1/import", headers=h_b["admin"], content=exported)
    assert imported.status_code == 200, imported.text
    again = client.get("/v1/export", headers=h_b["admin"]).text
print(json.dumps({
    "uploaded": item["clock_mhz"],
    "listed": listed["measurements"][0]["clock_mhz"],
    "exported": json.loads(exported.splitlines()[0])["measurement"]["clock_mhz"],
    "imported": json.loads(again.splitlines()[0])["measurement"]["clock_mhz"],
}))
"""


def _add_line(path: Path, after: str, line: str) -> None:
    text = path.read_text()
    assert text.count(after) == 1, (path, after)
    path.write_text(text.replace(after, after + line))


def test_a_new_field_is_three_edits(tmp_path: Path) -> None:
    scratch = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("service", "tuner", "migrations", "kernel_templates"):
        shutil.copytree(REPO / name, scratch / name, ignore=ignore)
    shutil.copy(REPO / "alembic.ini", scratch / "alembic.ini")
    edited = [
        scratch / "service/schemas/measurement.py",
        scratch / "tuner/types.py",
        scratch / "migrations/versions/9999_clock.py",
    ]
    # 1. the field set
    _add_line(
        edited[0],
        "    energy_j: float | None = Field(default=None, ge=0, le=1e9)\n",
        "    clock_mhz: float | None = Field(default=None, ge=0, le=1e6)\n",
    )
    # 2. the engine's result carries it
    _add_line(
        edited[1],
        "    energy_j: float | None = None\n",
        "    clock_mhz: float | None = None\n",
    )
    # 3. the column
    head_of = "from service.store.db import head_revision; print(head_revision())"
    head = subprocess.run(
        [sys.executable, "-c", head_of],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    edited[2].write_text(
        "import sqlalchemy as sa\nfrom alembic import op\n\n"
        f"revision = '9999'\ndown_revision = {head!r}\nbranch_labels = None\ndepends_on = None\n\n"
        "def upgrade():\n"
        "    op.add_column('measurements', sa.Column('clock_mhz', sa.Float(), nullable=True))\n\n"
        "def downgrade():\n    op.drop_column('measurements', 'clock_mhz')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", _ROUND_TRIP, str(tmp_path)],
        cwd=scratch,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = run.stdout.strip().splitlines()[-1]
    assert seen == (
        '{"uploaded": 1980.0, "listed": 1980.0, "exported": 1980.0, "imported": 1980.0}'
    ), run.stdout


def test_the_type_checkers_view_of_the_columns_names_only_the_set() -> None:
    import ast

    tree = ast.parse((REPO / "service/store/models.py").read_text())
    stubs = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == "MeasuredColumns"
    ]
    assert len(stubs) == 1
    names = {
        item.target.id
        for item in stubs[0].body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }
    assert names and names <= MEASURED
