"""Search strategies: an ask/tell interface over the indices of the pruned candidate list.

The engine asks for a batch (as many as it can compile in parallel), measures it and tells the
strategy each candidate's score (median microseconds, lower is better; ``None`` when the
candidate failed). Budgets are enforced by the engine, not by strategies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from tuner.spaces.base import Params

__all__ = ["Strategy", "FixedOrderStrategy"]


class Strategy(ABC):
    name: str
    #: True when what it is told steers what it asks next (the engine then asks small
    #: batches); False lets the engine compile a large batch at once
    adaptive: bool = False

    def __init__(
        self, candidates: Sequence[Params], seed: int = 0, budget: int | None = None
    ) -> None:
        """``budget``: how many candidates the engine will ask at most, when fewer than all
        (None when the space orders its candidates for the problem, so the first N are meant
        to be measured)."""
        self.candidates = list(candidates)
        self.seed = seed
        self.budget = budget

    @abstractmethod
    def ask(self, n: int) -> list[int]:
        """Up to ``n`` candidate indices not asked before; empty when the search is over."""

    def tell(self, index: int, score: float | None) -> None:  # noqa: B027 - optional hook
        """Report the measured score of a candidate (``None``: it failed)."""


class FixedOrderStrategy(Strategy):
    """A strategy that decides its whole order up front (:meth:`order`) and asks it in
    turn; what it is told changes nothing."""

    def __init__(
        self, candidates: Sequence[Params], seed: int = 0, budget: int | None = None
    ) -> None:
        super().__init__(candidates, seed, budget)
        self._order = self.order()
        self._next = 0

    @abstractmethod
    def order(self) -> list[int]:
        """Every candidate index once, in the order to ask them."""

    def ask(self, n: int) -> list[int]:
        start, stop = self._next, min(self._next + max(n, 0), len(self._order))
        self._next = stop
        return self._order[start:stop]
