"""Pydantic's validation messages said for the user, one way for every answer (the API's 422s,
:mod:`service.api.errors`, and an import's refused lines, :mod:`service.store.imports`)."""

from __future__ import annotations

from typing import Any

from service.schemas.text import SURROGATE_REASON

__all__ = ["MAX_ECHO", "cut", "validation_message"]

#: an echoed name, value or message is cut to this many characters
MAX_ECHO = 200
_LENGTH_ERRORS = ("too_long", "too_short", "string_too_long", "string_too_short")


def cut(text: str) -> str:
    return text if len(text) <= MAX_ECHO else text[:MAX_ECHO] + "..."


def validation_message(error: Any) -> str:
    """One pydantic error's message: JSON errors with their reason, string lengths in
    characters (a constrained string's limits are said in "items" otherwise), a string
    pydantic cannot read (a lone surrogate) as the text rule says it, no "Value error, "."""
    kind, ctx, value = error.get("type"), error.get("ctx") or {}, error.get("input")
    if kind == "json_invalid" and ctx.get("error"):
        return f"malformed JSON: {ctx['error']}"
    if kind in _LENGTH_ERRORS and isinstance(value, str):
        most = kind.endswith("too_long")
        bound = ctx.get("max_length" if most else "min_length")
        return f"must have at {'most' if most else 'least'} {bound} characters, not {len(value)}"
    if kind == "string_unicode":
        return SURROGATE_REASON
    return cut(str(error.get("msg", "")).removeprefix("Value error, "))
