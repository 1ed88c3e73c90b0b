"""Reading rows: a row's columns by name (an answer's same-named fields), and the one row of
a key, read afresh and locked for the transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

__all__ = ["columns", "locked_row"]


def columns(row: object, *names: str) -> dict[str, Any]:
    """``row``'s attributes ``names``, by name: a row's columns as an answer's fields."""
    return {name: getattr(row, name) for name in names}


def locked_row(session: Session, model: type[Any], key: dict[str, Any]) -> Any:
    """The one row of ``model`` with ``key``, read afresh and, on PostgreSQL, locked for the
    rest of the transaction (SQLite serializes writers)."""
    query = select(model).filter_by(**key)
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    return session.scalars(query.execution_options(populate_existing=True)).one()
