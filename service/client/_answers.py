"""What the cached lookups return: the answer and whether it came from the cache."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from service.schemas.configs import BestConfigOut, ConfigQuery

__all__ = ["Answer", "Cached", "QueryAnswer", "best_params"]

Answer = TypeVar("Answer", bound=BaseModel)


@dataclass(frozen=True)
class Cached(Generic[Answer]):
    """An answer and where it came from: ``stale`` is true when the service could not be
    reached and the answer was read from the on-disk cache; ``confirmed_at`` is when the
    service last gave or confirmed it."""

    value: Answer
    stale: bool
    confirmed_at: datetime


@dataclass(frozen=True)
class QueryAnswer:
    """One problem of :meth:`TunehubClient.query`: the config, or an error (not tuned, bad
    problem, or unreachable with nothing cached)."""

    query: ConfigQuery
    config: BestConfigOut | None
    error: str | None
    stale: bool = False
    confirmed_at: datetime | None = None
    #: the service could not answer (the config, if any, is from the cache)
    unreachable: bool = False


def best_params(query: ConfigQuery) -> dict[str, Any]:
    """The query parameters of ``GET /v1/configs/best`` for ``query``."""
    params = query.model_dump(exclude={"problem"}, exclude_none=True)
    return {**params, **query.problem}
