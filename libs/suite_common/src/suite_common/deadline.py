"""The one deadline type of the suite; between services it travels as ``X-Deadline-Ms``.

A caller sends the milliseconds it has left (``Deadline.header``); the callee reads them back
with ``Deadline.from_header``, shortened to its own limit, and hands a child deadline
(``capped``) to each piece of work below it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from suite_common.errors import ApiError
from suite_common.wire import DEADLINE_HEADER

__all__ = ["Deadline"]


def _now() -> float:
    """``anyio.current_time()``: read from the running asyncio loop directly when there is one, as anyio's
    asyncio backend does, without its detection of the backend (a tenth of the cost; the loop reads the
    clock a few times per round)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:  # another backend (trio): ask anyio
        return anyio.current_time()


@dataclass(frozen=True, slots=True)
class Deadline:
    """The moment a piece of work must be over, on anyio's clock (``anyio.current_time()``).

    That clock rather than ``time.monotonic``: it is the clock of anyio's cancel scopes, which
    enforce every deadline here (``anyio.CancelScope(deadline=deadline.at)`` takes ``at`` as it
    is), so the scope that cuts the work and the code that reports the time left never disagree
    (under asyncio it is the event loop's monotonic clock; under trio, trio's own, a mock one in
    its tests). Hence a ``Deadline`` is made and read inside an event loop, except ``never()``.

    ``seconds``: the length it was given, for messages ("did not finish within 30 s").
    """

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """``seconds`` from now."""
        return cls(_now() + seconds, seconds)

    @classmethod
    def never(cls) -> Deadline:
        """No deadline at all: the callee's own limits apply."""
        return cls(math.inf, math.inf)

    @classmethod
    def from_header(cls, headers: Mapping[str, str], *, cap: float) -> Deadline:
        """``cap`` seconds from now, shortened by the caller's ``X-Deadline-Ms``; already expired when it is 0.

        A header that is not a number is the caller's mistake: a 400 that says so.
        """
        value = headers.get(DEADLINE_HEADER)
        if value is None:
            return cls.after(cap)
        try:
            milliseconds = float(value.strip())
        except ValueError:
            milliseconds = math.nan
        if not math.isfinite(milliseconds):
            raise ApiError(400, "invalid_request", f"The {DEADLINE_HEADER} header must be a number of milliseconds.")
        return cls.after(min(cap, max(0.0, milliseconds / 1000)))

    def remaining(self) -> float:
        """Seconds left, never below 0 (``inf`` for ``never()``)."""
        return max(0.0, self.at - _now())

    def expired(self) -> bool:
        return _now() >= self.at

    def capped(self, seconds: float) -> Deadline:
        """A child deadline: this one, or ``seconds`` from now when that comes first."""
        now = _now()
        at = min(self.at, now + seconds)
        return Deadline(at, max(0.0, at - now))

    def header(self) -> dict[str, str]:
        """``X-Deadline-Ms`` with the whole milliseconds left, for a call to another service; none for ``never()``."""
        left = self.at - _now()
        if left == math.inf:
            return {}
        return {DEADLINE_HEADER: str(int(left * 1000)) if left > 0 else "0"}
