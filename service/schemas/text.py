"""The one rule of what text the service takes, and how it reads text stored before the rule.

A string a client sends may hold any character but two kinds:

- NUL (U+0000): PostgreSQL text cannot hold it;
- a lone UTF-16 surrogate (U+D800 to U+DFFF): not a character at all. JSON can spell one
  (``"\\ud800"``) and Python's parser takes it, but no UTF-8 text holds it, so it can be
  neither stored in a text column nor sent back in an answer.

:func:`text_error` says which, :func:`check_text` raises it (every ``SafeStr`` of
:mod:`service.schemas.common` runs it), :data:`TEXT_PATTERN` says it in JSON Schema.

Reads: a JSON column written before this rule can still hold an escaped surrogate.
:func:`loads` (the engines' JSON decoder, :mod:`service.store.db`) and :func:`scrub` (the
answers' last line, :mod:`service.api.errors`) replace each with U+FFFD, the replacement
character, so every answer can be written as UTF-8.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "TEXT_PATTERN",
    "REPLACEMENT",
    "SURROGATE_REASON",
    "text_error",
    "check_text",
    "scrub",
    "loads",
]

_BAD = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: an escaped surrogate in JSON text (``\ud800``), the sign that a decoded value needs scrubbing
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
#: what JSON Schema says of every accepted string (escapes ECMA-262 and Python's re read alike)
TEXT_PATTERN = r"^[^\x00\ud800-\udfff]*$"
#: what a stored lone surrogate is read as
REPLACEMENT = "\ufffd"
#: why a string with a lone surrogate is refused
SURROGATE_REASON = (
    "must not contain a lone UTF-16 surrogate (U+D800 to U+DFFF): it is not a character and "
    "cannot be stored"
)


def text_error(value: str) -> str | None:
    """Why ``value`` is refused, or None when it is acceptable text."""
    match = _BAD.search(value)
    if match is None:
        return None
    if match.group() == "\x00":
        return "must not contain NUL characters"
    return f"{SURROGATE_REASON} (U+{ord(match.group()):04X} at character {match.start()})"


def check_text(value: str) -> str:
    """``value``, or ValueError saying what is wrong with it (pydantic makes that a 422)."""
    reason = text_error(value)
    if reason is not None:
        raise ValueError(reason)
    return value


def _clean(text: str) -> str:
    return _SURROGATE.sub(REPLACEMENT, text) if _SURROGATE.search(text) else text


def scrub(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings and keys replaced by U+FFFD (lists,
    tuples and dicts walked; other values kept)."""
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, dict):
        return {scrub(key): scrub(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item) for item in value]
    return value


def loads(text: str | bytes) -> Any:
    """``json.loads``, with lone surrogates scrubbed (looked for only where the text escapes
    one, so the common case costs one search of the text)."""
    value = json.loads(text)
    raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return scrub(value) if _ESCAPED_SURROGATE.search(raw) else value
