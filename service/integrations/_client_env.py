"""Where the drop-ins find tunehub: the server, token and answer cache, from the caller's
arguments or ``TUNEHUB_SERVER`` / ``TUNEHUB_TOKEN`` / ``TUNEHUB_CLIENT_CACHE`` (shared by the
Triton autotuner and the PyTorch ops)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from service.client import RetryPolicy, TunehubClient

__all__ = ["client_cache_dir", "env_client"]


def client_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The argument, else ``TUNEHUB_CLIENT_CACHE``, else ``<user cache dir>/tunehub/client``."""
    chosen = cache_dir or os.environ.get("TUNEHUB_CLIENT_CACHE")
    if chosen:
        return Path(chosen).expanduser()
    return Path(platformdirs.user_cache_dir("tunehub")) / "client"


def env_client(
    server: str | None,
    token: str | None,
    cache_dir: str | os.PathLike[str] | None,
    *,
    timeout: float = 10.0,
    retry: RetryPolicy | None = None,
) -> TunehubClient | None:
    """A client with the on-disk answer cache, or None when no server is named (argument or
    ``TUNEHUB_SERVER``)."""
    server = server or os.environ.get("TUNEHUB_SERVER")
    if not server:
        return None
    token = token or os.environ.get("TUNEHUB_TOKEN")
    return TunehubClient(
        server, token, cache_dir=client_cache_dir(cache_dir), timeout=timeout, retry=retry
    )
