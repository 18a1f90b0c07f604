"""What ``call-tool`` answers, read for the run: a result, an error result the model can act on, or a question the
tool's server asks its user (an ``elicitation`` event, contract section 3 of issue 33); and the ends of a peer's
stream. A rejected secret and an address the outbound policy blocks raise instead: the run cannot go on."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
from pydantic import ValidationError

from agent_service.core.errors import (
    AUTHORIZATION_REQUIRED,
    OUTBOUND_BLOCKED,
    AuthorizationNeeded,
    UpstreamError,
    outbound_blocked,
)
from suite_common.logging import get_logger
from suite_common.peer_client import PeerReply, PeerStream
from suite_common.sse_parser import EventStreamParser
from suite_common.wire import AuthorizationRequiredError, CallToolElicitation, CallToolProgress, CallToolResponse

__all__ = [
    "MALFORMED_CONSENT",
    "ProgressSink",
    "QuestionSink",
    "error_result",
    "failed_call",
    "read_call_events",
    "read_to_the_end",
    "unauthorized",
]

_log = get_logger("agent_service.peers")

ProgressSink = Callable[[CallToolProgress], Awaitable[None]]
"""Where a tool call answered as SSE hands each progress event of the tool."""

QuestionSink = Callable[[CallToolElicitation], Awaitable[bool]]
"""Where a tool call answered as SSE hands its server's question: ``True``, the caller stops reading and the call
waits at the gateway for the answer; ``False``, the question was answered already (declined) and the call goes on."""

_STREAM_END_GRACE_SECONDS = 1.0
"""How long a peer's stream may go on after its last event before the client stops reading."""


async def read_to_the_end(stream: PeerStream) -> None:
    """A peer ends its stream right after its last event: reading on to that end hands the connection back to the
    pool, where leaving now would close it (and the next call connect). The answer is complete already, so whatever
    comes after it is ignored, a failure included."""
    with anyio.move_on_after(_STREAM_END_GRACE_SECONDS):
        try:
            async for _ in stream.chunks():
                pass
        except httpx.HTTPError:
            pass


async def read_call_events(
    stream: PeerStream, on_progress: ProgressSink, on_question: QuestionSink, service: str
) -> CallToolResponse | CallToolElicitation:
    """The events of a call answered as SSE (``call-tool``, or ``GET /mcp/v1/calls/{callId}/events``): progress to
    ``on_progress``, questions to ``on_question``; the call's result (an error result for an ``error`` event), or
    the question ``on_question`` stopped at. Raises ``ValueError`` (``ValidationError``) for a malformed event."""
    parser = EventStreamParser()
    async for chunk in stream.chunks():
        for event in parser.feed(chunk):
            if event.event == "progress":
                await on_progress(CallToolProgress.model_validate_json(event.data))
            elif event.event == "elicitation":
                question = CallToolElicitation.model_validate_json(event.data)
                if await on_question(question):
                    return question  # left here: the gateway keeps the call until it is answered
            elif event.event in ("result", "error"):
                await read_to_the_end(stream)  # hands the connection back to the pool
                return _streamed_answer(event.event, event.data)
    return error_result(f"The tool call failed: {service} ended the stream without a result.")


def failed_call(response: PeerReply) -> CallToolResponse:
    """A ``call-tool`` answered with an HTTP error: an error result saying why; a rejected secret, an address the
    outbound policy blocks, and a server that needs a person's consent (``AuthorizationNeeded``), raise."""
    try:
        error = json.loads(response.content)["error"]
        code = error.get("code")
        text = _failure_text(error)
    except (ValueError, KeyError, TypeError, AttributeError):
        if response.status == 401:
            raise unauthorized() from None
        return error_result(f"The tool call failed: HTTP {response.status}")
    if response.status == 401:
        # The gateway's own 401 for a consent not given (its body says so); any other 401 is the shared secret.
        if code != AUTHORIZATION_REQUIRED:
            raise unauthorized()
        needed = _authorization_needed(error)
        if needed is None:
            return error_result(f"The tool call failed: {MALFORMED_CONSENT}.")
        raise needed
    if response.status == 403 and code == OUTBOUND_BLOCKED:
        raise _blocked(error)
    return error_result(text)


def _streamed_answer(event: str, data: str) -> CallToolResponse:
    """The last event of a streamed ``call-tool``: its ``result``, or an ``error`` {code, message}."""
    if event == "result":
        return CallToolResponse.model_validate_json(data)
    try:
        error = json.loads(data)
        text = _failure_text(error)
    except (KeyError, TypeError):
        raise ValueError("an error event without a message") from None
    if error.get("code") == OUTBOUND_BLOCKED:  # the stream had started when the connection was refused
        raise _blocked(error)
    if error.get("code") == AUTHORIZATION_REQUIRED and (needed := _authorization_needed(error)) is not None:
        raise needed
    return error_result(text)


MALFORMED_CONSENT = "mcp-client-service sent an authorization_required answer without its server"


def _authorization_needed(error: dict[str, Any]) -> AuthorizationNeeded | None:
    """The gateway's ``authorization_required`` body as the signal the dispatch acts on; ``None`` if malformed (the
    call then fails as any other the gateway refused)."""
    try:
        return AuthorizationNeeded(AuthorizationRequiredError.model_validate(error))
    except ValidationError:
        return None


def _failure_text(error: dict[str, Any]) -> str:
    """What the model reads when call-tool did not answer with a result (``error`` is the gateway's
    ``{code, message}``, as a JSON error body or an SSE ``error`` event): the gateway's words, and for a
    tool that is unavailable for a while (``tool_unavailable``) when to try it again."""
    message = str(error["message"])
    retry_after = error.get("retryAfterSeconds")
    if error.get("code") == "tool_unavailable" and isinstance(retry_after, int | float):
        return f"The tool call failed: {message} It may work again in about {retry_after:g} s."
    return f"The tool call failed: {message}"


def _blocked(error: dict[str, Any]) -> UpstreamError:
    """The gateway's ``outbound_ssrf_blocked``: its words go to the log, the run ends with ours."""
    _log.warning("tool_call_blocked_by_outbound_policy", gateway_message=str(error.get("message", "")))
    return outbound_blocked()


def unauthorized() -> UpstreamError:
    return UpstreamError(
        "tools_unauthorized",
        "mcp-client-service rejected the shared secret: AGENT_MCP_SERVICE_SECRET must match MCP_CLIENT_SERVICE_SECRET",
    )


def error_result(text: str) -> CallToolResponse:
    return CallToolResponse(content=[{"type": "text", "text": text}], is_error=True, server="", duration_ms=0)
