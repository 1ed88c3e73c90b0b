"""Search strategies: an ask/tell interface over the indices of the pruned candidate list.

The engine asks for a batch (as many as it can compile in parallel), measures it and tells the
strategy each candidate's score (median microseconds, lower is better; ``None`` when the
candidate failed). Budgets are enforced by the engine, not by strategies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from tuner.spaces.base import Params

__all__ = ["Strategy"]


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
