"""Relaying a tool call's ``notifications/progress`` to the gateway's own caller.

The SDK hands each progress notification of a call to its callback in a task of its own, so
the call's answer can come back while a notification is still being written to the caller. A
relay lets the call path wait for those (bounded) before it answers, and drops any that arrive
later: a caller never sees progress after the result, which MCP forbids and agent-service
would not expect.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

__all__ = ["ProgressRelay", "ProgressSink"]

ProgressSink = Callable[[float, float | None, str | None], Awaitable[None]]
"""Where a progress notification goes: ``(progress, total, message)``."""

_DRAIN_SECONDS = 5.0
"""How long the answer waits for notifications still being written (a caller that reads slowly)."""


class ProgressRelay:
    """A ``ProgressFnT`` for one call that forwards to ``sink`` until the call has its answer."""

    def __init__(self, sink: ProgressSink) -> None:
        self._sink = sink
        self._closed = False
        self._writing = 0
        self._drained: anyio.Event | None = None

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self._closed:
            return
        self._writing += 1
        try:
            await self._sink(progress, total, message)
        finally:
            self._writing -= 1
            if self._writing == 0 and self._drained is not None:
                self._drained.set()

    async def close(self) -> None:
        """Let notifications that arrived before the answer finish (bounded); drop any after it."""
        # Notifications the SDK received before the answer have had their tasks started by now:
        # one checkpoint lets them reach the sink.
        await anyio.lowlevel.checkpoint()
        if self._writing:  # most calls send no progress: no deadline to set (a cancel scope and a timer) then
            with anyio.move_on_after(_DRAIN_SECONDS):
                while self._writing:
                    self._drained = anyio.Event()
                    await self._drained.wait()
        self._closed = True
