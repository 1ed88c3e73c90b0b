"""Random search: a seeded permutation of the candidates, so every one is asked at most once."""

from __future__ import annotations

import numpy as np

from tuner.strategies.base import FixedOrderStrategy

__all__ = ["RandomStrategy"]


class RandomStrategy(FixedOrderStrategy):
    name = "random"

    def order(self) -> list[int]:
        rng = np.random.default_rng(self.seed)
        return [int(i) for i in rng.permutation(len(self.candidates))]
