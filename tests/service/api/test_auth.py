"""Tokens: 401 without or with an unknown token, 403 for a weak scope, stored only hashed."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.api.app import create_app
from service.settings import Settings
from service.store.models import ApiToken
from service.store.tokens import create_token, has_scope

WORKER_BODY = {
    "name": "w",
    "devices": [{"backend": "cpu", "name": "c", "arch": "x", "sm_count": 1}],
}


def test_writes_without_a_token_are_401(api: Any) -> None:
    client = api.client
    calls = [
        client.post("/v1/jobs", json=api.job_body()),
        client.delete("/v1/jobs/x"),
        client.post("/v1/workers", json=WORKER_BODY),
        client.post("/v1/leases", json={"worker_id": "x"}),
        client.post("/v1/leases/x/heartbeat", json={}),
        client.post("/v1/leases/x/results", json={}),
        client.post("/v1/tokens", json={"name": "n", "scopes": ["read"]}),
        client.post("/v1/import", content=""),
    ]
    for response in calls:
        assert response.status_code == 401, response.request.url
        assert response.headers["www-authenticate"] == "Bearer"


def test_unknown_or_malformed_tokens_are_401(api: Any) -> None:
    for header in ("Bearer th_nope", "Bearer ", "Basic abc", "th_x", "Bearer " + "x" * 5000):
        response = api.client.post(
            "/v1/jobs", json=api.job_body(), headers={"Authorization": header}
        )
        assert response.status_code == 401, header


@pytest.mark.parametrize(
    ("scope", "path", "allowed"),
    [
        ("read", "/v1/jobs", False),
        ("worker", "/v1/jobs", False),
        ("submit", "/v1/jobs", True),
        ("admin", "/v1/jobs", True),
        ("submit", "/v1/workers", False),
        ("worker", "/v1/workers", True),
        ("worker", "/v1/tokens", False),
        ("admin", "/v1/tokens", True),
    ],
)
def test_scopes(api: Any, scope: str, path: str, allowed: bool) -> None:
    bodies = {
        "/v1/jobs": api.job_body(),
        "/v1/workers": WORKER_BODY,
        "/v1/tokens": {"name": "ci", "scopes": ["read"]},
    }
    headers = {"Authorization": f"Bearer {api.harness.tokens[scope]}"}
    response = api.client.post(path, json=bodies[path], headers=headers)
    if allowed:
        assert response.status_code in (201, 202), response.text
    else:
        assert response.status_code == 403


def test_tokens_are_stored_hashed_and_work_once_created(api: Any) -> None:
    response = api.client.post(
        "/v1/tokens", json={"name": "ci", "scopes": ["submit"]}, headers=api.harness.admin
    )
    assert response.status_code == 201
    body = response.json()
    token = body["token"]
    assert token.startswith("th_") and len(token) > 40
    assert body["scopes"] == ["submit"] and body["name"] == "ci"
    with api.harness.sessionmaker() as session:
        rows = list(session.scalars(select(ApiToken)))
    stored = {row.token_hash for row in rows}
    assert hashlib.sha256(token.encode()).hexdigest() in stored
    assert all(token not in (row.token_hash, row.name) for row in rows)
    submitted = api.client.post(
        "/v1/jobs", json=api.job_body(), headers={"Authorization": f"Bearer {token}"}
    )
    assert submitted.status_code == 202


def test_revoked_token_is_401(api: Any) -> None:
    with api.harness.sessionmaker() as session:
        token = create_token(session, "old", ["submit"])
        session.flush()
        row = session.scalars(select(ApiToken).where(ApiToken.name == "old")).one()
        row.revoked = True
        session.commit()
    response = api.client.post(
        "/v1/jobs", json=api.job_body(), headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 401


def test_token_creation_validates_scopes(api: Any) -> None:
    for body in ({"name": "x", "scopes": ["root"]}, {"name": "x", "scopes": []}, {"name": ""}):
        response = api.client.post("/v1/tokens", json=body, headers=api.harness.admin)
        assert response.status_code == 422
    with api.harness.sessionmaker() as session, pytest.raises(ValueError):
        create_token(session, "x", ["root"])


def test_admin_implies_every_scope() -> None:
    assert all(has_scope(["admin"], s) for s in ("read", "submit", "worker", "admin"))
    assert has_scope(["worker"], "read")
    assert not has_scope(["read"], "submit")


def test_reads_are_open_unless_a_read_token_is_required(settings: Settings) -> None:
    open_app = create_app(settings)
    with TestClient(open_app) as client:
        assert client.get("/v1/jobs").status_code == 200
    closed = settings.model_copy(update={"read_token_required": True})
    app = create_app(closed)
    with app.state.sessionmaker() as session:
        token = create_token(session, "reader", ["read"])
        session.commit()
    with TestClient(app) as client:
        assert client.get("/v1/jobs").status_code == 401
        assert client.get("/v1/configs/best?op=gemm&dtype=f16&m=1&n=1&k=1").status_code == 401
        headers = {"Authorization": f"Bearer {token}"}
        assert client.get("/v1/jobs", headers=headers).status_code == 200
        assert client.get("/healthz").status_code == 200
