"""The ways a server can be unavailable, and how a failure is told in one line."""

from __future__ import annotations

from mcp_client_service.references import UnresolvedReferenceError
from mcp_client_service.ssrf_guard import EgressError

__all__ = ["CircuitOpenError", "ServerStartError", "ServerUnavailableError", "describe_error"]


class ServerStartError(Exception):
    """A server could not be started or reached; the message says why and is safe to show."""


class ServerUnavailableError(Exception):
    """The server has no open session right now; the message says what state it is in and why."""


class CircuitOpenError(ServerUnavailableError):
    """The server failed repeatedly, so calls are refused until its circuit half-opens."""


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
