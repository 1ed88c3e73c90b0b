"""``/v1/tokens``: an admin creates API tokens (the plaintext is shown once), lists them,
revokes them, and maps worker tokens to the devices they may serve."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.deps import SessionDep, require_scope
from service.errors import NotFound
from service.schemas.common import MAX_ROW_ID
from service.schemas.configs import TokenCreate, TokenInfo, TokenList, TokenOut
from service.schemas.devices import TokenDevicesIn, TokenDevicesOut
from service.store.device_map import entry_text, parse_entry, set_entries, token_entries
from service.store.models import ApiToken
from service.store.tokens import create_token, hash_token, list_tokens, revoke_token

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/tokens", tags=["tokens"], dependencies=[Depends(require_scope("admin"))]
)

TokenId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a token's id (GET /v1/tokens)")]


def _info(session: Session, row: ApiToken) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "scopes": row.scopes,
        "revoked": row.revoked,
        "devices": [entry_text(e) for e in token_entries(session, row.id)],
        "created_at": row.created_at,
    }


def _token(session: Session, token_id: int) -> ApiToken:
    row = session.get(ApiToken, token_id)
    if row is None:
        raise NotFound(f"token {token_id} not found; `tunehub token list` shows the ids")
    return row


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenOut)
def new_token(body: TokenCreate, session: SessionDep) -> dict[str, Any]:
    token = create_token(session, body.name, body.scopes)
    row = session.scalars(select(ApiToken).where(ApiToken.token_hash == hash_token(token))).one()
    session.commit()
    return {"id": row.id, "name": row.name, "scopes": row.scopes, "token": token}


@router.get("", response_model=TokenList)
def all_tokens(session: SessionDep) -> dict[str, Any]:
    """Every token, revoked ones too (never a plaintext or a hash)."""
    return {"tokens": [_info(session, row) for row in list_tokens(session)]}


@router.delete("/{token_id}", response_model=TokenInfo)
def revoke(token_id: TokenId, session: SessionDep) -> dict[str, Any]:
    """Revoke a token: every later request with it is a 401. Revoking a revoked token is a
    no-op. What its workers uploaded stays; their leases lapse (``TUNEHUB_LEASE_SECONDS``)."""
    row, _changed = revoke_token(session, token_id)
    session.commit()
    return _info(session, row)


@router.get("/{token_id}/devices", response_model=TokenDevicesOut)
def token_devices(token_id: TokenId, session: SessionDep) -> dict[str, Any]:
    """The devices the token may serve (service.store.device_map); empty: no map."""
    row = _token(session, token_id)
    return {"token_id": row.id, "devices": [entry_text(e) for e in token_entries(session, row.id)]}


@router.put("/{token_id}/devices", response_model=TokenDevicesOut)
def map_token_devices(
    token_id: TokenId, body: TokenDevicesIn, session: SessionDep
) -> dict[str, Any]:
    """Replace the devices the worker token may serve: device keys
    ``backend:name:arch:sm_count``, each optionally ``@uid`` (a hashed physical device id the
    registering host must carry; GET /v1/workers shows them). An empty list removes the map."""
    row = _token(session, token_id)
    entries = [parse_entry(text, ["body", "devices", i]) for i, text in enumerate(body.devices)]
    set_entries(session, row.id, entries)
    session.commit()
    return {"token_id": row.id, "devices": [entry_text(e) for e in token_entries(session, row.id)]}
