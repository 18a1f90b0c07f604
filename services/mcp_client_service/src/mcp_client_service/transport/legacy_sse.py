"""The older HTTP+SSE transport (``"type": "sse"``), with the gateway's bound on one event.

The SDK's ``sse_client`` reads the server's event stream with httpx2's default limit of 1 MiB
per event and no way to change it, so a legitimate 2 MB tool result ends the whole session. This
is the same transport (one GET event stream carrying every message from the server, one POST per
message to the endpoint it announces), on the gateway's guarded client, with ``max_event_size``;
and a POST that fails fails its own request at once, where the SDK's stops posting altogether.

An event beyond it still ends the session: with every answer on one stream, the stream cannot
be read past half an event. The connection reports it as such (``OversizedEventError``), so that
it is not counted as the server failing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urljoin, urlparse

import anyio
import httpx2
from anyio.abc import TaskStatus
from mcp.client._transport import TransportStreams
from mcp.shared._compat import resync_tracer
from mcp.shared._context_streams import ContextReceiveStream, ContextSendStream, create_context_streams
from mcp.shared._httpx_utils import request_within_origin, sse_within_origin
from mcp.shared.message import SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    jsonrpc_message_adapter,
)

from mcp_client_service.failures import POST_FAILED_PREFIX
from mcp_client_service.redaction import redact_urls
from suite_common.logging import get_logger

__all__ = ["OversizedEventError", "legacy_sse_transport"]

_log = get_logger("mcp_client_service.transport.legacy_sse")


class OversizedEventError(Exception):
    """The server sent one event larger than the gateway accepts, which ends an SSE session."""


@asynccontextmanager
async def legacy_sse_transport(
    url: str, client: httpx2.AsyncClient, *, max_event_size: int
) -> AsyncIterator[TransportStreams]:
    """Open the event stream at ``url`` on ``client`` (entered by the caller) and yield the session's streams."""
    async with sse_within_origin(client, url, max_event_size=max_event_size) as event_source:
        event_source.response.raise_for_status()
        read_stream_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
        write_stream, write_stream_reader = create_context_streams[SessionMessage](0)
        async with (
            read_stream_writer,
            read_stream,
            write_stream,
            write_stream_reader,
            anyio.create_task_group() as tg,
        ):
            endpoint_url = await tg.start(_read_events, event_source, url, max_event_size, read_stream_writer)
            tg.start_soon(_post_messages, client, endpoint_url, write_stream_reader, write_stream, read_stream_writer)
            yield read_stream, write_stream
            tg.cancel_scope.cancel()
        await resync_tracer()


async def _read_events(
    event_source: httpx2.EventSource,
    url: str,
    max_event_size: int,
    read_stream_writer: ContextSendStream[SessionMessage | Exception],
    *,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Hand every message of the event stream to the session; started once the server announces its endpoint."""
    try:
        async for sse in event_source:
            if sse.event == "endpoint":
                task_status.started(_announced_endpoint(url, sse.data))
            elif sse.event == "message" and sse.data:  # empty data: a keep-alive
                try:
                    message = jsonrpc_message_adapter.validate_json(sse.data, by_name=False)
                except Exception as exc:
                    await read_stream_writer.send(exc)
                    continue
                await read_stream_writer.send(SessionMessage(message))
    except httpx2.SSEError as error:
        if "exceeded" in str(error):
            raise OversizedEventError(
                f"the server sent an event larger than {max_event_size} bytes "
                "(MCP_CLIENT_HTTP_MAX_RESPONSE_BYTES), which ends an SSE session"
            ) from error
        raise
    finally:
        await read_stream_writer.aclose()


def _announced_endpoint(url: str, data: str) -> str:
    """The URL the server announced for its POSTs, which must stay on the event stream's origin."""
    endpoint_url = urljoin(url, data)
    announced, connected = urlparse(endpoint_url), urlparse(url)
    if (announced.scheme, announced.netloc) != (connected.scheme, connected.netloc):
        raise ValueError(f"the server announced an endpoint on another origin: {endpoint_url}")
    return endpoint_url


async def _post_messages(
    client: httpx2.AsyncClient,
    endpoint_url: str,
    write_stream_reader: ContextReceiveStream[SessionMessage],
    write_stream: ContextSendStream[SessionMessage],
    read_stream_writer: ContextSendStream[SessionMessage | Exception],
) -> None:
    """POST every message the session writes to the announced endpoint."""
    async with write_stream_reader, write_stream:
        async for session_message in write_stream_reader:
            # Each message in the sender's context (its trace), as the SDK does.
            sender = write_stream_reader.last_context
            async with anyio.create_task_group() as tg:
                if sender is not None:
                    sender.run(tg.start_soon, _post, client, endpoint_url, session_message, read_stream_writer)
                else:
                    tg.start_soon(_post, client, endpoint_url, session_message, read_stream_writer)


async def _post(
    client: httpx2.AsyncClient,
    endpoint_url: str,
    session_message: SessionMessage,
    read_stream_writer: ContextSendStream[SessionMessage | Exception],
) -> None:
    """POST one message; a request that cannot be posted is answered with an error at once."""
    message = session_message.message
    body = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
    try:
        response = await request_within_origin(client, "POST", endpoint_url, json=body)
        response.raise_for_status()
    except httpx2.HTTPError as error:
        # The SDK's transport stops posting altogether here, leaving every later request
        # to time out; this one fails at once, and the next is posted all the same.
        reason = redact_urls(f"{type(error).__name__}: {error}")
        _log.warning("mcp_sse_post_failed", error=reason)
        if isinstance(message, JSONRPCRequest):
            code = INTERNAL_ERROR if isinstance(error, httpx2.HTTPStatusError) else CONNECTION_CLOSED
            failed = ErrorData(code=code, message=POST_FAILED_PREFIX + reason)
            await read_stream_writer.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=message.id, error=failed)))
