"""The type of a decoded JSON value, by the name JSON Schema gives it: for messages that say what a value is
(``expected string, got integer 7``) and for schemas built from example values.

Pure: no I/O.
"""

from __future__ import annotations

__all__ = ["json_type"]


def json_type(value: object, *, integers: bool = True) -> str:
    """``null``, ``boolean``, ``integer``, ``number``, ``string``, ``array`` or ``object``; a value that JSON
    cannot hold (a tuple, a date) by its Python type's name.

    ``integers``: a whole number (a Python ``int``) is an ``integer``, as JSON Schema says; ``False``: a
    ``number`` like any other, as JSON itself says (its grammar has no integers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer" if integers else "number"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
