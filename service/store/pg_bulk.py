"""PostgreSQL's bulk statements for an import's chunk (:mod:`service.store.import_batches`).

On PostgreSQL an executemany of 1,000 rows cost the import most of its time: SQLAlchemy's
insertmanyvalues renders one statement with 20,000 parameters, which psycopg parses again
for every chunk, and the best configs' executemany runs 1,000 statements, each firing the
statement-level change trigger of migration 0006. Here each of a chunk's writes and reads is
one short statement with a parameter per column, run on the session's own connection (in
its transaction):

- :func:`new_ids`: ids from the table's sequence, ``nextval`` over ``generate_series``;
- :func:`copy_rows`: rows written with ``COPY ... FROM STDIN`` (psycopg's ``cursor.copy``,
  binary, in the column types the database declares);
- :func:`insert_new`: ``INSERT ... SELECT * FROM unnest(<one array per column>) ON
  CONFLICT DO NOTHING RETURNING <column>``: what the rows inserted say (a row another writer
  stored meanwhile returns nothing);
- :func:`rows_where_in`: ``SELECT ... WHERE <column> IN (SELECT unnest(<array>))``, instead
  of lists of 500 parameters.

The arrays are sent in the binary format (``%b``): psycopg builds a text array in Python,
quoting and escaping each element, at four times the cost; binary COPY costs about two
thirds of text COPY.

Values pass through the same bind processors as SQLAlchemy's statements (JSON as psycopg's
``Json`` of the value, datetimes as naive UTC), and a column a row leaves out takes the
model's Python default, so the rows are those the ORM would write
(``tests/service/store/test_import_rows.py`` compares them column by column). Triggers run as
for any insert: the row-level revision stamp of migration 0010 for each best config, the
statement-level trigger of 0006 once per statement (``COPY`` fires insert triggers too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from psycopg import sql
from sqlalchemy import Column, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

__all__ = ["applies", "new_ids", "copy_rows", "insert_new", "rows_where_in"]

_Prepare = Callable[[dict[str, Any]], Any]


def applies(session: Session) -> bool:
    """Whether the session's database is PostgreSQL (the bulk statements apply)."""
    return session.get_bind().dialect.name == "postgresql"


def _driver_connection(session: Session) -> Any:
    """The psycopg connection under the session, in its transaction, after the session's
    pending changes are flushed (as a statement through the session would autoflush them)."""
    session.flush()
    return session.connection().connection.driver_connection


def _preparer(column: Column[Any], dialect: Dialect) -> _Prepare:
    """A row dict -> the column's value as SQLAlchemy would bind it: the row's value, else
    the column's Python default (a callable called per row), through the type's processor."""
    name, default = column.name, column.default
    take: _Prepare
    if default is None:
        take = lambda row: row.get(name)  # noqa: E731
    elif default.is_callable:
        make = default.arg  # type: ignore[attr-defined]  # SQLAlchemy wraps it to take a context
        take = lambda row: row[name] if name in row else make(None)  # noqa: E731
    elif default.is_scalar:
        value = default.arg  # type: ignore[attr-defined]
        take = lambda row: row.get(name, value)  # noqa: E731
    else:
        raise ValueError(f"{column}: a default that is neither a value nor a Python callable")
    process = column.type.dialect_impl(dialect).bind_processor(dialect)
    if process is None:
        return take
    return lambda row: process(take(row))


def _table(model: type[Any]) -> Table:
    return cast(Table, model.__table__)


def _identifiers(names: Iterable[str]) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(name) for name in names)


def new_ids(session: Session, model: type[Any], count: int) -> list[int]:
    """``count`` new values of the sequence of ``model``'s ``id``, ascending."""
    statement = sql.SQL(
        "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)"
    )
    with _driver_connection(session).cursor() as cursor:
        cursor.execute(statement, (_table(model).name, count))
        return sorted(row[0] for row in cursor.fetchall())


def copy_rows(session: Session, model: type[Any], rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (column name -> value; ``id`` included) into ``model``'s table with
    COPY (binary: each value in its column's type as the database declares it)."""
    table, dialect = _table(model), session.get_bind().dialect
    columns = list(table.columns)
    prepare = [_preparer(column, dialect) for column in columns]
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
        sql.Identifier(table.name), _identifiers(column.name for column in columns)
    )
    connection = _driver_connection(session)
    types = dict(
        connection.execute(
            "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = CAST(%s AS regclass) "
            "AND attnum > 0 AND NOT attisdropped",
            (table.name,),
        ).fetchall()
    )
    with connection.cursor() as cursor, cursor.copy(statement) as copy:
        copy.set_types([types[column.name] for column in columns])
        for row in rows:
            copy.write_row([value(row) for value in prepare])


def insert_new(
    session: Session, model: type[Any], rows: Sequence[dict[str, Any]], returning: str
) -> list[Any]:
    """Insert ``rows`` (each with the same columns) ignoring those that collide with a unique
    key; the ``returning`` column of the rows inserted."""
    if not rows:
        return []
    table, dialect = _table(model), session.get_bind().dialect
    columns = [table.columns[name] for name in rows[0]]
    arrays = []
    for column in columns:
        prepare = _preparer(column, dialect)
        arrays.append([prepare(row) for row in rows])
    unnest = sql.SQL(", ").join(
        sql.SQL("CAST(%b AS {}[])").format(sql.SQL(column.type.compile(dialect=dialect)))
        for column in columns
    )
    statement = sql.SQL(
        "INSERT INTO {} ({}) SELECT * FROM unnest({}) ON CONFLICT DO NOTHING RETURNING {}"
    ).format(
        sql.Identifier(table.name),
        _identifiers(column.name for column in columns),
        unnest,
        sql.Identifier(returning),
    )
    with _driver_connection(session).cursor() as cursor:
        cursor.execute(statement, arrays)
        return [row[0] for row in cursor.fetchall()]


def rows_where_in(
    session: Session,
    model: type[Any],
    columns: Sequence[str],
    where_in: dict[str, Sequence[Any]],
    *,
    distinct: bool = False,
) -> list[tuple[Any, ...]]:
    """``SELECT [DISTINCT] columns FROM table WHERE c IN (SELECT unnest(values)) AND ...``
    for each (c, values) of ``where_in`` (the values as one array parameter each)."""
    table, dialect = _table(model), session.get_bind().dialect
    conditions = sql.SQL(" AND ").join(
        sql.SQL("{} IN (SELECT unnest(CAST(%b AS {}[])))").format(
            sql.Identifier(name), sql.SQL(table.columns[name].type.compile(dialect=dialect))
        )
        for name in where_in
    )
    statement = sql.SQL("SELECT {}{} FROM {} WHERE {}").format(
        sql.SQL("DISTINCT " if distinct else ""),
        _identifiers(columns),
        sql.Identifier(table.name),
        conditions,
    )
    with _driver_connection(session).cursor() as cursor:
        cursor.execute(statement, [list(values) for values in where_in.values()])
        return cursor.fetchall()
