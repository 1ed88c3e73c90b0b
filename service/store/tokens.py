"""API tokens: ``th_`` + 32 random bytes (urlsafe base64), stored only as their sha256.

Scopes: ``read``, ``submit``, ``worker``, ``admin``; admin implies every other scope and any
valid token may read.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store.models import ApiToken

__all__ = [
    "SCOPES",
    "TOKEN_PREFIX",
    "generate_token",
    "hash_token",
    "create_token",
    "authenticate",
    "has_scope",
]

SCOPES = ("read", "submit", "worker", "admin")
TOKEN_PREFIX = "th_"


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(session: Session, name: str, scopes: Iterable[str]) -> str:
    """Store a new token (hashed) and return its plaintext; it cannot be shown again.

    The caller commits the session.
    """
    wanted = sorted(set(scopes))
    unknown = [scope for scope in wanted if scope not in SCOPES]
    if unknown or not wanted:
        raise ValueError(f"scopes must be a non-empty subset of {SCOPES}, got {wanted}")
    token = generate_token()
    session.add(ApiToken(name=name, token_hash=hash_token(token), scopes=wanted))
    session.flush()
    return token


def authenticate(session: Session, token: str) -> ApiToken | None:
    """The stored, unrevoked token matching ``token``, or None."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
    if row is None or row.revoked:
        return None
    return row


def has_scope(granted: Iterable[str], required: str) -> bool:
    granted = set(granted)
    return "admin" in granted or required in granted or (required == "read" and bool(granted))
