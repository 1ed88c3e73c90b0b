"""Writes the op shapes the PyTorch ops saw untuned to a file, one JSON line each, for
``tunehub tune --from-file``.

A line is a ConfigQuery-like record ``{"op", "dtype", "layout", "problem", "device"}`` (the
device is the full key ``backend:name:arch:sm_count``), so the same file also feeds
``tunehub query --file``. Lines are de-duplicated, also against what the file already holds,
and each is flushed when written: a run that crashes keeps what it saw.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["ShapeRecorder", "record_line"]

log = logging.getLogger(__name__)


def record_line(record: dict[str, Any]) -> str:
    """The canonical text of a record (sorted keys): equal records, equal lines."""
    return json.dumps(record, sort_keys=True, separators=(", ", ": "))


class ShapeRecorder:
    """Appends new records to ``path`` (created with its folder on first write)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self.written = 0
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("cannot read %s (recording anyway): %s", self.path, exc)
            text = ""
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # tune --from-file names the bad line; here it only is not a duplicate
            if isinstance(record, dict):
                self._seen.add(record_line(record))

    def add(self, record: dict[str, Any]) -> bool:
        """Write ``record`` unless the file has it; True when it was written."""
        line = record_line(record)
        with self._lock:
            if line in self._seen:
                return False
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as handle:
                    handle.write(line + "\n")
            except OSError as exc:
                log.warning("cannot record a shape in %s: %s", self.path, exc)
                return False
            self._seen.add(line)
            self.written += 1
            return True
