"""What every CLI command shares: the user-error type, consoles, options, server and token."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from service.client import TunehubClient
from service.schemas.configs import MAX_NEAREST_DISTANCE, BestConfigOut
from service.settings import Settings, get_settings
from tuner.problems import DTYPES
from tuner.registry import BACKENDS, STRATEGIES
from tuner.types import Objective

__all__ = [
    "ADMIN_TOKEN_FILE",
    "UserError",
    "stdout",
    "stderr",
    "resolve_server",
    "resolve_token",
    "make_client",
    "answer_cache_dir",
    "check_choice",
    "json_lines",
    "ServerOpt",
    "TokenOpt",
    "DTypeOpt",
    "StrategyOpt",
    "MaxVariantsOpt",
    "MaxSecondsOpt",
    "BackendOpt",
    "SeedOpt",
    "ObjectiveOpt",
    "OBJECTIVES",
    "DeviceOpt",
    "DimOpt",
    "MaxDistanceOpt",
    "too_far",
]

#: file in the data dir holding the admin token ``tunehub serve`` creates (mode 600)
ADMIN_TOKEN_FILE = "admin-token"

stdout = Console(highlight=False, emoji=False)  # a device name like "x:X:y" is text
stderr = Console(stderr=True, highlight=False, emoji=False)


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""


# -- shared options -----------------------------------------------------------------------

ServerOpt = Annotated[
    str | None,
    typer.Option("--server", envvar="TUNEHUB_SERVER", help="API URL (default: from settings)."),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="TUNEHUB_TOKEN", help="API token (default: <data_dir>/admin-token)."
    ),
]
DTypeOpt = Annotated[str, typer.Option("--dtype", help=f"One of {', '.join(DTYPES)}.")]
StrategyOpt = Annotated[str, typer.Option("--strategy", help=f"One of {', '.join(STRATEGIES)}.")]
MaxVariantsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-variants",
        help="Candidates at most. Exhaustive then measures the space's problem-aware order "
        "where it has one (CUDA GEMM), else a stratified sample covering every value of every "
        "parameter; never the first N of the enumeration.",
    ),
]
MaxSecondsOpt = Annotated[float | None, typer.Option("--max-seconds", help="Seconds per problem.")]
BackendOpt = Annotated[str, typer.Option("--backend", help=f"One of {', '.join(BACKENDS)}.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of random and model-guided search.")]
#: what a job minimises (tuner.types.Objective)
OBJECTIVES: tuple[Objective, ...] = ("time", "energy")
ObjectiveOpt = Annotated[
    str,
    typer.Option(
        "--objective",
        help="time, or energy: joules per launch from NVML (GPU backends only).",
    ),
]
DeviceOpt = Annotated[
    str | None,
    typer.Option("--device", help="A backend (cpu, cuda), a device key or part of a device name."),
]
DimOpt = Annotated[int, typer.Option()]
MaxDistanceOpt = Annotated[
    float,
    typer.Option(
        "--max-distance",
        min=0.0,
        help="Farthest nearest-shape answer accepted (log2 distance of the dims; "
        f"{MAX_NEAREST_DISTANCE:g} = one dim 4x off). Farther: exit 1.",
    ),
]


def too_far(answer: BestConfigOut, max_distance: float) -> str | None:
    """Why a nearest answer is refused (farther than ``max_distance``), or None to accept it:
    ``best`` and ``query`` apply the same bound."""
    if answer.exact or answer.distance <= max_distance:
        return None
    tuned = ",".join(f"{k}={v}" for k, v in answer.tuned_problem.items())
    return (
        f"not tuned yet: the nearest tuned shape ({tuned}) is at log2 distance "
        f"{answer.distance:.2f}, farther than {max_distance:g}; tune this shape, or pass "
        f"--max-distance {math.ceil(answer.distance * 100) / 100:g} to accept it"
    )


def resolve_server(server: str | None, settings: Settings | None = None) -> str:
    if server:
        return server.rstrip("/")
    settings = settings or get_settings()
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}"


def resolve_token(token: str | None, settings: Settings | None = None) -> str | None:
    """--token, then TUNEHUB_TOKEN (typer reads it into --token), then the admin-token file."""
    if token:
        return token.strip()
    path = Path((settings or get_settings()).data_dir) / ADMIN_TOKEN_FILE
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def make_client(
    server: str | None, token: str | None, cache_dir: Path | None = None
) -> TunehubClient:
    """The client of a command; ``cache_dir`` turns on its answer cache (lookups)."""
    return TunehubClient(resolve_server(server), resolve_token(token), cache_dir=cache_dir)


def answer_cache_dir(settings: Settings | None = None) -> Path:
    """Where ``best`` and ``query`` keep answers: ``<cache dir>/client``."""
    return (settings or get_settings()).cache_dir / "client"


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise UserError(f"{name} {value!r} is not one of: {', '.join(choices)}")


def json_lines(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of a JSON-lines file; UserError
    naming ``source`` and the line that is not JSON."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise UserError(f"{source}:{number}: not JSON ({exc})") from None
