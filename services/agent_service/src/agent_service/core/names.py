"""The forms of the names callers and operators choose: tenants, keys and personas, and end users' ids.

Apart from everything (it imports nothing of the service), so that the callers file, the personas and the API
check one form each.
"""

from __future__ import annotations

import re

from suite_common.wire import TENANT_NAME_RULE, is_tenant_name

__all__ = ["MAX_USER_CHARS", "TENANT_NAME_RULE", "TOOL_PATTERN", "USER_ID_RULE", "is_name", "is_user_id"]

MAX_USER_CHARS = 128
_USER_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_USER_CHARS}}}")  # printable ASCII, no spaces: an id, not a display name
USER_ID_RULE = f"1 to {MAX_USER_CHARS} printable ASCII characters without spaces"

TOOL_PATTERN = re.compile(r"[^:\s]+(:[^:\s]+)?")
"""A rule's tool pattern (``agent_service.core.tenancy.tool_matches``): a tool's name, ``<server>:<tool>`` or
``<server>:*``; the approval rules' ``destructive`` has this form too."""


def is_name(text: str) -> bool:
    """A tenant's, key's or persona's name: one form for the three, the tenants' (``TENANT_NAME_RULE``, which the
    gateway takes too)."""
    return is_tenant_name(text)


def is_user_id(text: str) -> bool:
    """An end user's id (``X-User-Id``): ``USER_ID_RULE``."""
    return _USER_ID.fullmatch(text) is not None
