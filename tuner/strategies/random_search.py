"""Random search: a seeded permutation of the candidates, so every one is asked at most once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tuner.spaces.base import Params
from tuner.strategies.base import Strategy

__all__ = ["RandomStrategy"]


class RandomStrategy(Strategy):
    name = "random"

    def __init__(
        self, candidates: Sequence[Params], seed: int = 0, budget: int | None = None
    ) -> None:
        super().__init__(candidates, seed, budget)
        rng = np.random.default_rng(seed)
        self._order = [int(i) for i in rng.permutation(len(self.candidates))]
        self._next = 0

    def ask(self, n: int) -> list[int]:
        start, stop = self._next, min(self._next + max(n, 0), len(self._order))
        self._next = stop
        return self._order[start:stop]
