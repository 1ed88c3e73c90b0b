"""``tunehub token``: create, list and revoke API tokens, and map worker tokens to the devices
they may serve, straight in the database (no server needed; ``--url`` or the settings name
it). An admin token does the same over the API: ``POST /v1/tokens``, ``GET /v1/tokens``,
``DELETE /v1/tokens/{id}``, ``PUT /v1/tokens/{id}/devices``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, TypeVar

import typer
from rich import box
from rich.table import Table
from sqlalchemy.orm import Session

from service.cli.common import UserError, stdout
from service.errors import NotFound
from service.settings import get_settings

__all__ = ["token_app"]

token_app = typer.Typer(
    help="API tokens: create, list, revoke, map to devices.", no_args_is_help=True
)

UrlOpt = Annotated[str | None, typer.Option(help="Database URL (default: settings).")]
T = TypeVar("T")


@contextmanager
def _session(url: str | None) -> Iterator[Session]:
    from service.store.db import make_engine, make_sessionmaker

    engine = make_engine(url or get_settings().database_url)
    try:
        with make_sessionmaker(engine)() as session, session.begin():
            yield session
    finally:
        engine.dispose()


def _in_db(url: str | None, work: Callable[[Session], T]) -> T:
    with _session(url) as session:
        return work(session)


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option(help="Who holds the token (a host, a person).")],
    scope: Annotated[
        list[str], typer.Option(help="read, submit, worker or admin; repeat for several.")
    ],
    url: UrlOpt = None,
) -> None:
    """Create a token directly in the database and print it (shown once)."""
    from service.cli.serve import create_token_in_db

    print(create_token_in_db(url or get_settings().database_url, name, scope))


@token_app.command("list")
def token_list(url: UrlOpt = None) -> None:
    """Every token: id, name, scopes, created, revoked (never the token itself)."""
    from service.store.tokens import list_tokens

    rows = _in_db(
        url,
        lambda session: [
            (str(t.id), t.name, ",".join(t.scopes), f"{t.created_at:%Y-%m-%d %H:%M}", t.revoked)
            for t in list_tokens(session)
        ],
    )
    table = Table(title="tokens", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("id", "name", "scopes", "created (UTC)", "state"):
        table.add_column(column, no_wrap=column != "name")
    for ident, name, scopes, created, revoked in rows:
        table.add_row(ident, name, scopes, created, "revoked" if revoked else "active")
    stdout.print(table)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[int, typer.Argument(help="The token's id (`tunehub token list`).")],
    url: UrlOpt = None,
) -> None:
    """Revoke a token: every later request with it is refused (401). What its workers
    uploaded stays; their leases lapse and go back to the queue."""
    from service.store.tokens import revoke_token

    def revoke(session: Session) -> tuple[str, bool]:
        row, changed = revoke_token(session, token_id)
        return f"token {row.id} ({row.name}, {','.join(row.scopes)})", changed

    try:
        what, changed = _in_db(url, revoke)
    except NotFound as exc:
        raise UserError(exc.detail) from None
    stdout.print(f"{what} {'revoked' if changed else 'was revoked already'}")


@token_app.command("devices")
def token_devices(
    token_id: Annotated[int, typer.Argument(help="The worker token's id (`tunehub token list`).")],
    device: Annotated[
        list[str] | None,
        typer.Argument(
            help="Device keys backend:name:arch:sm_count it may serve, each optionally @uid "
            "(a hashed physical device id, GET /v1/workers); none: show the map."
        ),
    ] = None,
    clear: Annotated[bool, typer.Option(help="Remove the map (any device again).")] = False,
    url: UrlOpt = None,
) -> None:
    """Show or set the devices a worker token may serve (service/store/device_map.py)."""
    from service.errors import InvalidInput
    from service.store.device_map import entry_text, parse_entry, set_entries, token_entries
    from service.store.models import ApiToken

    def work(session: Session) -> list[str]:
        if session.get(ApiToken, token_id) is None:
            raise NotFound(f"token {token_id} not found; `tunehub token list` shows the ids")
        if device or clear:
            entries = [parse_entry(text, ["device", i]) for i, text in enumerate(device or [])]
            set_entries(session, token_id, entries)
        return [entry_text(row) for row in token_entries(session, token_id)]

    try:
        shown = _in_db(url, work)
    except (NotFound, InvalidInput) as exc:
        raise UserError(exc.detail) from None
    if not shown:
        stdout.print(f"token {token_id} may serve any device (no map)")
    for line in shown:
        stdout.print(line)
