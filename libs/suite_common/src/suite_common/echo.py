"""Caller input quoted back in error messages, bounded: the one place every service clips what it echoes.

An error message names what was wrong ("Unknown model 'gpt-4o'"), but the caller chose that text:
a 65 KB model name or 10,000 unknown tool names must not come back whole (nor fill the logs).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MAX_ECHO_CHARS", "MAX_ECHO_ITEMS", "clip", "clip_names"]

MAX_ECHO_CHARS = 120
"""Characters of one echoed value; a longer one is cut and ends with ``…``."""

MAX_ECHO_ITEMS = 10
"""Values of an echoed list; the rest are counted, not listed."""


def clip(value: object, limit: int = MAX_ECHO_CHARS) -> str:
    """``value`` as text, cut to ``limit`` characters (marked with ``…``) if longer."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip_names(values: Iterable[object], *, limit: int = MAX_ECHO_ITEMS) -> str:
    """``a, b, c and 9,997 more``: the first ``limit`` values, each clipped, then how many were left out."""
    shown: list[str] = []
    hidden = 0
    for value in values:
        if len(shown) < limit:
            shown.append(clip(value))
        else:
            hidden += 1
    listed = ", ".join(shown)
    return f"{listed} and {hidden:,} more" if hidden else listed
