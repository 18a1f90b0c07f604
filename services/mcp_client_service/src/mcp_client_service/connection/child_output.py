"""What a stdio server writes besides JSON-RPC: its stderr, and stray lines on its stdout.

Both are logged as the server's own, redacted, and bounded: stderr up to a burst of lines and then
at a steady rate (the rest counted and reported), stray stdout lines a few per session.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import anyio

from suite_common.logging import get_logger

__all__ = ["ChildOutputLog"]

_log = get_logger("mcp_client_service.connection.child_output")

_NOISE_LOGGED_PER_SESSION = 5
"""Non-JSON-RPC lines of a stdio server logged per session; the rest are counted, not logged."""

_STDERR_BURST = 50
_STDERR_LINES_PER_SECOND = 10.0
"""A stdio server's stderr is logged up to a burst of lines, then at this rate; the rest is counted."""

_UNPRINTABLE = {code: f"\\x{code:02x}" for code in [*range(32), 127] if code != 9}
"""Control characters (ANSI escapes, carriage returns) a child could use to forge the log's own lines."""


class ChildOutputLog:
    """The log of one server's stderr and stray stdout lines; ``redact`` takes its secrets out first."""

    def __init__(self, server: str, redact: Callable[[str], str]) -> None:
        self._server = server
        self._redact = redact
        self._noise_lines = 0
        self._stderr_tokens = float(_STDERR_BURST)
        self._stderr_refilled_at = -math.inf
        self._stderr_suppressed = 0

    def new_session(self) -> None:
        """A new session may log its first stray stdout lines again."""
        self._noise_lines = 0

    def on_stdout_noise(self, line: str) -> None:
        """A line on stdout that is not JSON-RPC (the transport skipped it)."""
        self._noise_lines += 1
        if self._noise_lines <= _NOISE_LOGGED_PER_SESSION:
            _log.warning(
                "mcp_server_stdout_not_jsonrpc",
                server=self._server,
                line=self._redact(line),
                detail="a stdio server must write only JSON-RPC messages to stdout; the line was skipped",
                more_are_not_logged=self._noise_lines == _NOISE_LOGGED_PER_SESSION,
            )

    def on_stderr(self, line: str) -> None:
        """A line the stdio child wrote to stderr: logged as its own, within a rate."""
        now = anyio.current_time()
        elapsed = now - self._stderr_refilled_at
        self._stderr_refilled_at = now
        self._stderr_tokens = min(float(_STDERR_BURST), self._stderr_tokens + elapsed * _STDERR_LINES_PER_SECOND)
        if self._stderr_tokens < 1:
            self._stderr_suppressed += 1
            return
        self._stderr_tokens -= 1
        suppressed, self._stderr_suppressed = self._stderr_suppressed, 0
        extra = {"lines_not_logged_before": suppressed} if suppressed else {}
        _log.info("mcp_server_stderr", server=self._server, line=self._redact(line.translate(_UNPRINTABLE)), **extra)

    def report_suppressed(self) -> None:
        """Say how many stderr lines went unlogged (once the child's stderr has been read to its end)."""
        if self._stderr_suppressed:
            _log.info(
                "mcp_server_stderr_not_logged",
                server=self._server,
                lines=self._stderr_suppressed,
                detail=f"stderr is logged at most {_STDERR_LINES_PER_SECOND:g} lines a second after a burst",
            )
            self._stderr_suppressed = 0
