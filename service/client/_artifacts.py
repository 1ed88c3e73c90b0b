"""Fetching and checking built artifacts on the client side (used by TunehubClient).

An artifact is code: it is kept only once its bytes have the sha256 and size its reference
names. The download goes to a private file beside its destination (``<dest>/<sha256>.so``) and
is renamed into place only after the check, so a reader never finds an unchecked or partial
file; a mismatch raises :class:`ArtifactMismatch` and leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from service.client._errors import ArtifactMismatch
from service.schemas.artifacts import ArtifactRef

__all__ = ["artifact_path", "file_digest", "verified_file", "keep_verified"]

_SHA256 = re.compile(r"[0-9a-f]{64}")


def artifact_path(ref: ArtifactRef, dest_dir: str | os.PathLike[str]) -> Path:
    """Where ``ref``'s artifact is kept: ``<dest_dir>/<sha256>.so``."""
    if not _SHA256.fullmatch(ref.sha256):  # the file name comes from it
        raise ArtifactMismatch(ref.sha256, ref.size, "(not a sha256)", 0, "the reference")
    return Path(dest_dir) / f"{ref.sha256}.so"


def file_digest(path: Path) -> tuple[str, int]:
    """(sha256 hex, size) of a file."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest(), handle.tell()


def verified_file(ref: ArtifactRef, path: Path) -> bool:
    """Whether ``path`` holds ``ref``'s bytes; a file that does not is removed."""
    if not path.is_file():
        return False
    if file_digest(path) == (ref.sha256, ref.size):
        return True
    path.unlink(missing_ok=True)  # a damaged or foreign file: fetched again
    return False


def keep_verified(ref: ArtifactRef, data: bytes, path: Path, source: str) -> Path:
    """Check ``data`` against ``ref``, then write it to ``path`` atomically (a private file in
    the same folder, fsynced, renamed). ArtifactMismatch, and nothing written, on a mismatch."""
    sha256 = hashlib.sha256(data).hexdigest()
    if (sha256, len(data)) != (ref.sha256, ref.size):
        raise ArtifactMismatch(ref.sha256, ref.size, sha256, len(data), source)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{ref.sha256[:16]}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(name, 0o644)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return path
