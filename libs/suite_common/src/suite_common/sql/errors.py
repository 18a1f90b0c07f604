"""The one error a store built on ``suite_common.sql`` raises: every failure of its database becomes it."""

from __future__ import annotations

__all__ = ["StoreError"]


class StoreError(Exception):
    """The database could not be read or written; the message says what the store was doing and what the database
    answered (never its URL, which may hold a password, nor the statement's parameters, which hold the data)."""
