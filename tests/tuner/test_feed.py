"""The StreamFeed hands built candidates over as their builds finish; with ``lead_first`` the
first candidate asked (the engine's vendor default) comes first whatever builds faster."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tuner.feed import StreamFeed
from tuner.types import CompileResult, Variant


def _variant(i: int) -> Variant:
    return Variant(op="gemm", name=f"v{i}", params={}, source="", flags=(), id=f"id{i}")


class SlowFirstBuilds:
    """A build function whose first variant finishes well after every other one did."""

    def __init__(self, count: int) -> None:
        self.variants = [_variant(i) for i in range(count)]
        self.others_done = threading.Event()
        self._done = 0
        self._lock = threading.Lock()
        self._asked = 0

    def ask(self, n: int) -> list[tuple[int, Variant]]:
        batch = list(enumerate(self.variants))[self._asked : self._asked + n]
        self._asked += len(batch)
        return batch

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        (variant,) = variants
        if variant.id == "id0":
            assert self.others_done.wait(10.0)
            time.sleep(0.3)  # later than the feed's poll: never in one batch with the others
        else:
            with self._lock:
                self._done += 1
                if self._done == len(self.variants) - 1:
                    self.others_done.set()
        return {variant.id: CompileResult(variant.id, True, "x", 0.0, False)}


def _handed_over(lead_first: bool, workers: int = 4) -> list[str]:
    builds = SlowFirstBuilds(4)
    feed = StreamFeed(
        builds.ask, builds.build, workers, lambda: False, lambda: 10.0, lead_first=lead_first
    )
    order: list[str] = []
    try:
        while (item := feed.next()) is not None:
            order.append(item[1].name)
    finally:
        feed.close()
    return order


def test_lead_first_hands_the_first_asked_over_first_though_it_builds_last() -> None:
    order = _handed_over(lead_first=True)
    assert order[0] == "v0" and sorted(order) == ["v0", "v1", "v2", "v3"]


def test_the_compilers_go_on_while_the_lead_builds() -> None:
    # two compilers: the lead holds one; the other must build v1, v2 and v3 meanwhile (the
    # lead's build finishes only after theirs)
    order = _handed_over(lead_first=True, workers=2)
    assert order == ["v0", "v1", "v2", "v3"]


def test_without_a_lead_builds_are_handed_over_as_they_finish() -> None:
    order = _handed_over(lead_first=False)
    assert order[-1] == "v0" and sorted(order) == ["v0", "v1", "v2", "v3"]
