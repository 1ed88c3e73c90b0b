"""An import of many lines keeps its line-by-line meaning while it reads and writes in chunks
(service.store.import_batches): refused lines reported by number in any chunk, duplicates of
stored rows and of earlier lines, a later line of a key decided against the earlier one; and
the cyclic GC paused while imports run (service.store.imports.paused_gc)."""

from __future__ import annotations

import copy
import gc
import json
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.store import imports
from service.store.import_batches import CHUNK_LINES
from service.store.imports import paused_gc
from service.store.models import BestConfig, Measurement
from tests.service.store.test_import_checks import _post, _record, strict  # noqa: F401 (fixture)


def _line(api: Any, m: int, median: float = 50.0) -> dict[str, Any]:
    record = _record(api)
    record["problem"] = {"m": m, "k": 64, "kind": "sum"}
    record["measurement"] |= {"median_us": median, "p20_us": median * 0.98,
                              "p80_us": median * 1.02, "min_us": median * 0.97}  # fmt: skip
    return record


def _count(maker: Any, model: Any) -> int:
    with maker() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_a_file_over_several_chunks_means_what_it_meant_line_by_line(
    api: Any,
    strict: tuple[TestClient, dict[str, str], Any],  # noqa: F811
) -> None:
    client, admin, maker = strict
    distinct = CHUNK_LINES + CHUNK_LINES // 2
    records = [_line(api, m) for m in range(1, distinct + 1)]
    bad_at = CHUNK_LINES + 7  # a line of the second chunk
    records[bad_at - 1] = copy.deepcopy(records[bad_at - 1])
    records[bad_at - 1]["measurement"]["p20_us"] = 1e6  # above the median: refused
    later = [
        records[4],  # the same measurement as line 5: a duplicate
        _line(api, 10, median=20.0),  # line 10's key, much faster: replaces it
        _line(api, 11, median=90.0),  # line 11's key, slower: kept
        _line(api, distinct + 1),  # a new key ...
        _line(api, distinct + 1),  # ... and its duplicate in the same chunk
    ]
    lines = [json.dumps(r) for r in records + later]
    lines.insert(CHUNK_LINES - 1, "")  # a blank line is skipped, not counted
    text = "\n".join(lines) + "\n"
    answer = _post(client, admin, text).json()
    assert answer["records"] == distinct + len(later)
    assert answer["refused"] == 1 and answer["errors"][0]["line"] == bad_at + 1  # the blank
    assert answer["errors"][0]["loc"][:3] == ["body", bad_at + 1, "measurement"]
    assert answer["duplicates"] == 2
    assert (answer["replaced"], answer["kept"], answer["held"]) == (1, 1, 0)
    assert answer["inserted"] == distinct - 1 + 1
    assert _count(maker, BestConfig) == distinct - 1 + 1
    with maker() as session:
        medians = dict(
            session.execute(
                select(BestConfig.problem_key, Measurement.median_us).join(
                    Measurement, Measurement.id == BestConfig.measurement_id
                )
            ).all()
        )
    assert medians["m=10,k=64,kind=sum"] == 20.0 and medians["m=11,k=64,kind=sum"] == 50.0
    measured = _count(maker, Measurement)
    again = _post(client, admin, text).json()  # the same file again changes nothing
    assert again["duplicates"] == answer["records"] - 1 and again["refused"] == 1
    assert again["inserted"] == again["replaced"] == again["kept"] == 0
    assert _count(maker, Measurement) == measured


def test_the_cyclic_gc_is_paused_until_the_last_of_overlapping_imports_ends() -> None:
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with paused_gc():
            first_in.set()
            second_in.wait(10)
        seen["after the first ended"] = gc.isenabled()
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with paused_gc():
            second_in.set()
            first_out.wait(10)
            seen["in the second"] = gc.isenabled()
            with paused_gc():  # nested in the same thread
                pass
            seen["after a nested one"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert seen == {
        "after the first ended": False,
        "in the second": False,
        "after a nested one": False,
    }
    assert gc.isenabled()  # the last one ended
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # disabled before: left so
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("an import that fails")
    assert gc.isenabled()


def test_an_import_runs_with_the_gc_paused(
    api: Any,
    strict: tuple[TestClient, dict[str, str], Any],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, admin, _ = strict
    states: list[bool] = []
    record = imports._record

    def watched(line: str, number: int) -> Any:
        states.append(gc.isenabled())
        return record(line, number)

    monkeypatch.setattr(imports, "_record", watched)
    lines = [json.dumps(_line(api, m)) for m in (1, 2, 3)]
    assert _post(client, admin, "\n".join(lines)).json()["inserted"] == 3
    assert states == [False, False, False]
    assert gc.isenabled()
