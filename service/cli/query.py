"""``tunehub query --file shapes.jsonl``: many lookups for a build script, one JSON line out per
line in, through the client's on-disk cache (answers marked stale while the service is down).

A line in is a ConfigQuery: ``{"op": "gemm", "dtype": "f16", "problem": {"m": 16, "n": 4096,
"k": 4096}, "device": "H200"}`` (``layout``, ``device``, ``backend``, ``toolchain`` optional;
``--device`` and ``--backend`` fill them where a line has none). A line out is
``{"line": N, "query": {...}, "config": {...} | null, "error": "..." | null, "stale": bool,
"confirmed_at": "..." | null}``.

A nearest answer farther than ``--max-distance`` (the bound ``tunehub best`` applies) is no
answer: ``config`` null, ``error`` saying how far the nearest tuned shape is.

Exit status: 0 every line answered (some may be stale); 1 some line has no answer (not tuned,
its nearest tuned shape too far, or a problem the service refused); 2 bad input (unreadable
file, a line that is not a query: nothing is sent) or a refused token; 3 the service could
not be reached and some line had no cached answer.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from service.cli.common import (
    MaxDistanceOpt,
    ServerOpt,
    TokenOpt,
    UserError,
    answer_cache_dir,
    json_lines,
    resolve_server,
    resolve_token,
    too_far,
)
from service.client import QueryAnswer, TunehubClient
from service.schemas.configs import MAX_NEAREST_DISTANCE, MAX_QUERIES, ConfigQuery

__all__ = ["query_command", "read_queries", "EXIT_OK", "EXIT_UNANSWERED", "EXIT_UNREACHABLE"]

EXIT_OK = 0
EXIT_UNANSWERED = 1
EXIT_UNREACHABLE = 3


def read_queries(text: str, source: str, defaults: dict[str, Any]) -> list[tuple[int, ConfigQuery]]:
    """(line number, query) per non-blank line; UserError naming the line and field."""
    queries = []
    for number, fields in json_lines(text, source):
        if not isinstance(fields, dict):
            raise UserError(f"{source}:{number}: must be a JSON object")
        for name, value in defaults.items():
            if value is not None:
                fields.setdefault(name, value)
        try:
            queries.append((number, ConfigQuery.model_validate(fields)))
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"]) or "line"
            raise UserError(f"{source}:{number}: {where}: {error['msg']}") from None
    return queries


def bounded(answer: QueryAnswer, max_distance: float) -> QueryAnswer:
    """The answer, or no config and the reason when its nearest shape is too far (as ``best``)."""
    if answer.config is None or (refusal := too_far(answer.config, max_distance)) is None:
        return answer
    return replace(answer, config=None, error=refusal)


def _line(number: int, answer: QueryAnswer) -> str:
    return json.dumps(
        {
            "line": number,
            "query": answer.query.model_dump(exclude_none=True),
            "config": answer.config.model_dump(mode="json") if answer.config else None,
            "error": answer.error,
            "stale": answer.stale,
            "confirmed_at": answer.confirmed_at.isoformat() if answer.confirmed_at else None,
        }
    )


def query_command(
    file: Annotated[Path, typer.Option("--file", help="JSON lines of queries ('-': stdin).")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    device: Annotated[
        str | None, typer.Option(help="Device (key or part of a name) for lines without one.")
    ] = None,
    backend: Annotated[str | None, typer.Option(help="Backend for lines without one.")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Answer cache (default: <cache dir>/client).")
    ] = None,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help="Use the answer cache.")] = True,
    max_distance: MaxDistanceOpt = MAX_NEAREST_DISTANCE,
) -> None:
    """Best configs for many shapes: one JSON line out per line in (exit codes in the docs)."""
    source = "stdin" if str(file) == "-" else str(file)
    try:
        text = sys.stdin.read() if source == "stdin" else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {source}: {exc}") from None
    queries = read_queries(text, source, {"device": device, "backend": backend})
    directory = (cache_dir or answer_cache_dir()) if cache else None
    answers: list[tuple[int, QueryAnswer]] = []
    with TunehubClient(resolve_server(server), resolve_token(token), cache_dir=directory) as client:
        for start in range(0, len(queries), MAX_QUERIES):
            chunk = queries[start : start + MAX_QUERIES]
            results = client.query([q for _, q in chunk])
            answers += [
                (number, bounded(a, max_distance))
                for (number, _), a in zip(chunk, results, strict=True)
            ]
    for number, answer in answers:
        sys.stdout.write(_line(number, answer) + "\n")
    sys.stdout.flush()
    if any(a.config is None and a.unreachable for _, a in answers):
        raise typer.Exit(EXIT_UNREACHABLE)
    if any(a.config is None for _, a in answers):
        raise typer.Exit(EXIT_UNANSWERED)
