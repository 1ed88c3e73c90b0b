"""Every read survives text stored before the door refused it: lone surrogates and NUL in the
JSON columns (job selectors, params, provenance, tie sets, library maps) are answered, shown,
exported and imported again (a surrogate read as U+FFFD, service.schemas.text)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import update

from service.schemas.text import REPLACEMENT, loads, scrub, text_error
from service.store.models import BestConfig, Job, Measurement, Toolchain, Variant

BAD = "bad\ud800\x00\udfff"
SURROGATES = "bad\udfff\ud800"


def _plant(api: Any) -> dict[str, Any]:
    job = api.tune([api.measurement("a", 2.0), api.measurement("b", 3.0)])
    with api.harness.sessionmaker() as session:
        session.execute(update(Job).values(device={"backend": "cpu", "name": BAD}))
        session.execute(update(Variant).values(params={"pack": 4, SURROGATES: SURROGATES}))
        session.execute(update(Measurement).values(provenance={"note": BAD, "list": [BAD]}))
        session.execute(update(BestConfig).values(tie_set=[BAD]))
        session.execute(update(Toolchain).values(libraries={BAD: BAD}))
        session.commit()
    rows = api.client.get("/v1/measurements", params={"job_id": job["id"]})
    assert rows.status_code == 200, rows.text
    return {"job_id": job["id"], "measurement_id": rows.json()["measurements"][0]["id"]}


def test_reads_answer_text_stored_before_the_rule(api: Any) -> None:
    planted = _plant(api)
    job, measurement = planted["job_id"], planted["measurement_id"]
    for url in (
        "/v1/jobs",
        f"/v1/jobs/{job}",
        f"/v1/measurements?job_id={job}",
        "/v1/configs/best?op=reduce&dtype=f32&m=1024&k=4096&kind=sum",
        "/ui/jobs",
        f"/ui/jobs/{job}",
        "/ui/best",
        f"/ui/measurements/{measurement}",
    ):
        response = api.client.get(url)
        assert response.status_code == 200, (url, response.text[:300])
    shown = api.client.get(f"/v1/jobs/{job}").json()["device"]["name"]
    assert shown == f"bad{REPLACEMENT}\x00{REPLACEMENT}"
    best = api.client.get("/v1/configs/best?op=reduce&dtype=f32&m=1024&k=4096&kind=sum").json()
    assert best["tie_set"] == [f"bad{REPLACEMENT}\x00{REPLACEMENT}"]


def test_an_export_of_stored_bad_text_imports_again(api: Any) -> None:
    _plant(api)
    exported = api.client.get("/v1/export")
    assert exported.status_code == 200
    lines = exported.text.splitlines()
    assert len(lines) == 1 and "\\ud800" not in exported.text
    record = json.loads(lines[0])
    assert f"bad{REPLACEMENT}{REPLACEMENT}" in record["variant"]["params"]
    # NUL cannot come in again: the importing service refuses it where a client sends it
    text = exported.text.replace("\\u0000", "")
    answer = api.client.post(
        "/v1/import",
        content=text.encode(),
        headers={**api.harness.admin, "Content-Type": "application/x-ndjson"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["refused"] == 0


def test_the_text_rule() -> None:
    assert text_error("plain ü ☃ 𝄞 \ufffe") is None
    assert "NUL" in (text_error("a\x00") or "")
    assert "U+D800" in (text_error("a\ud800") or "")
    assert scrub({"\udc00": ["x\ud800", 1, None]}) == {REPLACEMENT: [f"x{REPLACEMENT}", 1, None]}
    assert loads('{"a": "\\ud800", "b": "\\\\ud800"}') == {"a": REPLACEMENT, "b": "\\ud800"}
    assert loads('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}  # a real pair is kept
