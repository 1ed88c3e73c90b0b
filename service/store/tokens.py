"""API tokens: ``th_`` + 32 random bytes (urlsafe base64), stored only as their sha256.

Scopes: ``read``, ``submit``, ``worker``, ``admin``; admin implies every other scope and any
valid token may read.

A worker is bound to the token that registered it: only that token may lease tasks for it,
heartbeat its leases and upload its results (:func:`owned_worker`, :func:`check_lease_owner`),
so one worker token cannot act for another host's worker. A job belongs to the token that
submitted it: only that token or an admin may cancel it (:func:`check_job_owner`).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Forbidden, NotFound
from service.store.models import ApiToken, Job, Lease, Worker
from service.store.validation import usable_id

__all__ = [
    "SCOPES",
    "TOKEN_PREFIX",
    "generate_token",
    "hash_token",
    "create_token",
    "authenticate",
    "has_scope",
    "owned_worker",
    "check_lease_owner",
    "list_tokens",
    "revoke_token",
    "check_job_owner",
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


def list_tokens(session: Session) -> list[ApiToken]:
    """Every token (revoked ones too), oldest first; hashes are never shown."""
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def revoke_token(session: Session, token_id: int) -> tuple[ApiToken, bool]:
    """Revoke the token ``token_id``: from the next request on it is refused (401) for
    everything. Returns the token and whether this call revoked it (False: it already was);
    NotFound for an unknown id. What its workers uploaded stays; their leases are not renewed
    and go back to the queue when they expire. The caller commits."""
    row = session.get(ApiToken, token_id)
    if row is None:
        raise NotFound(f"token {token_id} not found; `tunehub token list` shows the ids")
    if row.revoked:
        return row, False
    row.revoked = True
    return row, True


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


def owned_worker(session: Session, worker_id: str, token: ApiToken) -> Worker:
    """The worker ``worker_id`` if ``token`` registered it; NotFound or Forbidden otherwise."""
    worker = session.get(Worker, worker_id) if usable_id(worker_id) else None
    if worker is None:
        raise NotFound(f"worker {worker_id!r} not found; register with POST /v1/workers")
    if worker.token_id is None:
        raise Forbidden(
            f"worker {worker_id} was registered before workers were bound to their tokens; "
            "register again with POST /v1/workers"
        )
    if worker.token_id != token.id:
        raise Forbidden(
            f"worker {worker_id} was registered with another token; a worker token may act "
            "only for the workers it registered (register this host with POST /v1/workers)"
        )
    return worker


def check_job_owner(job: Job, token: ApiToken) -> None:
    """Forbidden unless ``token`` submitted the job or is an admin token: a job belongs to
    the token that submitted it (another team member's token cannot cancel it)."""
    if has_scope(token.scopes, "admin") or (job.token_id is not None and job.token_id == token.id):
        return
    owner = "another token" if job.token_id is not None else "no token (stored before owners)"
    raise Forbidden(
        f"job {job.id} was submitted by {owner}; only the token that submitted a job, or an "
        "admin token, may cancel it"
    )


def check_lease_owner(session: Session, lease_id: str, token: ApiToken) -> None:
    """Forbidden unless the lease's worker was registered by ``token``. An unknown lease is
    left to the caller's own lookup (404)."""
    lease = session.get(Lease, lease_id) if usable_id(lease_id) else None
    if lease is None:
        return
    worker = session.get(Worker, lease.worker_id)
    if worker is None or worker.token_id is None or worker.token_id != token.id:
        raise Forbidden(
            f"lease {lease_id} belongs to a worker registered with another token; a worker "
            "token may heartbeat and upload only for the leases its own workers hold"
        )
