"""A retried upload is the same upload (said so: ``replayed``, nothing added) or, with other
content under a variant the lease stored, a 409; nothing is silently dropped."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from service.store.models import Measurement


def _lease(api: Any) -> str:
    api.submit()
    leased = api.lease(api.register())
    assert leased is not None
    return str(leased["lease_id"])


def _rows(api: Any) -> list[tuple[str, float | None, str]]:
    with api.harness.sessionmaker() as session:
        return [
            tuple(row)
            for row in session.execute(
                select(Measurement.variant_id, Measurement.median_us, Measurement.log).order_by(
                    Measurement.variant_id
                )
            )
        ]


def test_the_same_batch_again_is_said_to_be_a_replay(api: Any) -> None:
    lease_id = _lease(api)
    batch = [api.measurement("a", 10.0), api.measurement("b", None, outcome="timeout")]
    first = api.upload(lease_id, batch, final=False)
    assert (first["stored"], first["replayed"], first["kept"]) == (2, 0, 0)
    again = api.upload(lease_id, batch, final=False)
    assert (again["stored"], again["replayed"], again["kept"]) == (0, 2, 0)
    mixed = api.upload(lease_id, [*batch, api.measurement("c", 9.0)], final=False)
    assert (mixed["stored"], mixed["replayed"]) == (1, 2)
    assert len(_rows(api)) == 3


def test_other_content_under_a_stored_variant_is_a_409(api: Any) -> None:
    lease_id = _lease(api)
    api.upload(lease_id, [api.measurement("a", 10.0)], final=False)
    before = _rows(api)
    for changed, field in (
        (api.measurement("a", 1e-6), "median_us"),
        (api.measurement("a", 10.0, log="another log"), "log"),
        (api.measurement("a", 10.0, outcome="wrong_result"), "outcome"),
        ({**api.measurement("a", 10.0), "params": {"pack": 8, "name": "a"}}, "params"),
        (api.measurement("a", 10.0, provenance={"clock": 1}), "provenance"),
    ):
        response = api.client.post(
            f"/v1/leases/{lease_id}/results",
            json={
                "device": api.CPU_DEVICE,
                "toolchain": api.TOOLCHAIN,
                "measurements": [api.measurement("z", 3.0), changed],
                "final": False,
            },
            headers=api.harness.worker,
        )
        assert response.status_code == 409, (field, response.text)
        detail = response.json()["detail"]
        assert "measurements[1]: variant sha-a" in detail and field in detail, detail
    other_toolchain = {**api.TOOLCHAIN, "compiler": "clang 18"}
    response = api.client.post(
        f"/v1/leases/{lease_id}/results",
        json={
            "device": api.CPU_DEVICE,
            "toolchain": other_toolchain,
            "measurements": [api.measurement("a", 10.0)],
        },
        headers=api.harness.worker,
    )
    assert response.status_code == 409 and "toolchain" in response.json()["detail"]
    assert _rows(api) == before  # nothing stored, nothing changed


def test_a_final_upload_retried_is_a_replay_and_a_changed_one_a_409(api: Any) -> None:
    lease_id = _lease(api)
    final = [api.measurement("a", 10.0), api.measurement("b", 4.0)]
    answer = api.upload(lease_id, final)
    assert answer["task_status"] == "done" and answer["stored"] == 2
    again = api.upload(lease_id, final)
    assert again["replayed"] == 2 and again["stored"] == 0
    assert again["winner"] == answer["winner"]
    changed = [api.measurement("a", 10.0), api.measurement("b", 1e-6)]
    api.upload(lease_id, changed, expect=409)
    with api.harness.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(Measurement)) == 2


def test_a_retiming_still_replaces_the_timing(api: Any) -> None:
    lease_id = _lease(api)
    api.upload(lease_id, [api.measurement("a", 10.0)], final=False)
    retimed = api.upload(lease_id, [api.measurement("a", 9.0, retimed=True)], final=False)
    assert retimed["stored"] == 1 and retimed["replayed"] == 0
    assert _rows(api)[0][1] == 9.0
