"""A job belongs to the token that submitted it: anyone who may read sees it, only that token
or an admin cancels it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from service.store.models import Job


def _token(api: Any, name: str, scope: str = "submit") -> dict[str, str]:
    response = api.client.post(
        "/v1/tokens", json={"name": name, "scopes": [scope]}, headers=api.harness.admin
    )
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _submit(api: Any, headers: dict[str, str]) -> dict[str, Any]:
    response = api.client.post("/v1/jobs", json=api.job_body(), headers=headers)
    assert response.status_code == 202, response.text
    return dict(response.json())


def test_only_the_submitting_token_or_an_admin_cancels_a_job(api: Any) -> None:
    alice, bob = _token(api, "alice"), _token(api, "bob")
    job = _submit(api, alice)
    assert job["submitted_by"] == "alice"
    assert api.get_job(job["id"])["submitted_by"] == "alice"
    listed = api.client.get("/v1/jobs").json()["jobs"]
    assert [j["submitted_by"] for j in listed] == ["alice"]  # everyone who may read sees it

    refused = api.client.delete(f"/v1/jobs/{job['id']}", headers=bob)
    assert refused.status_code == 403
    assert "only the token that submitted a job, or an admin token" in refused.json()["detail"]
    assert api.get_job(job["id"])["status"] == "queued"
    worker = _token(api, "host", "worker")
    assert api.client.delete(f"/v1/jobs/{job['id']}", headers=worker).status_code == 403

    cancelled = api.client.delete(f"/v1/jobs/{job['id']}", headers=alice)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    other = _submit(api, bob)
    by_admin = api.client.delete(f"/v1/jobs/{other['id']}", headers=api.harness.admin)
    assert by_admin.status_code == 200 and by_admin.json()["status"] == "cancelled"


def test_a_job_stored_before_owners_is_cancelled_by_an_admin_only(api: Any) -> None:
    job = _submit(api, api.harness.submit)
    with api.harness.sessionmaker() as session:
        session.execute(update(Job).values(token_id=None))
        session.commit()
    assert api.get_job(job["id"])["submitted_by"] is None
    response = api.client.delete(f"/v1/jobs/{job['id']}", headers=api.harness.submit)
    assert response.status_code == 403 and "stored before owners" in response.json()["detail"]
    assert api.client.delete(f"/v1/jobs/{job['id']}", headers=api.harness.admin).status_code == 200
