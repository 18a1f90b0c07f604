"""The forms of the names callers and operators choose: tenants, keys and personas, and end users' ids.

Apart from everything (it imports nothing of the service), so that the callers file, the personas and the API
check one form each.
"""

from __future__ import annotations

import re

__all__ = ["MAX_USER_CHARS", "USER_ID_RULE", "is_name", "is_user_id"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_USER_CHARS = 128
_USER_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_USER_CHARS}}}")  # printable ASCII, no spaces: an id, not a display name
USER_ID_RULE = f"1 to {MAX_USER_CHARS} printable ASCII characters without spaces"


def is_name(text: str) -> bool:
    """A tenant's, key's or persona's name: letters, digits, ``.``, ``_`` or ``-``, at most 64, not starting with a
    punctuation mark."""
    return _NAME.fullmatch(text) is not None


def is_user_id(text: str) -> bool:
    """An end user's id (``X-User-Id``): ``USER_ID_RULE``."""
    return _USER_ID.fullmatch(text) is not None
