"""``/v1/tokens``: an admin creates API tokens (the plaintext is shown once), lists them and
revokes them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, status
from sqlalchemy import select

from service.api.deps import SessionDep, require_scope
from service.schemas.common import MAX_ROW_ID
from service.schemas.configs import TokenCreate, TokenInfo, TokenList, TokenOut
from service.store.models import ApiToken
from service.store.tokens import create_token, hash_token, list_tokens, revoke_token

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/tokens", tags=["tokens"], dependencies=[Depends(require_scope("admin"))]
)

TokenId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a token's id (GET /v1/tokens)")]


def _info(row: ApiToken) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "scopes": row.scopes,
        "revoked": row.revoked,
        "created_at": row.created_at,
    }


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenOut)
def new_token(body: TokenCreate, session: SessionDep) -> dict[str, Any]:
    token = create_token(session, body.name, body.scopes)
    row = session.scalars(select(ApiToken).where(ApiToken.token_hash == hash_token(token))).one()
    session.commit()
    return {"id": row.id, "name": row.name, "scopes": row.scopes, "token": token}


@router.get("", response_model=TokenList)
def all_tokens(session: SessionDep) -> dict[str, Any]:
    """Every token, revoked ones too (never a plaintext or a hash)."""
    return {"tokens": [_info(row) for row in list_tokens(session)]}


@router.delete("/{token_id}", response_model=TokenInfo)
def revoke(token_id: TokenId, session: SessionDep) -> dict[str, Any]:
    """Revoke a token: every later request with it is a 401. Revoking a revoked token is a
    no-op. What its workers uploaded stays; their leases lapse (``TUNEHUB_LEASE_SECONDS``)."""
    row, _changed = revoke_token(session, token_id)
    session.commit()
    return _info(row)
