"""An import is checked as an upload is, line by line (refused lines reported by number, field
and reason, the others imported), and is idempotent."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.api.app import create_app
from service.settings import Settings
from service.store.models import Measurement, Variant
from service.store.tokens import create_token

REAL_NAME = "reduce_f32_p4_a2_u2"
REAL_PARAMS = {"pack": 4, "acc": 2, "unroll": 2}


@pytest.fixture
def strict(settings: Settings) -> Iterator[tuple[TestClient, dict[str, str], Any]]:
    """An app that verifies variants (the default), with an admin token."""
    app = create_app(settings.model_copy(update={"verify_variants": True}))
    with app.state.sessionmaker() as session:
        token = create_token(session, "importer", ["admin"])
        session.commit()
    with TestClient(app) as client:
        yield client, {"Authorization": f"Bearer {token}"}, app.state.sessionmaker


def _record(api: Any) -> dict[str, Any]:
    return {
        "op": "reduce",
        "dtype": "f32",
        "layout": "row",
        "problem": {"m": 1024, "k": 4096, "kind": "sum"},
        "device": dict(api.CPU_DEVICE),
        "toolchain": dict(api.TOOLCHAIN),
        "variant": {"id": "a" * 64, "name": REAL_NAME, "params": dict(REAL_PARAMS)},
        "measurement": {
            "outcome": "ok",
            "median_us": 50.0,
            "p20_us": 49.0,
            "p80_us": 51.0,
            "min_us": 48.0,
            "created_at": "2026-12-01T10:00:00+00:00",
        },
    }


def _changed(record: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(record)
    node = changed
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return changed


def _post(client: TestClient, headers: dict[str, str], text: str | bytes) -> Any:
    body = text.encode() if isinstance(text, str) else text
    return client.post(
        "/v1/import", content=body, headers={**headers, "Content-Type": "application/x-ndjson"}
    )


def _count(maker: Any, model: Any = Measurement) -> int:
    with maker() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_bad_lines_are_refused_one_by_one_and_the_rest_imported(
    api: Any, strict: tuple[TestClient, dict[str, str], Any]
) -> None:
    client, admin, maker = strict
    good = _record(api)
    bad: list[tuple[Any, list[Any], str]] = [
        (
            _changed(
                good, ("variant",), {"id": "b" * 64, "name": REAL_NAME, "params": {"pack": 3}}
            ),
            ["variant", "name"],
            "not in the cpu reduce space",
        ),
        (_changed(good, ("device",), dict(api.H200)), ["variant", "name"], "not in the cuda"),
        (
            _changed(good, ("measurement", "p20_us"), 60.0),
            ["measurement"],
            "p20_us (60) is above median_us (50)",
        ),
        (
            _changed(good, ("measurement", "created_at"), "9999-01-01T00:00:00+00:00"),
            ["measurement", "created_at"],
            "in the future",
        ),
        (
            _changed(good, ("variant",), {"id": "a" * 64, "name": "other", "params": {"x": 1}}),
            ["variant", "id"],
            "stored as reduce 'reduce_f32_p4_a2_u2' with other params",
        ),
        (_changed(good, ("device", "name"), "\ud800"), ["device", "name"], "surrogate"),
        ("{not json", [], "malformed JSON"),
        (_changed(good, ("problem",), {"m": 1024}), ["problem", "k"], "required for op reduce"),
    ]
    lines = [json.dumps(good)] + [
        item if isinstance(item, str) else json.dumps(item) for item, _, _ in bad
    ]
    text = "\n".join(lines) + "\n"
    response = _post(client, admin, text)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["records"], answer["inserted"], answer["refused"]) == (9, 1, 8)
    assert [error["line"] for error in answer["errors"]] == list(range(2, 10))
    for error, (_, loc, says) in zip(answer["errors"], bad, strict=True):
        assert error["loc"] == ["body", error["line"], *loc], error
        assert says in error["msg"], error
    # the clashing record did not credit its time to the stored variant
    with maker() as session:
        assert session.get(Variant, "a" * 64).name == REAL_NAME
        assert [m.median_us for m in session.scalars(select(Measurement))] == [50.0]

    # the same file again: nothing added, the same refusals
    again = _post(client, admin, text).json()
    assert (again["inserted"], again["duplicates"], again["refused"]) == (0, 1, 8)
    assert _count(maker) == 1


def test_an_import_is_idempotent_and_skips_a_byte_order_mark(
    api: Any, strict: tuple[TestClient, dict[str, str], Any]
) -> None:
    client, admin, maker = strict
    second = _changed(_record(api), ("problem", "m"), 2048)
    undated = _changed(_record(api), ("measurement", "created_at"), None)
    undated["problem"]["m"] = 4096
    text = "\ufeff" + "".join(json.dumps(r) + "\n" for r in (_record(api), second, undated))
    first = _post(client, admin, text.encode("utf-8"))
    assert first.status_code == 200, first.text
    assert (first.json()["inserted"], first.json()["refused"]) == (3, 0)
    for _ in range(2):
        again = _post(client, admin, text.encode("utf-8")).json()
        assert (again["inserted"], again["duplicates"]) == (0, 3)
    assert _count(maker) == 3
    # an export of this service, imported into it, is all duplicates
    exported = client.get("/v1/export", headers=admin).text
    assert _post(client, admin, exported).json()["duplicates"] == 3
    assert _count(maker) == 3


def test_a_file_with_no_good_line_is_a_422_listing_every_line(
    api: Any, strict: tuple[TestClient, dict[str, str], Any]
) -> None:
    client, admin, maker = strict
    bad = _changed(_record(api), ("measurement", "median_us"), -1)
    response = _post(client, admin, json.dumps(bad) + "\n\n" + "[]\n")
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert [item["loc"][:2] for item in detail] == [["body", 1], ["body", 3]]
    assert _count(maker) == 0
