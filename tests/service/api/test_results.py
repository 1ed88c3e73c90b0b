"""Result uploads: partial batches, final, the task's winner and the best-config tie band."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from service.store.models import BestConfig, Measurement
from tests.service.conftest import H200


def _best_median(api: Any, **query: Any) -> float:
    params = {"op": "reduce", "dtype": "f32", "m": 1024, "k": 4096, "kind": "sum", **query}
    response = api.best(**params)
    assert response.status_code == 200, response.text
    return response.json()["median_us"]


def test_partial_batches_then_final(api: Any) -> None:
    job = api.submit()
    leased = api.lease(api.register())
    lease_id = leased["lease_id"]
    first = api.upload(lease_id, [api.measurement("a", 10.0)], final=False)
    assert first == {
        "stored": 1,
        "replayed": 0,
        "kept": 0,
        "winner": None,
        "task_status": "running",
    }
    final = api.upload(
        lease_id,
        [
            api.measurement("b", 4.0),
            api.measurement("c", None, outcome="compile_error", log="error: boom"),
            api.measurement("d", 1.0, outcome="wrong_result"),
        ],
    )
    assert final["stored"] == 3 and final["task_status"] == "done"
    assert final["winner"]["variant_name"] == "b"  # wrong_result never wins
    shown = api.get_job(job["id"])
    assert shown["status"] == "done"
    assert shown["progress"]["tasks_done"] == 1
    winner = shown["problems"][0]["winner"]
    assert winner["variant_name"] == "b" and winner["median_us"] == 4.0
    assert winner["params"] == {"pack": 4, "name": "b"}
    assert winner["throughput_unit"] == "GB/s"
    # a finished lease takes no more uploads
    api.upload(lease_id, [api.measurement("e", 1.0)], expect=409)


def test_results_for_an_unknown_lease_are_404(api: Any) -> None:
    api.upload("nope", [api.measurement("a", 1.0)], expect=404)


def test_failed_task_with_error(api: Any) -> None:
    job = api.submit(problems=[{"m": 8, "k": 8}, {"m": 16, "k": 16}])
    worker = api.register()
    first, second = api.lease(worker), api.lease(worker)
    # a bare failure report: blank device, no measurements
    response = api.client.post(
        f"/v1/leases/{first['lease_id']}/results",
        json={
            "device": {"backend": "cpu", "name": "", "arch": "", "sm_count": 0},
            "toolchain": {"compiler": "", "template_version": "", "libraries": {}},
            "measurements": [],
            "final": True,
            "error": "ToolchainError: g++ not found",
        },
        headers=api.harness.worker,
    )
    assert response.status_code == 200, response.text
    assert response.json()["task_status"] == "failed"
    assert api.get_job(job["id"])["status"] == "running"
    api.upload(second["lease_id"], [api.measurement("a", 3.0)])
    shown = api.get_job(job["id"])
    assert shown["status"] == "done"
    assert [p["status"] for p in shown["problems"]] == ["failed", "done"]
    assert shown["problems"][0]["error"] == "ToolchainError: g++ not found"


def test_every_task_failed_fails_the_job(api: Any) -> None:
    job = api.submit()
    leased = api.lease(api.register())
    api.upload(leased["lease_id"], [], error="DeviceError: lost")
    assert api.get_job(job["id"])["status"] == "failed"


def test_no_verified_candidate_leaves_no_best(api: Any) -> None:
    shown = api.tune([api.measurement("a", None, outcome="timeout")])
    assert shown["problems"][0]["winner"] is None
    assert shown["problems"][0]["status"] == "done"
    assert api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").status_code == 404


def test_measurements_need_a_complete_device(api: Any) -> None:
    api.submit()
    leased = api.lease(api.register())
    blank = {"backend": "cpu", "name": "", "arch": "", "sm_count": 0}
    api.upload(leased["lease_id"], [api.measurement("a", 1.0)], device=blank, expect=422)


def test_results_from_a_device_outside_the_selector_are_422(api: Any) -> None:
    api.submit(device={"backend": "cpu", "name": "Test CPU"})
    leased = api.lease(api.register())
    other = dict(api.CPU_DEVICE, name="Other CPU")
    response = api.client.post(
        f"/v1/leases/{leased['lease_id']}/results",
        json={
            "device": other,
            "toolchain": api.TOOLCHAIN,
            "measurements": [api.measurement("a", 1.0)],
            "final": True,
        },
        headers=api.harness.worker,
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "device"]


def test_retuning_inside_the_tie_band_keeps_the_winner(api: Any) -> None:
    api.tune([api.measurement("a", 10.0), api.measurement("b", 12.0)])
    assert _best_median(api) == 10.0
    # 1.5% faster: noise, the old winner stays, and the job status says so
    shown = api.tune([api.measurement("b", 9.85)])
    answer = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()
    assert answer["variant_name"] == "a" and answer["median_us"] == 10.0
    problem = shown["problems"][0]
    assert problem["winner"]["variant_name"] == "b"
    assert problem["kept_incumbent"]["variant_name"] == "a"
    # 5% faster: a real win
    shown = api.tune([api.measurement("b", 9.5)])
    assert shown["problems"][0]["kept_incumbent"] is None
    answer = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()
    assert answer["variant_name"] == "b" and answer["median_us"] == 9.5
    # slower re-runs never replace it
    api.tune([api.measurement("c", 20.0)])
    assert _best_median(api) == 9.5
    with api.harness.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(BestConfig)) == 1
        assert session.scalar(select(func.count()).select_from(Measurement)) == 5


def test_ties_inside_one_upload_break_by_name(api: Any) -> None:
    shown = api.tune([api.measurement("zeta", 10.0), api.measurement("alpha", 10.1)])
    assert shown["problems"][0]["winner"]["variant_name"] == "alpha"


def test_a_suspect_fastest_measurement_is_not_outranked_by_a_slower_clean_one(api: Any) -> None:
    # interference only slows a run down; the engine re-measured it before uploading
    shown = api.tune([api.measurement("fast", 5.0, suspect=True), api.measurement("clean", 8.0)])
    assert shown["problems"][0]["winner"]["variant_name"] == "fast"


def test_measurements_listing(api: Any) -> None:
    shown = api.tune(
        [
            api.measurement("slow", 30.0),
            api.measurement("broken", None, outcome="runtime_error"),
            api.measurement("fast", 10.0, provenance={"clock_mhz": 1980}),
        ]
    )
    by_job = api.client.get("/v1/measurements", params={"job_id": shown["id"]})
    assert by_job.status_code == 200
    items = by_job.json()["measurements"]
    assert [m["variant_name"] for m in items] == ["fast", "slow", "broken"]
    assert items[0]["provenance"] == {"clock_mhz": 1980}
    assert items[0]["device"]["key"] == "cpu:Test CPU 9000:x86_64-avx2:8"
    assert items[0]["toolchain"]["compiler"] == "g++ 12.2.0"
    by_problem = api.client.get(
        "/v1/measurements",
        params={
            "op": "reduce",
            "dtype": "f32",
            "m": 1024,
            "k": 4096,
            "kind": "sum",
            "device": "Test CPU",
        },
    ).json()["measurements"]
    assert [m["id"] for m in by_problem] == [m["id"] for m in items]
    other_shape = api.client.get(
        "/v1/measurements", params={"op": "reduce", "dtype": "f32", "m": 8, "k": 8}
    ).json()["measurements"]
    assert other_shape == []
    assert api.client.get("/v1/measurements").status_code == 422
    bad = api.client.get("/v1/measurements", params={"op": "reduce", "dtype": "f32", "m": 0})
    assert bad.status_code == 422


def test_the_incumbent_is_judged_by_its_measurement_in_the_same_job(api: Any) -> None:
    api.tune([api.measurement("a", 10.0), api.measurement("b", 12.0)])
    # the machine got slower: side by side b is 4.5% faster than a, so it replaces a,
    # although its median is above a's stored 10.0
    shown = api.tune([api.measurement("a", 11.0), api.measurement("b", 10.5)])
    assert shown["problems"][0]["kept_incumbent"] is None
    assert (
        api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()["variant_name"] == "b"
    )
    # the machine got faster: ab is 11% below b's stored median but ties b side by side,
    # and in a tie the incumbent wins (before the name)
    shown = api.tune([api.measurement("b", 9.0), api.measurement("ab", 8.9)])
    assert shown["problems"][0]["winner"]["variant_name"] == "b"
    assert shown["problems"][0]["winner"]["tie_set"] == ["b", "ab"]
    assert (
        api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()["variant_name"] == "b"
    )
    # an incumbent the job found broken is replaced by any verified winner
    shown = api.tune(
        [api.measurement("b", None, outcome="wrong_result"), api.measurement("d", 30.0)]
    )
    assert (
        api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()["variant_name"] == "d"
    )


def test_a_retimed_result_replaces_its_first_timing_and_decides_the_winner(api: Any) -> None:
    """The engine re-measures suspects and confirms near-ties after their first upload; the
    final upload sends those timings again (``retimed``), so the store's winner is picked from
    the same timings as the engine's, and no row is added."""
    api.submit()
    lease_id = api.lease(api.register())["lease_id"]
    api.upload(
        lease_id,
        [api.measurement("a", 10.0), api.measurement("b", 10.1, suspect=True)],
        final=False,
    )
    final = api.upload(lease_id, [api.measurement("b", 8.0, retimed=True)])
    assert final["winner"]["variant_name"] == "b" and final["winner"]["median_us"] == 8.0
    with api.harness.sessionmaker() as session:
        rows = session.scalars(select(Measurement).order_by(Measurement.variant_id)).all()
        assert [(m.variant_id, m.median_us, m.suspect) for m in rows] == [
            ("sha-a", 10.0, False),
            ("sha-b", 8.0, False),
        ]
    assert _best_median(api) == 8.0


def test_energy_per_launch_is_stored_with_the_measurement(api: Any) -> None:
    shown = api.tune(
        [api.measurement("metered", 5.0, energy_j=0.0123), api.measurement("cpu", 6.0)]
    )
    items = api.client.get("/v1/measurements", params={"job_id": shown["id"]}).json()[
        "measurements"
    ]
    by_name = {m["variant_name"]: m["energy_j"] for m in items}
    assert by_name == {"metered": 0.0123, "cpu": None}


def test_energy_job_winner_is_the_least_energy_verified_variant(api: Any) -> None:
    shown = api.tune(
        [
            api.measurement("fast_hot", 4.0, energy_j=0.030),
            api.measurement("slow_cool", 6.0, energy_j=0.020),
            api.measurement("wrong_cooler", 5.0, outcome="wrong_result", energy_j=0.001),
            api.measurement("unmetered", 3.0),
        ],
        device=H200,
        objective="energy",
    )
    assert shown["problems"][0]["winner"]["variant_name"] == "slow_cool"
    # best configs answer the time objective; an energy winner does not replace them
    answer = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum", backend="cuda")
    assert answer.status_code == 404


def test_best_says_which_objective_answered(api: Any) -> None:
    api.tune([api.measurement("timed", 5.0)])
    answer = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()
    assert answer["objective"] == "time" and answer["variant_name"] == "timed"


def test_a_challenger_within_noise_of_its_rounds_keeps_the_incumbent(api: Any) -> None:
    """Both timed in the same interleaved confirmation rounds: a median 2% lower whose round
    by round ratios to the incumbent swap sides is a tie, which the incumbent wins (the best
    config and the job's winner stay, the tie set names both); one faster beyond the band
    in every round replaces it."""
    from tuner.winner import ROUNDS_KEY

    def timed(name: str, rounds: list[float]) -> dict[str, Any]:
        return api.measurement(name, sorted(rounds)[2], provenance={ROUNDS_KEY: rounds})

    api.tune([api.measurement("a", 10.0), api.measurement("b", 12.0)])
    shown = api.tune(
        [timed("a", [10.0, 10.6, 9.9, 10.2, 10.1]), timed("b", [9.5, 10.7, 9.4, 10.3, 9.9])]
    )
    winner = shown["problems"][0]["winner"]
    assert winner["variant_name"] == "a" and winner["tie_set"] == ["a", "b"]
    best = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()
    assert best["variant_name"] == "a" and best["tie_set"] == ["a", "b"]
    shown = api.tune(
        [timed("a", [10.0, 10.6, 9.9, 10.2, 10.1]), timed("b", [9.0, 9.5, 8.9, 9.2, 9.1])]
    )
    assert shown["problems"][0]["kept_incumbent"] is None
    best = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()
    assert best["variant_name"] == "b" and best["tie_set"] == ["b"]
