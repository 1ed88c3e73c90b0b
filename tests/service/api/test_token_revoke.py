"""Revoking a token without SQL: ``tunehub token revoke`` and ``DELETE /v1/tokens/{id}``; a
revoked token is refused everywhere from the next request on."""

from __future__ import annotations

from typing import Any

import pytest

from service.cli import main
from service.settings import get_settings


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    get_settings.cache_clear()
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), out, err


def _new_token(api: Any, name: str, scope: str) -> tuple[int, dict[str, str]]:
    response = api.client.post(
        "/v1/tokens", json={"name": name, "scopes": [scope]}, headers=api.harness.admin
    )
    assert response.status_code == 201, response.text
    body = response.json()
    return body["id"], {"Authorization": f"Bearer {body['token']}"}


def _register(api: Any, headers: dict[str, str]) -> Any:
    return api.client.post(
        "/v1/workers", json={"name": "w", "devices": [api.CPU_DEVICE]}, headers=headers
    )


def test_an_admin_revokes_a_worker_token_over_the_api(api: Any) -> None:
    token_id, headers = _new_token(api, "gpu-host-1", "worker")
    worker = _register(api, headers)
    assert worker.status_code == 201
    api.submit()
    lease = api.client.post(
        "/v1/leases", json={"worker_id": worker.json()["id"], "backends": ["cpu"]}, headers=headers
    )
    assert lease.status_code == 200

    listed = api.client.get("/v1/tokens", headers=api.harness.admin).json()["tokens"]
    shown = next(t for t in listed if t["id"] == token_id)
    assert shown["name"] == "gpu-host-1" and shown["revoked"] is False and "token" not in shown

    # only an admin may revoke
    assert api.client.delete(f"/v1/tokens/{token_id}", headers=headers).status_code == 403
    assert (
        api.client.delete(f"/v1/tokens/{token_id}", headers=api.harness.submit).status_code == 403
    )
    revoked = api.client.delete(f"/v1/tokens/{token_id}", headers=api.harness.admin)
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    again = api.client.delete(f"/v1/tokens/{token_id}", headers=api.harness.admin)
    assert again.status_code == 200 and again.json()["revoked"] is True

    lease_id = lease.json()["lease_id"]
    for response in (
        _register(api, headers),
        api.client.post(f"/v1/leases/{lease_id}/heartbeat", json={}, headers=headers),
        api.client.post(
            f"/v1/leases/{lease_id}/results",
            json={"final": True, "error": "x", "measurements": []},
            headers=headers,
        ),
        api.client.get("/v1/jobs", headers=headers),  # a revoked token cannot even read
    ):
        assert response.status_code == 401, response.text
        assert response.json()["detail"] == "unknown or revoked token"


def test_revoking_an_unknown_or_impossible_id(api: Any) -> None:
    assert api.client.delete("/v1/tokens/999999", headers=api.harness.admin).status_code == 404
    for ident in ("0", "-1", str(2**31), str(2**70), "abc"):
        response = api.client.delete(f"/v1/tokens/{ident}", headers=api.harness.admin)
        assert response.status_code == 422, (ident, response.text)


def test_tunehub_token_revoke(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = _cli(
        ["token", "create", "--name", "gpu-host-2", "--scope", "worker", "--url", database_url],
        capsys,
    )
    assert code == 0
    token = out.strip()
    code, out, _ = _cli(["token", "list", "--url", database_url], capsys)
    assert code == 0 and "gpu-host-2" in out and "active" in out and token not in out
    from service.store.db import make_engine, make_sessionmaker
    from service.store.tokens import authenticate, list_tokens

    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            (row,) = [t for t in list_tokens(session) if t.name == "gpu-host-2"]
            token_id = row.id
        code, out, _ = _cli(["token", "revoke", str(token_id), "--url", database_url], capsys)
        assert code == 0 and f"token {token_id} (gpu-host-2, worker) revoked" in out
        with make_sessionmaker(engine)() as session:
            assert authenticate(session, token) is None
        code, out, _ = _cli(["token", "revoke", str(token_id), "--url", database_url], capsys)
        assert code == 0 and "was revoked already" in out
        code, out, _ = _cli(["token", "list", "--url", database_url], capsys)
        assert "revoked" in out
    finally:
        engine.dispose()
    code, _, err = _cli(["token", "revoke", "424242", "--url", database_url], capsys)
    assert code == 2 and "token 424242 not found" in err


def test_tunehub_token_devices(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(
        ["token", "create", "--name", "gpu-host-3", "--scope", "worker", "--url", database_url],
        capsys,
    )
    from service.store.db import make_engine, make_sessionmaker
    from service.store.tokens import list_tokens

    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            (row,) = [t for t in list_tokens(session) if t.name == "gpu-host-3"]
            token_id = str(row.id)
    finally:
        engine.dispose()
    uid = "ab" * 16
    key = "cuda:NVIDIA H200:sm_90:132"
    code, out, _ = _cli(
        ["token", "devices", token_id, f"{key}@{uid}", key, "--url", database_url], capsys
    )
    assert code == 0 and out.split("\n")[:2] == [f"{key}@{uid}", key]
    code, out, _ = _cli(["token", "devices", token_id, "--url", database_url], capsys)
    assert code == 0 and f"{key}@{uid}" in out
    code, _, err = _cli(["token", "devices", token_id, "H200", "--url", database_url], capsys)
    assert code == 2 and "not a device key" in err
    code, out, _ = _cli(["token", "devices", token_id, "--clear", "--url", database_url], capsys)
    assert code == 0 and "may serve any device" in out
