"""FastAPI dependencies: the database session, the settings and token checks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.schemas.common import SafeStr
from service.settings import Settings
from service.store.models import ApiToken
from service.store.tokens import authenticate, has_scope

__all__ = [
    "get_session",
    "get_app_settings",
    "SessionDep",
    "SettingsDep",
    "require_scope",
    "require_read",
    "require_read_async",
    "check_read",
    "read_credentials",
    "bearer_credentials",
    "DeviceQuery",
    "ToolchainQuery",
]

#: a query's device: its key or part of its name
DeviceQuery = Annotated[SafeStr | None, Query(max_length=300)]
#: a query's toolchain key
ToolchainQuery = Annotated[SafeStr | None, Query(max_length=1000)]

_bearer = HTTPBearer(auto_error=False, description="an API token: `Bearer th_...`")


async def get_session(request: Request) -> AsyncIterator[Session]:
    # async, so closing (returning the connection to the pool) needs no worker thread: with a
    # sync teardown, requests waiting in every thread for a pooled connection starved the
    # requests holding connections of the thread they needed to close (pool timeouts, 500s)
    session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        session.close()


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
_Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


def _check(
    session: Session, credentials: HTTPAuthorizationCredentials | None, scope: str
) -> ApiToken:
    if credentials is None:
        raise _unauthorized("missing token: send `Authorization: Bearer <token>`")
    token = authenticate(session, credentials.credentials)
    # end this read now: a pooled connection held while the request waits for a thread for its
    # route starved the threads waiting for connections (pool timeouts under 64 submitters)
    session.commit()
    if token is None:
        raise _unauthorized("unknown or revoked token")
    if not has_scope(token.scopes, scope):
        raise HTTPException(403, detail=f"this token lacks the {scope!r} scope")
    return token


def require_scope(scope: str) -> Callable[..., ApiToken]:
    """A dependency that admits a token holding ``scope`` (or admin)."""

    def dependency(session: SessionDep, credentials: _Credentials) -> ApiToken:
        return _check(session, credentials, scope)

    dependency.__name__ = f"require_{scope}"
    return dependency


def read_credentials(request: Request) -> HTTPAuthorizationCredentials | None:
    # read by hand, not through the HTTPBearer scheme: reads are open by design, so their
    # OpenAPI operations must not declare security (service.api.openapi adds it back when
    # read_token_required is set)
    return bearer_credentials(request.headers.get("authorization"))


def bearer_credentials(authorization: str | None) -> HTTPAuthorizationCredentials | None:
    """The bearer token of an ``Authorization`` header value, or None (no header, another
    scheme, no token): what a read checks."""
    scheme, token = get_authorization_scheme_param(authorization)
    if scheme.lower() != "bearer" or not token:
        return None
    return HTTPAuthorizationCredentials(scheme=scheme, credentials=token)


def check_read(
    session: Session, settings: Settings, credentials: HTTPAuthorizationCredentials | None
) -> ApiToken | None:
    """Reads are open unless ``read_token_required``; a token sent anyway must be valid."""
    if not settings.read_token_required and credentials is None:
        return None
    return _check(session, credentials, "read")


def require_read(request: Request, session: SessionDep, settings: SettingsDep) -> ApiToken | None:
    """The dependency form of :func:`check_read`."""
    return check_read(session, settings, read_credentials(request))


async def require_read_async(request: Request) -> None:
    """:func:`require_read` without a thread hop or a session when no token is needed or
    sent (the common case of a build machine on an open service): for the hot lookup route."""
    settings: Settings = request.app.state.settings
    credentials = read_credentials(request)
    if settings.read_token_required or credentials is not None:
        await run_in_threadpool(_check_read, request.app.state.sessionmaker, settings, credentials)


def _check_read(
    maker: sessionmaker[Session],
    settings: Settings,
    credentials: HTTPAuthorizationCredentials | None,
) -> None:
    with maker() as session:
        check_read(session, settings, credentials)
