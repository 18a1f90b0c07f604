"""The caller's deadline, passed between the services in ``X-Deadline-Ms``."""

from __future__ import annotations

import math
from collections.abc import Mapping

from suite_common.errors import ApiError
from suite_common.wire import DEADLINE_HEADER

__all__ = ["parse_deadline_ms", "time_budget"]


def parse_deadline_ms(value: str | None) -> float | None:
    """Seconds left according to an ``X-Deadline-Ms`` header (never below 0); ``ValueError`` if not a number."""
    if value is None:
        return None
    try:
        milliseconds = float(value.strip())
    except ValueError:
        milliseconds = math.nan
    if not math.isfinite(milliseconds):
        raise ValueError(f"not a number of milliseconds: {value!r}")
    return max(0.0, milliseconds / 1000)


def time_budget(headers: Mapping[str, str], cap: float) -> float:
    """Seconds a handler may spend: ``cap``, shortened by the caller's deadline; 0 when it has passed.

    A header that is not a number is the caller's mistake: a 400 that says so.
    """
    try:
        remaining = parse_deadline_ms(headers.get(DEADLINE_HEADER))
    except ValueError:
        raise ApiError(
            400, "invalid_request", f"The {DEADLINE_HEADER} header must be a number of milliseconds."
        ) from None
    return cap if remaining is None else min(cap, remaining)
