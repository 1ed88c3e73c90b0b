"""``tunehub serve --workers N``: N uvicorn processes answering on one port.

A lookup is CPU-bound Python, so one process uses one core at most; several processes behind
one listening socket (uvicorn's supervisor; the kernel hands each connection to one of them)
use the others. The database is migrated once, before the processes start
(:func:`service.cli.serve.serve`). Each process builds the app from the factory
``service.api.app:create_app`` with the settings of ``serve``, passed through the
environment, and keeps its own read model of the answers (``service.store.read_model``), so
a write committed through any process is seen by every other's next lookup.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable

from service.settings import Settings

__all__ = ["APP_FACTORY", "settings_environment", "run_processes", "Listening"]

#: the import string uvicorn builds each process's app from (a factory taking no arguments)
APP_FACTORY = "service.api.app:create_app"


def settings_environment(settings: Settings) -> dict[str, str | None]:
    """``TUNEHUB_*`` variables that make ``Settings()`` in a child process equal ``settings``
    (None: the variable must be unset)."""
    env: dict[str, str | None] = {}
    for name, value in settings.model_dump(mode="json").items():
        key = f"TUNEHUB_{name.upper()}"
        if value is None:
            env[key] = None
        elif isinstance(value, dict | list):
            env[key] = json.dumps(value)
        elif isinstance(value, bool):
            env[key] = "true" if value else "false"
        else:
            env[key] = str(value)
    return env


class Listening:
    """Stands in for a ``uvicorn.Server`` where the local worker waits for the API: started
    once the port accepts a connection."""

    def __init__(self, host: str, port: int) -> None:
        self.host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        self.port = port
        self.servers: list[object] = []

    @property
    def started(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False


def run_processes(
    settings: Settings, workers: int, access_log: bool, on_bound: Callable[[int], None]
) -> None:
    """Run ``workers`` API processes on settings.host/port until interrupted; ``on_bound``
    gets the bound port before they start (the local worker starts there)."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    for key, value in settings_environment(settings).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    config = uvicorn.Config(
        APP_FACTORY,
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=workers,
        log_level="info",
        access_log=access_log,
    )
    sock = config.bind_socket()
    on_bound(int(sock.getsockname()[1]))
    Multiprocess(config, sockets=[sock]).run()
