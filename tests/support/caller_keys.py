"""Caller keys in tests: the hash a callers file holds, and the headers a caller sends."""

from __future__ import annotations

import hashlib

__all__ = ["as_caller", "key_entry", "key_sha256"]


def key_sha256(key: str) -> str:
    """The ``sha256`` a callers file's ``[[keys]]`` entry holds for ``key``, made as docs/callers.md tells operators
    to (``sha256sum``), not with the service's own function: a service hashing otherwise fails the tests."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_entry(name: str, tenant: str, key: str, *, trusted: bool = False, role: str | None = None) -> str:
    """A callers file's ``[[keys]]`` entry for ``key`` (TOML, ending in a blank line); ``role``: the key's own
    (``admin``, ``operator``)."""
    return (
        f'[[keys]]\nname = "{name}"\ntenant = "{tenant}"\nsha256 = "{key_sha256(key)}"\n'
        + ("trusted = true\n" if trusted else "")
        + (f'role = "{role}"\n' if role is not None else "")
    )


def as_caller(key: str, user: str | None = None, *, role: str | None = None) -> dict[str, str]:
    """The headers of a request sent with ``key``, naming the end user ``user`` and the user's ``role``
    (``X-User-Role``) when given."""
    headers = {"Authorization": f"Bearer {key}"} | ({"X-User-Id": user} if user is not None else {})
    return headers | ({"X-User-Role": role} if role is not None else {})
