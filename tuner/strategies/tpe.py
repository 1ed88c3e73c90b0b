"""Model-guided search with Optuna's TPE sampler, restricted to the pruned candidate list.

TPE proposes points in a continuous/categorical box, which may name a parameter combination
that was pruned or already measured. Each proposal is therefore mapped to the nearest
candidate not asked yet (positive ints compared in log2 space, enums by equality), the
proposal itself is discarded (told as failed, which TPE ignores), and the candidate actually
measured is added to the study as a completed trial once its score arrives. So the model only
ever learns from real measurements of real candidates.

The first ``startup`` candidates come from a seeded permutation, as TPE needs a few points
before its model means anything. Failed candidates are recorded with a large penalty score so
that the model steers away from their neighbourhood.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeGuard

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from tuner.spaces.base import Params
from tuner.strategies.base import Strategy

__all__ = ["TpeStrategy", "FAILED_SCORE"]

log = logging.getLogger(__name__)

#: score recorded for a failed candidate: worse than any real median (TPE only ranks scores)
FAILED_SCORE = 1e18


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Silence Optuna's per-study INFO lines and experimental-feature warnings while inside."""
    optuna_log = logging.getLogger("optuna")
    level = optuna_log.level
    optuna_log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna_log.setLevel(level)


def _is_positive_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class _Encoding:
    """How candidates map to Optuna parameters and back (by nearest distance)."""

    def __init__(self, candidates: Sequence[Params]) -> None:
        keys = sorted({key for params in candidates for key in params})
        self.distributions: dict[str, BaseDistribution] = {}
        self.numeric: dict[str, float] = {}  # key -> log2 span, for normalizing distances
        for key in keys:
            values = [params.get(key) for params in candidates]
            distinct = sorted(set(values), key=repr)
            if len(distinct) < 2:
                continue  # a constant tells the model nothing
            ints = [v for v in distinct if _is_positive_int(v)]
            if len(ints) == len(distinct):
                low, high = math.log2(min(ints)), math.log2(max(ints))
                self.distributions[key] = FloatDistribution(low, high)
                self.numeric[key] = high - low
            else:
                self.distributions[key] = CategoricalDistribution(distinct)
        # a matrix of encoded candidates for vectorized nearest-neighbour look-ups
        self._columns = list(self.distributions)
        self._table = np.array(
            [
                [self._encode_value(key, params.get(key)) for key in self._columns]
                for params in candidates
            ],
            dtype=object,
        ).reshape(len(candidates), len(self._columns))

    def _encode_value(self, key: str, value: Any) -> Any:
        return math.log2(value) if key in self.numeric else value

    def encode(self, params: Params) -> dict[str, Any]:
        return {key: self._encode_value(key, params.get(key)) for key in self._columns}

    def nearest(self, point: dict[str, Any], allowed: np.ndarray) -> int:
        """Index of the allowed candidate closest to ``point`` (lowest index on ties)."""
        distance = np.zeros(len(self._table))
        for column, key in enumerate(self._columns):
            values = self._table[:, column]
            if key in self.numeric:
                span = self.numeric[key] or 1.0
                distance += np.abs(values.astype(float) - float(point[key])) / span
            else:
                distance += np.array([v != point[key] for v in values], dtype=float)
        distance[~allowed] = np.inf
        return int(np.argmin(distance))


class TpeStrategy(Strategy):
    """Seeded random start-up, then Optuna TPE proposals snapped to unseen candidates."""

    name = "tpe"
    adaptive = True

    def __init__(
        self,
        candidates: Sequence[Params],
        seed: int = 0,
        budget: int | None = None,
        startup: int | None = None,
    ) -> None:
        super().__init__(candidates, seed, budget)
        count = len(self.candidates)
        self.startup = startup if startup is not None else min(count, max(3, count // 20))
        self._encoding = _Encoding(self.candidates)
        self._asked = np.zeros(count, dtype=bool)
        self._startup_order = [int(i) for i in np.random.default_rng(seed).permutation(count)]
        with _quiet_optuna():
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=0, multivariate=True)
            self._study = optuna.create_study(direction="minimize", sampler=sampler)

    def ask(self, n: int) -> list[int]:
        batch: list[int] = []
        while len(batch) < n and not self._asked.all():
            index = self._next_startup() if self._asked.sum() < self.startup else self._propose()
            self._asked[index] = True
            batch.append(index)
        return batch

    def tell(self, index: int, score: float | None) -> None:
        value = FAILED_SCORE if score is None or not math.isfinite(score) else float(score)
        with _quiet_optuna():
            self._study.add_trial(
                create_trial(
                    params=self._encoding.encode(self.candidates[index]),
                    distributions=self._encoding.distributions,
                    value=value,
                )
            )

    def _next_startup(self) -> int:
        return next(i for i in self._startup_order if not self._asked[i])

    def _propose(self) -> int:
        if not self._encoding.distributions:
            return self._next_startup()
        with _quiet_optuna():
            trial = self._study.ask(self._encoding.distributions)
            point = dict(trial.params)
            self._study.tell(trial, state=TrialState.FAIL)
        index = self._encoding.nearest(point, ~self._asked)
        log.debug("tpe proposal %s -> candidate %d", point, index)
        return index
