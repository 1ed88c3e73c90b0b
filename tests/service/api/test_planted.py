"""A worker token cannot plant a winner: impossible measurements are refused (service.store
.bounds), variant ids are sha256s, a record-beating winner is served only once another host
confirms it (TUNEHUB_RECORD_MARGIN), and an admin can pin worker tokens to devices."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings
from service.store.tokens import SCOPES, create_token

GEMM = {"op": "gemm", "dtype": "f16", "layout": "rcr"}
BIG = {"m": 4096, "n": 4096, "k": 4096}
REDUCE = {"op": "reduce", "dtype": "f32", "m": 1024, "k": 4096, "kind": "sum"}


@pytest.fixture
def policy_api(api: Any, settings: Settings) -> Iterator[Callable[..., Any]]:
    """``policy_api(**settings)``: the API driver over an app with those settings."""
    clients: list[TestClient] = []

    def make(**changes: Any) -> Any:
        app = create_app(settings.model_copy(update=changes))
        with app.state.sessionmaker() as session:
            tokens = {s: create_token(session, f"policy-{s}", [s]) for s in SCOPES}
            session.commit()
        client = TestClient(app)
        client.__enter__()
        clients.append(client)
        headers = {s: {"Authorization": f"Bearer {t}"} for s, t in tokens.items()}
        harness = SimpleNamespace(
            client=client, sessionmaker=app.state.sessionmaker, tokens=tokens, **headers
        )
        return type(api)(harness)

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def _uid(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Host:
    """A host with its own worker token, registered with a host identity."""

    def __init__(self, api: Any, name: str, device: dict[str, Any], uid: str | None = None):
        response = api.client.post(
            "/v1/tokens", json={"name": f"host-{name}", "scopes": ["worker"]},
            headers=api.harness.admin,
        )  # fmt: skip
        assert response.status_code == 201, response.text
        self.token_id = response.json()["id"]
        self.api, self.device, self.name = api, device, name
        self.headers = {"Authorization": f"Bearer {response.json()['token']}"}
        self.uid = uid or _uid(f"{name}-gpu0")
        self.worker_id: str | None = None

    def register(self, expect: int = 201) -> Any:
        response = self.api.client.post(
            "/v1/workers",
            json={
                "name": self.name,
                "devices": [self.device],
                "host": {
                    "fingerprint": _uid(f"machine-{self.name}") * 2,
                    "device_uids": [self.uid],
                },
            },
            headers=self.headers,
        )
        assert response.status_code == expect, response.text
        if expect == 201:
            self.worker_id = response.json()["id"]
        return response

    def lease(self) -> dict[str, Any] | None:
        response = self.api.client.post(
            "/v1/leases",
            json={"worker_id": self.worker_id, "backends": [self.device["backend"]]},
            headers=self.headers,
        )
        if response.status_code == 204:
            return None
        assert response.status_code == 200, response.text
        return dict(response.json())

    def upload(self, lease: dict[str, Any], measurements: list[dict[str, Any]], expect: int = 200):
        response = self.api.client.post(
            f"/v1/leases/{lease['lease_id']}/results",
            json={
                "device": self.device,
                "toolchain": self.api.TOOLCHAIN,
                "measurements": measurements,
                "final": True,
            },
            headers=self.headers,
        )
        assert response.status_code == expect, response.text
        return response.json()


def _timed(name: str, us: float) -> dict[str, Any]:
    return {
        "variant_id": f"sha-{name}",
        "variant_name": name,
        "params": {"name": name},
        "outcome": "ok",
        "median_us": us,
        "p20_us": us,
        "p80_us": us * 1.01,
    }


def _gemm_job(api: Any, problem: dict[str, int] | None = None) -> None:
    api.submit(**{k: v for k, v in GEMM.items()}, problems=[problem or BIG],
               device={"backend": "cuda"})  # fmt: skip


# -- impossible measurements ------------------------------------------------------------------


def test_a_planted_impossible_winner_is_refused_and_the_real_one_stays(api: Any) -> None:
    honest = Host(api, "honest", api.H200)
    honest.register()
    _gemm_job(api)
    honest.upload(honest.lease(), [_timed("real", 359.0)])  # 766 TFLOP/s: a fast H200
    best = api.best(**GEMM, **BIG).json()
    assert best["median_us"] == 359.0

    planter = Host(api, "planter", api.H200)  # another token, the same device key
    planter.register()
    _gemm_job(api)
    lease = planter.lease()
    for us, says in ((1e-6, "no kernel runs that fast"), (50.0, "over the device's f16 peak")):
        error = planter.upload(lease, [_timed("real", us)], expect=422)["detail"][0]
        assert error["loc"][:3] == ["body", "measurements", 0]
        assert error["loc"][3] in ("p20_us", "median_us") and says in error["msg"], error
    assert api.best(**GEMM, **BIG).json()["median_us"] == 359.0


def test_memory_bound_problems_are_held_to_the_copy_rate(api: Any) -> None:
    host = Host(api, "h", api.H200)
    host.register()
    api.submit(op="reduce", dtype="f16", problems=[{"m": 65536, "k": 4096}],
               device={"backend": "cuda"})  # fmt: skip
    lease = host.lease()
    # 537 MB read and written: 20 us would be 27,000 GB/s on a 4,800 GB/s part
    error = host.upload(lease, [_timed("fast", 20.0)], expect=422)["detail"][0]
    assert "copy rate of 4,800 GB/s (product)" in error["msg"]
    assert host.upload(lease, [_timed("fast", 140.0)])["task_status"] == "done"


def test_an_admin_records_a_device_s_rates(api: Any) -> None:
    devices = api.client.get("/v1/devices").json()["devices"]
    assert devices == []
    host = Host(api, "cpu", api.CPU_DEVICE)
    host.register()
    (entry,) = api.client.get("/v1/devices").json()["devices"]
    assert entry["rates"]["source"] == "none" and entry["device"]["name"] == "Test CPU 9000"
    rates = {"copy_gbps": 10.0, "peak_tflops": {"f32": 1.0}}
    url = f"/v1/devices/{entry['id']}/rates"
    assert api.client.put(url, json=rates, headers=host.headers).status_code == 403
    recorded = api.client.put(url, json=rates, headers=api.harness.admin)
    assert recorded.status_code == 200 and recorded.json()["rates"]["source"] == "recorded"
    api.submit()
    lease = host.lease()
    # 16.8 MB in 100 us is 168 GB/s: more than this CPU's recorded 10 GB/s allows
    error = host.upload(lease, [_timed("a", 100.0)], expect=422)["detail"][0]
    assert "copy rate of 10 GB/s (recorded)" in error["msg"]
    cleared = api.client.put(url, json={}, headers=api.harness.admin)
    assert cleared.json()["rates"]["source"] == "none"
    assert host.upload(lease, [_timed("a", 100.0)])["task_status"] == "done"


def test_an_impossible_import_is_refused(api: Any) -> None:
    host = Host(api, "h", api.H200)
    host.register()
    _gemm_job(api)
    host.upload(host.lease(), [_timed("real", 359.0)])
    line = api.client.get("/v1/export").text.splitlines()[0]
    planted = line.replace('"median_us": 359.0', '"median_us": 1e-09').replace(
        '"p20_us": 359.0', '"p20_us": 1e-09'
    )
    response = api.client.post(
        "/v1/import", content=planted + "\n" + line + "\n", headers=api.harness.admin
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["refused"] == 1 and answer["duplicates"] == 1
    assert "no kernel runs that fast" in answer["errors"][0]["msg"]


# -- variant ids ------------------------------------------------------------------------------


def test_a_variant_id_must_be_a_sha256(policy_api: Callable[..., Any]) -> None:
    strict = policy_api(verify_variants=True)
    host = Host(strict, "h", strict.CPU_DEVICE)
    host.register()
    strict.submit()
    real = {"variant_name": "reduce_f32_p4_a2_u2", "params": {"pack": 4, "acc": 2, "unroll": 2},
            "outcome": "ok", "median_us": 50.0}  # fmt: skip
    lease = host.lease()
    error = host.upload(lease, [{**real, "variant_id": "not-a-hash"}], expect=422)["detail"][0]
    assert error["loc"] == ["body", "measurements", 0, "variant_id"]
    assert "not a variant id" in error["msg"]
    assert host.upload(lease, [{**real, "variant_id": "c" * 64}])["task_status"] == "done"


# -- records wait for another host ------------------------------------------------------------


def test_a_record_is_served_only_once_another_host_confirms_it(
    policy_api: Callable[..., Any],
) -> None:
    team = policy_api(record_margin=0.3)
    alpha, beta = Host(team, "alpha", team.CPU_DEVICE), Host(team, "beta", team.CPU_DEVICE)
    alpha.register()
    beta.register()
    team.submit()
    alpha.upload(alpha.lease(), [_timed("steady", 40.0)])
    assert team.best(**REDUCE).json()["median_us"] == 40.0  # nothing to beat: served

    job = team.submit()
    answer = alpha.upload(alpha.lease(), [_timed("steady", 40.0), _timed("record", 10.0)])
    assert answer["winner"]["variant_name"] == "record"
    held = team.best(**REDUCE).json()
    assert held["variant_name"] == "steady" and held["median_us"] == 40.0  # not served yet
    shown = team.get_job(job["id"])
    assert shown["status"] == "running" and "another host" in shown["waiting_for"]
    assert alpha.lease() is None  # the measuring host cannot confirm its own record

    confirming = beta.lease()
    assert confirming is not None and confirming["task"]["job_id"] == job["id"]
    beta.upload(confirming, [_timed("record", 10.1), _timed("steady", 40.2)])
    served = team.best(**REDUCE).json()
    assert served["variant_name"] == "record" and served["confirmed"] is True
    assert team.get_job(job["id"])["status"] == "done"


def test_a_record_another_host_cannot_reproduce_is_dropped(policy_api: Callable[..., Any]) -> None:
    team = policy_api(record_margin=0.3)
    alpha, beta = Host(team, "alpha", team.CPU_DEVICE), Host(team, "beta", team.CPU_DEVICE)
    alpha.register()
    beta.register()
    team.submit()
    alpha.upload(alpha.lease(), [_timed("steady", 40.0)])
    team.submit()
    alpha.upload(alpha.lease(), [_timed("steady", 40.0), _timed("record", 10.0)])
    beta.upload(beta.lease(), [_timed("record", 41.0), _timed("steady", 39.9)])
    best = team.best(**REDUCE).json()
    assert best["variant_name"] == "steady"
    from service.store.models import BestConfig

    with team.harness.sessionmaker() as session:
        assert session.query(BestConfig).one().pending_measurement_id is None


def test_without_the_policy_a_faster_winner_is_served_at_once(api: Any) -> None:
    alpha = Host(api, "alpha", api.CPU_DEVICE)
    alpha.register()
    api.submit()
    alpha.upload(alpha.lease(), [_timed("steady", 40.0)])
    api.submit()
    alpha.upload(alpha.lease(), [_timed("steady", 40.0), _timed("record", 10.0)])
    assert api.best(**REDUCE).json()["variant_name"] == "record"


# -- tokens pinned to devices -----------------------------------------------------------------


def test_an_admin_pins_a_worker_token_to_its_devices(api: Any) -> None:
    h200 = "cuda:NVIDIA H200:sm_90:132"
    host = Host(api, "gpu1", api.H200)
    url = f"/v1/tokens/{host.token_id}/devices"
    bad = api.client.put(url, json={"devices": ["H200"]}, headers=api.harness.admin)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "devices", 0]
    assert api.client.put(url, json={"devices": [h200]}, headers=host.headers).status_code == 403
    pinned = api.client.put(
        url, json={"devices": [f"{h200}@{host.uid}"]}, headers=api.harness.admin
    )
    assert pinned.status_code == 200 and pinned.json()["devices"] == [f"{h200}@{host.uid}"]

    # a CPU-only machine claiming to be an H200 with this token: not its physical device
    impostor = Host(api, "cpu-box", api.H200, uid=_uid("cpu-box-cpu"))
    impostor.headers = host.headers
    assert "physical devices" in impostor.register(expect=403).json()["detail"]
    # nor may the token register any other device key
    other = Host(api, "other", api.CPU_DEVICE)
    other.headers = host.headers
    assert "may not serve device cpu:Test CPU 9000" in other.register(expect=403).json()["detail"]
    host.register()
    workers = api.client.get("/v1/workers", headers=api.harness.admin).json()["workers"]
    assert [w["device_uids"] for w in workers if w["name"] == "gpu1"] == [[host.uid]]
    listed = api.client.get("/v1/tokens", headers=api.harness.admin).json()["tokens"]
    assert [t["devices"] for t in listed if t["id"] == host.token_id] == [[f"{h200}@{host.uid}"]]

    # a map changed after registration holds at upload
    _gemm_job(api)
    lease = host.lease()
    api.client.put(url, json={"devices": ["cuda:NVIDIA H100:sm_90:132"]}, headers=api.harness.admin)
    assert "may not serve device" in host.upload(lease, [_timed("a", 400.0)], expect=403)["detail"]


def test_a_required_map_leaves_an_unmapped_worker_token_nothing(
    policy_api: Callable[..., Any],
) -> None:
    team = policy_api(device_map_required=True)
    host = Host(team, "gpu1", team.H200)
    assert "mapped to no device" in host.register(expect=403).json()["detail"]
    team.client.put(
        f"/v1/tokens/{host.token_id}/devices",
        json={"devices": ["cuda:NVIDIA H200:sm_90:132"]},
        headers=team.harness.admin,
    )
    host.register()


def test_timings_out_of_order_are_422(api: Any) -> None:
    host = Host(api, "h", api.CPU_DEVICE)
    host.register()
    api.submit()
    bad = {**_timed("a", 50.0), "p20_us": 60.0}
    error = host.upload(host.lease(), [bad], expect=422)["detail"][0]
    assert error["loc"] == ["body", "measurements", 0]
    assert "p20_us (60) is above median_us (50)" in error["msg"]
