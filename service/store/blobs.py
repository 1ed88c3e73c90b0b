"""The artifact store: files on disk, content-addressed by sha256, written atomically.

    store = ArtifactStore(settings.artifact_root)
    staged = await store.receive(request.stream(), limit)   # a private file, its sha256 and size
    store.publish(staged)                                    # -> <root>/<sha[:2]>/<sha>
    store.path(sha256)                                       # where a stored artifact lies

A body is written to ``<root>/tmp/`` while its sha256 is computed, fsynced, and renamed into
place only once the caller has checked it: a reader never sees a partial file, and two
uploads of the same bytes end as one file (the second rename replaces it with equal bytes).
The root may be a shared volume (``TUNEHUB_ARTIFACT_DIR``); the database keeps which
artifacts exist, the store only their bytes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

from anyio import to_thread

from service.errors import BodyTooLarge

__all__ = ["ArtifactStore", "StagedBlob"]

#: bytes gathered before one write (each write is a hop to a worker thread)
_WRITE_CHUNK = 1 << 20


@dataclass
class StagedBlob:
    """A received body in its private file, not yet published."""

    path: Path
    sha256: str
    size: int

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


class ArtifactStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @staticmethod
    def relative(sha256: str) -> str:
        """Where an artifact lies under the root: ``<sha[:2]>/<sha>``."""
        return f"{sha256[:2]}/{sha256}"

    def path(self, sha256: str) -> Path:
        return self.root / self.relative(sha256)

    def _staging(self) -> Path:
        folder = self.root / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    async def receive(self, chunks: AsyncIterator[bytes], limit: int) -> StagedBlob:
        """Write a body into a private file under ``<root>/tmp``, hashing it; BodyTooLarge
        (and nothing left behind) once it grows past ``limit`` bytes."""
        staging = await to_thread.run_sync(self._staging)
        fd, name = await to_thread.run_sync(partial(tempfile.mkstemp, dir=staging, suffix=".part"))
        path = Path(name)
        digest = hashlib.sha256()
        size = 0
        pending = bytearray()
        try:
            with os.fdopen(fd, "wb") as handle:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLarge(f"artifact larger than {limit} bytes")
                    digest.update(chunk)
                    pending += chunk
                    if len(pending) >= _WRITE_CHUNK:
                        await to_thread.run_sync(handle.write, bytes(pending))
                        pending.clear()
                await to_thread.run_sync(_finish, handle, bytes(pending))
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return StagedBlob(path, digest.hexdigest(), size)

    def publish(self, staged: StagedBlob) -> Path:
        """Move a checked blob to its content address (atomic; equal bytes may replace equal
        bytes) and make it readable by the service's group and others."""
        final = self.path(staged.sha256)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(staged.path, 0o644)
        os.replace(staged.path, final)
        return final


def _finish(handle: BinaryIO, tail: bytes) -> None:
    handle.write(tail)
    handle.flush()
    os.fsync(handle.fileno())
