"""The ways a server can be unavailable, and how a failure is told in one line."""

from __future__ import annotations

import re
from typing import TypeVar

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from mcp_client_service.config.references import UnresolvedReferenceError
from suite_common.ssrf import EgressError

__all__ = [
    "POST_FAILED_PREFIX",
    "CircuitOpenError",
    "OutboundBlockedError",
    "ServerStartError",
    "ServerUnavailableError",
    "cause_of",
    "connection_lost",
    "describe_error",
    "request_timed_out",
]

POST_FAILED_PREFIX = "the message could not be posted: "
"""How the gateway's own SSE transport words a request it could not post (``legacy_sse``)."""

_CLOSED_BY_THE_CLIENT = ("Connection closed", "SSE stream failed: ", "SSE stream ended ", POST_FAILED_PREFIX)
"""How mcp 2.3's client (its dispatcher, its streamable HTTP transport) and our SSE transport word
the ``CONNECTION_CLOSED`` errors they raise themselves when a connection or a response stream ends."""

_TIMED_OUT_IN_THE_CLIENT = re.compile(r"Request '[^']*' timed out")
"""How mcp 2.3's client words the ``REQUEST_TIMEOUT`` it raises when a request's read timeout passes."""


class ServerStartError(Exception):
    """A server could not be started or reached; the message says why and is safe to show."""


class ServerUnavailableError(Exception):
    """The server has no open session right now; the message says what state it is in and why."""


class CircuitOpenError(ServerUnavailableError):
    """The server failed repeatedly, so calls are refused until its circuit half-opens."""


class OutboundBlockedError(Exception):
    """A call's connection to its server was refused by the outbound policy: the tool was not called.

    Not a tool error to feed back to a model: whoever controls a server's DNS could probe the inside of the network
    one call at a time. The API answers 403 ``outbound_ssrf_blocked`` and agent-service ends the run.
    """

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server
        self.message = message


_E = TypeVar("_E", bound=BaseException)


def cause_of(error: BaseException, kind: type[_E]) -> _E | None:
    """The first ``kind`` in ``error``, the groups it is in and the chain of its causes; ``None`` if none is."""
    if isinstance(error, kind):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = cause_of(inner, kind)
            if found is not None:
                return found
    return cause_of(error.__cause__, kind) if error.__cause__ is not None else None


def describe_error(error: BaseException) -> str:
    """A one-line reason for a log line or a status page: the innermost real errors, by type."""
    if isinstance(error, BaseExceptionGroup):
        leaves = [describe_error(inner) for inner in error.exceptions]
        return "; ".join(dict.fromkeys(leaves))  # keep order, drop repeats
    if isinstance(error, ServerStartError | ServerUnavailableError):
        return str(error)
    if isinstance(error, EgressError):
        return f"refused by the SSRF guard: {error.message}"
    if isinstance(error, UnresolvedReferenceError):
        return f"a secret reference of its config cannot be resolved: {error}"
    text = str(error).strip()
    if "recursion limit exceeded" in text:
        # pydantic's JSON parser gives up on a message nested about 200 levels deep (an absurd
        # schema, most likely), and the SDK fails the request that it answered with its words.
        return (
            "the server's answer is nested too deeply for the SDK's JSON parser to read "
            "(a tool's schema nested about 200 levels deep?)"
        )
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# -32000 (CONNECTION_CLOSED) and -32001 (REQUEST_TIMEOUT) are the SDK's own codes for what it saw
# happen, but they lie in -32000..-32099, the range JSON-RPC leaves to servers: a server may answer
# a request with either. Such an answer is the server refusing the request, its session alive; only
# the errors the client raised itself mean a lost connection or a passed time limit.


def connection_lost(error: BaseException) -> bool:
    """Whether ``error`` is the client's own word that the connection (or a response stream) ended,
    rather than a server's error answer that happens to use code -32000."""
    return (
        isinstance(error, MCPError)
        and error.code == CONNECTION_CLOSED
        and error.data is None
        and error.message.startswith(_CLOSED_BY_THE_CLIENT)
    )


def request_timed_out(error: BaseException) -> bool:
    """Whether ``error`` is a time limit passing (ours, or the SDK's read timeout), rather than a
    server's error answer that happens to use code -32001."""
    if isinstance(error, TimeoutError):
        return True
    return (
        isinstance(error, MCPError)
        and error.code == REQUEST_TIMEOUT
        and error.data is None
        and _TIMED_OUT_IN_THE_CLIENT.fullmatch(error.message) is not None
    )
