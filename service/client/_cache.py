"""An on-disk cache of GET answers, so that a build machine keeps getting answers while the
service is down, and revalidates them cheaply (``If-None-Match``) once it is back.

One JSON file per request key (sha256 of method, path and sorted query), written atomically
(a temporary file renamed over the old one), so concurrent build processes never read half a
file. Entries hold the answer's body, its ``ETag`` (if the server sent one) and when the
service last confirmed it. Nothing here decides freshness: the client asks the service every
time and falls back to an entry only when the service cannot answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["CacheEntry", "ResponseCache", "request_key"]

log = logging.getLogger(__name__)


def request_key(method: str, path: str, params: Mapping[str, Any] | None) -> str:
    """The cache key of a request: the same call always maps to the same key."""
    query = sorted((str(k), str(v)) for k, v in (params or {}).items() if v is not None)
    return json.dumps([method.upper(), path, query], separators=(",", ":"))


@dataclass(frozen=True)
class CacheEntry:
    key: str
    body: str
    etag: str | None
    #: when the service last answered with (or confirmed) this body
    confirmed_at: datetime


class ResponseCache:
    """Answers on disk under ``directory`` (created on first write)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.directory / digest[:2] / f"{digest}.json"

    def get(self, key: str) -> CacheEntry | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("key") != key:
                return None  # a hash collision, or a file from elsewhere: not ours
            return CacheEntry(
                key=key,
                body=str(data["body"]),
                etag=data.get("etag"),
                confirmed_at=datetime.fromisoformat(data["confirmed_at"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable cache entry %s: %s", path, exc)
            return None

    def put(self, key: str, body: str, etag: str | None) -> CacheEntry:
        entry = CacheEntry(key=key, body=body, etag=etag, confirmed_at=datetime.now(UTC))
        self._write(entry)
        return entry

    def confirm(self, entry: CacheEntry) -> CacheEntry:
        """The service said 304 Not Modified: the entry is fresh as of now."""
        return self.put(entry.key, entry.body, entry.etag)

    def drop(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def _write(self, entry: CacheEntry) -> None:
        path = self._path(entry.key)
        record = {
            "key": entry.key,
            "body": entry.body,
            "etag": entry.etag,
            "confirmed_at": entry.confirmed_at.isoformat(),
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            os.replace(tmp, path)
        except OSError as exc:  # a full or read-only disk must not break the build
            log.warning("cannot write cache entry %s: %s", path, exc)
