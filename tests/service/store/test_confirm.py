"""Optional confirmation: a winner is served as confirmed only once a worker of another host
(another machine and physical device, not merely another token), on the same device key,
re-measured it within the tie band (service.store.confirm)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.cli.output import best_answer_lines
from service.schemas.configs import BestConfigOut
from service.settings import Settings
from service.store.tokens import create_token

QUERY = {"op": "reduce", "dtype": "f32", "m": 1024, "k": 4096, "kind": "sum"}


def host_identity(machine: str, *devices: str) -> dict[str, Any]:
    """A registration's host identity: a machine (fingerprint) and its physical devices."""
    fingerprint = hashlib.sha256(machine.encode()).hexdigest()
    return {"fingerprint": fingerprint, "device_uids": [f"{machine}-{d}" for d in devices]}


class Host:
    """One host: its own worker token and a worker registered with it, with the host's
    identity (by default its own machine, named like the host)."""

    def __init__(
        self, api: Any, name: str, device: dict[str, Any], host: dict[str, Any] | None = None
    ) -> None:
        with api.harness.sessionmaker() as session:
            token = create_token(session, f"host-{name}", ["worker"])
            session.commit()
        self.api, self.device = api, device
        self.headers = {"Authorization": f"Bearer {token}"}
        self.host = host or host_identity(name, "cpu0")
        response = api.client.post(
            "/v1/workers",
            json={"name": name, "devices": [device], "host": self.host},
            headers=self.headers,
        )
        assert response.status_code == 201, response.text
        self.worker_id = response.json()["id"]

    def lease(self) -> dict[str, Any] | None:
        response = self.api.client.post(
            "/v1/leases", json={"worker_id": self.worker_id, "backends": ["cpu"]},
            headers=self.headers,
        )  # fmt: skip
        if response.status_code == 204:
            return None
        assert response.status_code == 200, response.text
        return response.json()

    def upload(self, lease: dict[str, Any], measurements: list[dict[str, Any]]) -> Any:
        body = {
            "device": self.device,
            "toolchain": self.api.TOOLCHAIN,
            "measurements": measurements,
            "final": True,
        }
        response = self.api.client.post(
            f"/v1/leases/{lease['lease_id']}/results", json=body, headers=self.headers
        )
        assert response.status_code == 200, response.text
        return response.json()


def _best(api: Any) -> dict[str, Any]:
    response = api.best(**QUERY)
    assert response.status_code == 200, response.text
    return response.json()


def _query_confirmed(api: Any) -> bool:
    query = {"op": "reduce", "dtype": "f32", "problem": {"m": 1024, "k": 4096, "kind": "sum"}}
    response = api.client.post("/v1/configs/query", json={"queries": [query]})
    assert response.status_code == 200, response.text
    return bool(response.json()["results"][0]["result"]["confirmed"])


def test_a_second_host_confirms_the_winner_within_the_tie_band(api: Any) -> None:
    first, second = Host(api, "a", api.CPU_DEVICE), Host(api, "b", api.CPU_DEVICE)
    job = api.submit(confirm=2)
    assert job["confirm"] == 2
    lease = first.lease()
    assert lease is not None
    first.upload(lease, [api.measurement("x", 5.0), api.measurement("y", 9.0)])
    assert _best(api)["confirmed"] is False and not _query_confirmed(api)
    shown = api.get_job(job["id"])
    assert shown["status"] == "running"  # waits for the re-measuring task
    remeasure = [p for p in shown["problems"] if p["confirm_of"]]
    assert len(remeasure) == 1 and remeasure[0]["status"] == "queued"

    # the measuring host cannot confirm itself, not even with a second worker of its token
    assert first.lease() is None
    twin = api.client.post(
        "/v1/workers",
        json={"name": "a2", "devices": [api.CPU_DEVICE], "host": first.host},
        headers=first.headers,
    ).json()["id"]
    first.worker_id = twin
    assert first.lease() is None
    # nor can a host with another device key
    other = {**api.CPU_DEVICE, "name": "Other CPU", "sm_count": 4}
    assert Host(api, "c", other).lease() is None

    lease = second.lease()
    assert lease is not None and lease["task"]["problem"] == {"m": 1024, "k": 4096, "kind": "sum"}
    answer = second.upload(lease, [api.measurement("x", 5.05), api.measurement("y", 9.1)])
    assert answer["winner"]["variant_name"] == "x"
    best = _best(api)
    assert best["variant_name"] == "x" and best["median_us"] == 5.0
    assert best["confirmed"] is True and _query_confirmed(api)
    assert api.get_job(job["id"])["status"] == "done"
    # `tunehub best` says so
    lines = best_answer_lines(BestConfigOut.model_validate(best))
    assert "  confirmed   yes: re-measured on another host" in lines


def test_a_remeasurement_outside_the_tie_band_does_not_confirm(api: Any) -> None:
    first, second = Host(api, "a", api.CPU_DEVICE), Host(api, "b", api.CPU_DEVICE)
    job = api.submit(confirm=2)
    first.upload(first.lease(), [api.measurement("x", 5.0), api.measurement("y", 5.5)])
    # the second host finds x 4% slower: not the same speed, so not confirmed
    second.upload(second.lease(), [api.measurement("x", 5.2), api.measurement("y", 5.6)])
    best = _best(api)
    assert best["variant_name"] == "x" and best["confirmed"] is False
    assert api.get_job(job["id"])["status"] == "done"


def test_a_new_winner_is_unconfirmed_until_remeasured(api: Any) -> None:
    first, second = Host(api, "a", api.CPU_DEVICE), Host(api, "b", api.CPU_DEVICE)
    api.submit(confirm=2)
    first.upload(first.lease(), [api.measurement("x", 5.0)])
    second.upload(second.lease(), [api.measurement("x", 5.0)])
    assert _best(api)["confirmed"] is True
    # a later job (no confirmation asked) finds a much faster variant: served unconfirmed
    api.submit()
    second.upload(second.lease(), [api.measurement("z", 2.0)])
    best = _best(api)
    assert best["variant_name"] == "z" and best["confirmed"] is False
    # the other host measuring it within the band confirms it, whatever job it ran
    api.submit()
    first.upload(first.lease(), [api.measurement("z", 2.02)])
    assert _best(api)["confirmed"] is True


def test_without_confirmation_no_remeasuring_task_is_queued(api: Any) -> None:
    first, second = Host(api, "a", api.CPU_DEVICE), Host(api, "b", api.CPU_DEVICE)
    job = api.submit()
    assert job["confirm"] == 1
    first.upload(first.lease(), [api.measurement("x", 5.0)])
    assert api.get_job(job["id"])["status"] == "done"
    assert second.lease() is None
    assert _best(api)["confirmed"] is False


@pytest.fixture
def confirming_api(api: Any, settings: Settings) -> Iterator[Any]:
    """The API driver over an app started with TUNEHUB_CONFIRM=2."""
    app = create_app(settings.model_copy(update={"confirm": 2}))
    with TestClient(app) as client:
        api.client = client
        yield api


def test_the_server_setting_asks_every_job_for_confirmation(confirming_api: Any) -> None:
    api = confirming_api
    first, second = Host(api, "a", api.CPU_DEVICE), Host(api, "b", api.CPU_DEVICE)
    job = api.submit()
    assert job["confirm"] == 2
    first.upload(first.lease(), [api.measurement("x", 5.0)])
    assert api.get_job(job["id"])["status"] == "running"
    second.upload(second.lease(), [api.measurement("x", 4.95)])
    assert _best(api)["confirmed"] is True
    assert api.get_job(job["id"])["status"] == "done"
    # a job may still opt out
    assert api.submit(confirm=1)["confirm"] == 1


def test_confirm_must_be_1_or_2(api: Any) -> None:
    response = api.client.post("/v1/jobs", json=api.job_body(confirm=3), headers=api.harness.submit)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "confirm"]


def test_a_slot_of_another_device_does_not_take_the_remeasuring_task(api: Any) -> None:
    other = {**api.CPU_DEVICE, "name": "Other CPU", "sm_count": 4}
    first = Host(api, "a", api.CPU_DEVICE)
    response = api.client.post(
        "/v1/workers",
        json={"name": "b", "devices": [other, api.CPU_DEVICE], "host": host_identity("b", "c")},
        headers=_worker_headers(api, "b"),
    )
    assert response.status_code == 201, response.text
    second_id, second_headers = response.json()["id"], response.request.headers
    api.submit(confirm=2)
    first.upload(first.lease(), [api.measurement("x", 5.0)])

    def lease(device: dict[str, Any]) -> int:
        body = {"worker_id": second_id, "backends": ["cpu"], "device": device}
        auth = {"Authorization": second_headers["Authorization"]}
        return api.client.post("/v1/leases", json=body, headers=auth).status_code

    assert lease(other) == 204  # the other card's slot
    assert lease(api.CPU_DEVICE) == 200  # the winner's device key


def _worker_headers(api: Any, name: str) -> dict[str, str]:
    with api.harness.sessionmaker() as session:
        token = create_token(session, f"host-{name}", ["worker"])
        session.commit()
    return {"Authorization": f"Bearer {token}"}


# -- one machine is one opinion, whatever its tokens ------------------------------------------


def test_two_tokens_on_one_machine_do_not_confirm(api: Any) -> None:
    """Every `tunehub serve` start mints a new local-worker token: the same machine measuring
    again is a re-measure, stored but never a confirmation."""
    machine = host_identity("laptop", "cpu0")
    first = Host(api, "serve-1", api.CPU_DEVICE, host=machine)
    again = Host(api, "serve-2", api.CPU_DEVICE, host=machine)
    job = api.submit(confirm=2)
    first.upload(first.lease(), [api.measurement("x", 5.0)])
    assert again.lease() is None  # the re-measuring task waits for another host
    assert "waiting for another host" in (api.get_job(job["id"])["waiting_for"] or "")
    api.submit()  # a plain re-tune on the same machine
    again.upload(again.lease(), [api.measurement("x", 5.01)])
    assert _best(api)["confirmed"] is False
    measured = api.client.get("/v1/measurements", params={"op": "reduce", "dtype": "f32", **QUERY})
    assert len([m for m in measured.json()["measurements"] if m["variant_name"] == "x"]) == 2
    # another machine confirms it
    other = Host(api, "other", api.CPU_DEVICE)
    other.upload(other.lease(), [api.measurement("x", 4.98)])
    assert _best(api)["confirmed"] is True
    assert api.get_job(job["id"])["status"] == "done"


def test_another_machine_sharing_the_physical_device_does_not_confirm(api: Any) -> None:
    """Two containers of one GPU host: other machine ids, the same card."""
    first = Host(api, "a", api.CPU_DEVICE, host=host_identity("container-1", "gpu"))
    shared = host_identity("container-2")
    shared["device_uids"] = first.host["device_uids"]
    second = Host(api, "b", api.CPU_DEVICE, host=shared)
    api.submit(confirm=2)
    first.upload(first.lease(), [api.measurement("x", 5.0)])
    assert second.lease() is None
    api.submit()
    second.upload(second.lease(), [api.measurement("x", 5.0)])
    assert _best(api)["confirmed"] is False


def test_a_worker_without_a_host_identity_never_confirms(api: Any) -> None:
    first = Host(api, "a", api.CPU_DEVICE)
    api.submit(confirm=2)
    first.upload(first.lease(), [api.measurement("x", 5.0)])
    old_agent = api.register(api.CPU_DEVICE, name="old-agent")  # no "host" field
    assert api.lease(old_agent) is None  # it may not take the re-measuring task
    api.submit()
    leased = api.lease(old_agent)
    api.upload(leased["lease_id"], [api.measurement("x", 5.0)])
    assert _best(api)["confirmed"] is False


def test_a_host_identity_is_validated(api: Any) -> None:
    body = {"name": "w", "devices": [api.CPU_DEVICE], "host": {"fingerprint": "not hex!"}}
    response = api.client.post("/v1/workers", json=body, headers=api.harness.worker)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:3] == ["body", "host", "fingerprint"]
