"""The service's exception tree (the client has its own, in :mod:`service.client`).

    ServiceError                 base of what the service raises on purpose
    ├── DatabaseNotMigrated      the database is empty or at an older revision (startup refuses)
    └── RequestError             a refusal of a client's request, with a status code and detail
        ├── Forbidden            403: the token may not act for this worker or lease
        ├── NotFound             404: unknown id, or nothing tuned for a query
        ├── Conflict             409: the lease is no longer held, or the state forbids the call
        ├── BodyTooLarge         413: the request body is over the size limit
        └── InvalidInput         422: a bad field, named by ``loc`` like FastAPI's own errors

``service.store`` raises them; ``service.api.errors`` maps them to HTTP answers. Everything a
client can send ends in one of these or in FastAPI's 422; an unexpected exception is a bug and
is answered 500 with a generic message (and logged).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ServiceError",
    "DatabaseNotMigrated",
    "RequestError",
    "Forbidden",
    "NotFound",
    "Conflict",
    "BodyTooLarge",
    "InvalidInput",
]


class ServiceError(Exception):
    """Base class of the service's errors."""


class DatabaseNotMigrated(ServiceError):
    """The database schema is not at the revision this code needs."""


class RequestError(ServiceError):
    """A refusal of a client's request; ``status_code`` is its HTTP status."""

    status_code = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Forbidden(RequestError):
    status_code = 403


class NotFound(RequestError):
    status_code = 404


class Conflict(RequestError):
    status_code = 409


class BodyTooLarge(RequestError):
    status_code = 413


class InvalidInput(RequestError):
    """A 422 shaped like FastAPI's validation errors: ``{"detail": [{loc, msg, type}]}``;
    ``more`` lists further (loc, msg) errors of the same request (an import's refused lines)."""

    status_code = 422

    def __init__(
        self,
        loc: Sequence[str | int],
        msg: str,
        more: Sequence[tuple[Sequence[str | int], str]] = (),
    ) -> None:
        super().__init__(msg)
        self.loc = list(loc)
        self.more = [(list(where), text) for where, text in more]

    def body(self) -> dict[str, object]:
        errors = [(self.loc, self.detail), *self.more]
        return {"detail": [{"loc": loc, "msg": msg, "type": "value_error"} for loc, msg in errors]}
