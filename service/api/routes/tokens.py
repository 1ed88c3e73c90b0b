"""``/v1/tokens``: an admin creates API tokens (the plaintext is shown once)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, status
from sqlalchemy import select

from service.api.deps import SessionDep, require_scope
from service.schemas.configs import TokenCreate, TokenOut
from service.store.models import ApiToken
from service.store.tokens import create_token, hash_token

__all__ = ["router"]

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TokenOut,
    dependencies=[Depends(require_scope("admin"))],
)
def new_token(body: TokenCreate, session: SessionDep) -> dict[str, Any]:
    token = create_token(session, body.name, body.scopes)
    row = session.scalars(select(ApiToken).where(ApiToken.token_hash == hash_token(token))).one()
    session.commit()
    return {"id": row.id, "name": row.name, "scopes": row.scopes, "token": token}
