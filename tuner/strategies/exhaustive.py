"""Exhaustive search: every candidate once, in the space's own (stable) order."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.spaces.base import Params
from tuner.strategies.base import Strategy

__all__ = ["ExhaustiveStrategy"]


class ExhaustiveStrategy(Strategy):
    name = "exhaustive"

    def __init__(self, candidates: Sequence[Params], seed: int = 0) -> None:
        super().__init__(candidates, seed)
        self._next = 0

    def ask(self, n: int) -> list[int]:
        start, stop = self._next, min(self._next + max(n, 0), len(self.candidates))
        self._next = stop
        return list(range(start, stop))
