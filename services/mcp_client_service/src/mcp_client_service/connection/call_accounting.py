"""The calls of one server: how many are in flight, how long they took, how they ended.

Outcomes feed the server's circuit breaker; calls in flight keep a busy server's session from
being ended by an unanswered probe, and let a reload wait for them before closing a session.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from mcp_client_service.connection.breaker import CallDurations, CircuitBreaker
from suite_common.logging import get_logger

__all__ = ["CallAccounting"]

_log = get_logger("mcp_client_service.connection.call_accounting")


class CallAccounting:
    """Calls in flight on one server and their outcomes.

    ``on_change`` is told when the outcomes change the server's state (a failure, a recovery);
    ``on_circuit_opened`` when failing calls open its circuit.
    """

    def __init__(
        self,
        server: str,
        breaker: CircuitBreaker,
        *,
        on_change: Callable[[], None],
        on_circuit_opened: Callable[[], None],
    ) -> None:
        self._server = server
        self._breaker = breaker
        self._on_change = on_change
        self._on_circuit_opened = on_circuit_opened
        self.durations = CallDurations()
        self.in_flight = 0
        """Requests on the session now (``tools/call``, resources, prompts): the caller counts them up,
        ``done()`` counts them down."""
        self.last_call_failed = False
        """Whether the last call that reached the server failed: the server is ``degraded`` meanwhile."""
        self._idle: anyio.Event | None = None
        self._lost_with_session = 0

    def new_session(self) -> None:
        self.last_call_failed = False

    def done(self) -> None:
        """A request in flight has ended, whichever way."""
        self.in_flight -= 1
        if self.in_flight == 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Return once no call is in flight (bound it with a timeout)."""
        while self.in_flight:
            self._idle = anyio.Event()
            await self._idle.wait()

    def lost_with_session(self) -> None:
        """A call failed because the session dropped under it: the session's end is counted once, not here."""
        self._lost_with_session += 1

    def record(self, seconds: float, *, ok: bool | None) -> None:
        """A call that reached the server: its duration for the p50, its outcome for the breaker.

        ``ok=None``: the outcome says nothing of the server's health (the caller's own deadline
        ended it, its answer was too large), so the breaker is not told.
        """
        self.durations.add(seconds)
        if ok is None:
            return
        if not ok and self._lost_with_session:
            # The session dropped under this call: the supervisor counts that once, as the session's end.
            self._lost_with_session -= 1
            return
        failed_before, self.last_call_failed = self.last_call_failed, not ok
        if ok:
            self._breaker.record_success()
            if failed_before:
                self._on_change()
            return
        if self._breaker.record_failure("calls failed at the transport or protocol level"):
            _log.warning("mcp_server_circuit_open", server=self._server, reason="calls failed")
            self._on_circuit_opened()  # the supervisor announces when it half-opens
        self._on_change()
