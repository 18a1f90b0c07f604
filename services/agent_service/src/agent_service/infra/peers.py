"""HTTP clients of completion-service and mcp-client-service, as the loop needs them.

Every call carries the run's remaining time in ``X-Deadline-Ms`` and is bounded by it; every
failure becomes an ``UpstreamError`` (``agent_service.core.errors``) with a code the loop can report.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
import httpx
from pydantic import TypeAdapter, ValidationError

from agent_service.core.errors import (
    AUTHORIZATION_REQUIRED,
    OUTBOUND_BLOCKED,
    AuthorizationNeeded,
    UpstreamError,
    outbound_blocked,
)
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.http import check_model_name
from suite_common.logging import get_logger
from suite_common.peer_client import PeerClient, PeerReply, PeerStream
from suite_common.sse_parser import EventStreamParser
from suite_common.tracing import trace_headers
from suite_common.wire import (
    TENANT_HEADER,
    AuthorizationRequiredError,
    CallerContext,
    CallToolProgress,
    CallToolRequest,
    CallToolResponse,
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    ListToolsResponse,
    Message,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    ResolvedModel,
    StreamError,
    TenantServer,
    TenantServerCreate,
    TenantServerList,
    TenantServerPatch,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolInfo,
    dump,
)

__all__ = ["CompletionClient", "DeltaSink", "ProgressSink", "ToolsClient"]

_log = get_logger("agent_service.peers")

_completion_event = TypeAdapter[CompletionEvent](CompletionEvent)

DeltaSink = Callable[[TextDelta | ReasoningDelta], Awaitable[None]]
"""Where a streamed turn hands each text or reasoning delta as it arrives."""

ProgressSink = Callable[[CallToolProgress], Awaitable[None]]
"""Where a tool call answered as SSE hands each progress event of the tool."""


_PASSED_THROUGH = frozenset({400, 413, 429, 503, 504})

_STREAM_END_GRACE_SECONDS = 1.0
"""How long a streamed completion may go on after its ``done`` event before the client stops reading."""


def _error_body(response: PeerReply) -> tuple[str, str] | None:
    """The ``code`` and ``message`` of a peer's ``{"error": {...}}`` body; None for any other body."""
    try:
        error = json.loads(response.content)["error"]
        return str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return None


def _error_from_response(service: str, response: PeerReply) -> UpstreamError:
    code, message = _error_body(response) or ("bad_upstream_response", f"{service} answered HTTP {response.status}")
    # Statuses that tell our caller something (its request was bad, slow down, try later) pass
    # through with their Retry-After; any other failure of a peer is a bad gateway.
    status = response.status if response.status in _PASSED_THROUGH else 502
    retry_after = response.headers.get("retry-after")
    headers = {"Retry-After": retry_after} if retry_after and status in (429, 503) else None
    return UpstreamError(code, f"{service}: {message}", status=status, headers=headers)


def _transport_error(service: str, error: httpx.HTTPError) -> UpstreamError:
    if isinstance(error, httpx.TimeoutException):
        return UpstreamError("upstream_timeout", f"{service} did not answer in time", status=504)
    return UpstreamError("upstream_unavailable", f"{service} is unreachable ({type(error).__name__})", status=503)


class CompletionClient:
    """``POST /api/v1/completions``, streamed or not, folded into one ``CompletionResponse``."""

    service = "completion-service"

    def __init__(self, http: PeerClient, base_url: str) -> None:
        self.http = http
        self.url = base_url.rstrip("/") + "/api/v1/completions"
        self.models_url = base_url.rstrip("/") + "/api/v1/models/"

    async def check_model(self, model: str, deadline: Deadline) -> ResolvedModel:
        """Where completion-service would send ``model``, fallbacks and prices included; raises ``UpstreamError``
        (400 ``model_not_found``) when it cannot route it."""
        try:
            # Whichever front the name came through: it goes into a URL, which must stay one line and short.
            check_model_name(model)
        except ApiError as error:
            raise UpstreamError(error.code, error.message, status=error.status) from None
        try:
            response = await self.http.request(
                "GET",
                self.models_url + quote(model, safe="").replace(".", "%2E"),
                headers={**deadline.header(), **trace_headers()},
                time_limit=deadline.remaining(),
            )
        except httpx.HTTPError as error:
            raise _transport_error(self.service, error) from None
        if response.status == 404:
            failure = _error_from_response(self.service, response)
            raise UpstreamError("model_not_found", failure.message, status=400)
        if response.status != 200:
            raise _error_from_response(self.service, response)
        try:
            return ResolvedModel.model_validate_json(response.content)
        except ValidationError:
            raise UpstreamError("bad_upstream_response", f"{self.service} sent a malformed model route") from None

    async def list_models(self, deadline: Deadline) -> list[dict[str, Any]]:
        """``GET /api/v1/models``: the models completion-service routes (names and provider patterns)."""
        try:
            response = await self.http.request(
                "GET",
                self.models_url.rstrip("/"),
                headers={**deadline.header(), **trace_headers()},
                time_limit=deadline.remaining(),
            )
        except httpx.HTTPError as error:
            raise _transport_error(self.service, error) from None
        if response.status != 200:
            raise _error_from_response(self.service, response)
        try:
            models = json.loads(response.content)["models"]
        except (ValueError, KeyError, TypeError):
            models = None
        if not isinstance(models, list) or not all(isinstance(entry, dict) for entry in models):
            raise UpstreamError("bad_upstream_response", f"{self.service} sent a malformed model list")
        return models

    async def complete(
        self,
        request: CompletionRequest,
        deadline: Deadline,
        on_delta: DeltaSink | None = None,
    ) -> CompletionResponse:
        """One LLM turn. With ``on_delta`` the turn is streamed and each text or reasoning delta handed over
        as it comes."""
        body = dump(request.model_copy(update={"stream": on_delta is not None})).encode()
        headers = {"content-type": "application/json", **deadline.header(), **trace_headers()}
        try:
            if on_delta is None:
                response = await self.http.request("POST", self.url, content=body, headers=headers)
                if response.status != 200:
                    raise _error_from_response(self.service, response)
                return CompletionResponse.model_validate_json(response.content)
            async with self.http.stream("POST", self.url, content=body, headers=headers) as stream:
                if stream.status != 200:
                    failed = PeerReply(stream.status, stream.headers, await stream.read())
                    raise _error_from_response(self.service, failed)
                folded = await _fold_stream(_events(stream), on_delta)
                await _read_to_the_end(stream)
                return folded
        except httpx.HTTPError as error:
            raise _transport_error(self.service, error) from None
        except ValidationError:
            raise UpstreamError("bad_upstream_response", f"{self.service} sent a malformed completion") from None


async def _events(stream: PeerStream) -> AsyncIterator[CompletionEvent]:
    parser = EventStreamParser()
    async for chunk in stream.chunks():
        for sse in parser.feed(chunk):
            if sse.data:
                yield _completion_event.validate_json(sse.data)


async def _read_to_the_end(stream: PeerStream) -> None:
    """completion-service ends its stream right after ``done``: reading on to that end hands the connection
    back to the pool, where leaving now would close it (and the next call connect). The turn is complete
    already, so whatever comes after ``done`` is ignored, a failure included."""
    with anyio.move_on_after(_STREAM_END_GRACE_SECONDS):
        try:
            async for _ in stream.chunks():
                pass
        except httpx.HTTPError:
            pass


async def _fold_stream(events: AsyncIterator[CompletionEvent], on_delta: DeltaSink) -> CompletionResponse:
    text: list[str] = []
    reasoning: list[ReasoningBlock] = []
    calls: list[ToolCall] = []
    async for event in events:
        if isinstance(event, TextDelta):
            text.append(event.delta)
            await on_delta(event)
        elif isinstance(event, ReasoningDelta):
            await on_delta(event)
        elif isinstance(event, ReasoningBlockEvent):
            # Kept on the message: some providers refuse the next turn without their reasoning blocks.
            reasoning.append(event.block)
        elif isinstance(event, ToolCallEvent):
            calls.append(
                ToolCall(
                    id=event.id,
                    name=event.name,
                    arguments=event.arguments,
                    invalid_arguments=event.invalid_arguments,
                    signature=event.signature,
                )
            )
        elif isinstance(event, StreamError):
            raise UpstreamError(event.code, f"completion-service: {event.message}")
        elif isinstance(event, CompletionDone):
            message = Message(
                role="assistant",
                content="".join(text) or None,
                reasoning=reasoning or None,
                tool_calls=calls or None,
            )
            return CompletionResponse(
                message=message,
                finish_reason=event.finish_reason,
                usage=event.usage,
                model=event.model,
                provider=event.provider,
                warnings=event.warnings,
            )
    raise UpstreamError("bad_upstream_response", "completion-service ended the stream without a done event")


class ToolsClient:
    """``list-tools`` and ``call-tool`` of mcp-client-service, and its tenant API (the servers a tenant registers),
    with the shared secret."""

    service = "mcp-client-service"

    def __init__(self, http: PeerClient, base_url: str, *, secret: str, secret_header: str) -> None:
        self.http = http
        base = base_url.rstrip("/")
        self.list_url = base + "/mcp/v1/tools/list-tools"
        self.servers_url = base + "/mcp/v1/servers"
        self.call_url = base + "/mcp/v1/tools/call-tool"
        self.tenants_url = base + "/mcp/v1/tenants/"
        self.oauth_url = base + "/mcp/v1/oauth/"
        self.auth = {secret_header: secret}

    async def list_tools(self, deadline: Deadline, *, tenant: str | None = None) -> list[ToolInfo]:
        """The tools ``tenant``'s runs may be offered: the shared servers' and the tenant's own (``None``: the
        shared servers' only)."""
        headers = {TENANT_HEADER: tenant} if tenant is not None else {}
        response = await self._get(self.list_url, deadline, headers)
        try:
            return ListToolsResponse.model_validate_json(response.content).tools
        except ValidationError:
            raise UpstreamError("bad_upstream_response", f"{self.service} sent a malformed tool list") from None

    async def list_servers(self, deadline: Deadline) -> set[str]:
        """The names of the MCP servers the gateway is configured with (``GET /mcp/v1/servers``): serving, failed,
        connecting or disabled alike."""
        response = await self._get(self.servers_url, deadline)
        try:
            servers = json.loads(response.content)["servers"]
            return {str(server["name"]) for server in servers}
        except (ValueError, KeyError, TypeError):
            raise UpstreamError("bad_upstream_response", f"{self.service} sent a malformed server list") from None

    async def _get(self, url: str, deadline: Deadline, headers: Mapping[str, str] | None = None) -> PeerReply:
        """A GET of the gateway answered 200; anything else raises (a rejected secret as ``_unauthorized``)."""
        try:
            response = await self.http.request(
                "GET",
                url,
                headers={**self.auth, **deadline.header(), **trace_headers(), **(headers or {})},
                time_limit=deadline.remaining(),
            )
        except httpx.HTTPError as error:
            raise _transport_error(self.service, error) from None
        if response.status == 401:
            raise _unauthorized()
        if response.status != 200:
            raise _error_from_response(self.service, response)
        return response

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        deadline: Deadline,
        *,
        route: ToolInfo | None = None,
        caller: CallerContext | None = None,
    ) -> CallToolResponse:
        """A tool's own failure is an ``isError`` result for the model; only a rejected secret, and an address the
        outbound policy blocks (403 ``outbound_ssrf_blocked``, which ends the run), raise.

        ``route``: the tool's ``list-tools`` entry when the run was planned; the call then runs on that server's
        tool of that name (``server``, ``serverTool``) whatever the name resolves to now, or nowhere: if that
        server no longer has the tool, the gateway refuses it (409 ``tool_server_mismatch``), and while the server
        is away it is unavailable (503); the model reads why, as an error result.

        ``caller``: whom the call acts for; its tenant goes in ``X-Tenant-Id`` (the gateway routes within that
        tenant's servers) and the whole of it in the body, which the gateway hands the tool as
        ``_meta["io.loopsuite/caller"]``."""
        body = _call_body(name, arguments, route, caller)
        headers = {
            **self.auth,
            **deadline.header(),
            **trace_headers(),
            **_tenant_header(caller),
            "content-type": "application/json",
        }
        try:
            response = await self.http.request("POST", self.call_url, content=body, headers=headers)
        except httpx.HTTPError as error:
            failure = _transport_error(self.service, error)
            return _error_result(f"The tool call failed: {failure.message}.")
        if response.status != 200:
            return _failed_call(response)
        try:
            return CallToolResponse.model_validate_json(response.content)
        except ValidationError:
            return _error_result(f"The tool call failed: {self.service} sent a malformed result.")

    async def call_tool_streamed(
        self,
        name: str,
        arguments: dict[str, Any],
        deadline: Deadline,
        on_progress: ProgressSink,
        *,
        route: ToolInfo | None = None,
        caller: CallerContext | None = None,
    ) -> CallToolResponse:
        """``call_tool`` answered as SSE: the tool's progress goes to ``on_progress`` as it comes.

        For streamed runs only: the stream costs more than the JSON answer of ``call_tool``.
        """
        body = _call_body(name, arguments, route, caller)
        headers = {
            **self.auth,
            **deadline.header(),
            **trace_headers(),
            **_tenant_header(caller),
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        try:
            async with self.http.stream("POST", self.call_url, content=body, headers=headers) as stream:
                if stream.status != 200:
                    return _failed_call(PeerReply(stream.status, stream.headers, await stream.read()))
                if not stream.headers.get("content-type", "").startswith("text/event-stream"):
                    # A gateway from before call-tool spoke SSE answers JSON, as it always did.
                    return CallToolResponse.model_validate_json(await stream.read())
                parser = EventStreamParser()
                async for chunk in stream.chunks():
                    for event in parser.feed(chunk):
                        if event.event == "progress":
                            await on_progress(CallToolProgress.model_validate_json(event.data))
                        elif event.event in ("result", "error"):
                            await _read_to_the_end(stream)  # hands the connection back to the pool
                            return _streamed_answer(event.event, event.data)
        except httpx.HTTPError as error:
            failure = _transport_error(self.service, error)
            return _error_result(f"The tool call failed: {failure.message}.")
        except (ValidationError, ValueError):
            return _error_result(f"The tool call failed: {self.service} sent a malformed result.")
        return _error_result(f"The tool call failed: {self.service} ended the stream without a result.")

    # The tenant API (``/mcp/v1/tenants/{tenant}/servers``), which agent-service's admin API forwards to. The
    # gateway's refusals (4xx) reach the admin as the gateway said them: its status, code and message.

    async def tenant_servers(self, tenant: str, deadline: Deadline) -> TenantServerList:
        """``GET /mcp/v1/tenants/{tenant}/servers``."""
        reply = await self.gateway_request("GET", self._servers_of(tenant), deadline)
        return _tenant_answer(TenantServerList, reply)

    async def tenant_server(self, tenant: str, name: str, deadline: Deadline) -> TenantServer:
        """``GET /mcp/v1/tenants/{tenant}/servers/{name}`` (404 ``server_not_found``, passed through)."""
        reply = await self.gateway_request("GET", self._servers_of(tenant, name), deadline)
        return _tenant_answer(TenantServer, reply)

    async def create_tenant_server(
        self, tenant: str, server: TenantServerCreate, deadline: Deadline, *, max_servers: int
    ) -> TenantServer:
        """``POST /mcp/v1/tenants/{tenant}/servers?maxServers=``: ``max_servers``, the operator's cap of the
        tenant's own servers."""
        url = f"{self._servers_of(tenant)}?maxServers={max_servers}"
        body = server.model_dump_json(by_alias=True, exclude_none=True).encode()
        reply = await self.gateway_request("POST", url, deadline, body)
        return _tenant_answer(TenantServer, reply)

    async def update_tenant_server(
        self, tenant: str, name: str, patch: TenantServerPatch, deadline: Deadline
    ) -> TenantServer:
        """``PATCH /mcp/v1/tenants/{tenant}/servers/{name}``: the fields ``patch`` sets only (an ``allowedTools:
        null`` sent, a field left out not)."""
        body = patch.model_dump_json(by_alias=True, exclude_unset=True).encode()
        reply = await self.gateway_request("PATCH", self._servers_of(tenant, name), deadline, body)
        return _tenant_answer(TenantServer, reply)

    async def delete_tenant_server(self, tenant: str, name: str, deadline: Deadline) -> None:
        """``DELETE /mcp/v1/tenants/{tenant}/servers/{name}`` (204)."""
        await self.gateway_request("DELETE", self._servers_of(tenant, name), deadline)

    def _servers_of(self, tenant: str, name: str | None = None) -> str:
        # Quoted whole: a name is one path segment, whatever the caller sent ("..", "/", "?").
        url = f"{self.tenants_url}{quote(tenant, safe='')}/servers"
        return url if name is None else f"{url}/{quote(name, safe='')}"

    async def gateway_request(self, method: str, url: str, deadline: Deadline, body: bytes | None = None) -> PeerReply:
        """A request of the gateway's own API (its tenant API, its OAuth endpoints: ``infra.gateway_oauth``) answered
        2xx; a 4xx raises with the gateway's status, code and message, a
        rejected secret as ``_unauthorized`` (the operator's mistake, not the caller's), anything else as
        ``_error_from_response``. Header values of a server (or a client secret, a code) may be in ``body``: nothing of
        it is logged."""
        headers = {**self.auth, **deadline.header(), **trace_headers()}
        if body is not None:
            headers["content-type"] = "application/json"
        try:
            response = await self.http.request(
                method, url, content=body, headers=headers, time_limit=deadline.remaining()
            )
        except httpx.HTTPError as error:
            raise _transport_error(self.service, error) from None
        if 200 <= response.status < 300:
            return response
        if response.status == 401:
            raise _unauthorized()
        if 400 <= response.status < 500:
            raise _refusal_passed_through(self.service, response)
        raise _error_from_response(self.service, response)


_Answer = TypeVar("_Answer", TenantServer, TenantServerList)


def _tenant_answer(model: type[_Answer], reply: PeerReply) -> _Answer:
    """The tenant API's answer as ``model``: read through the model, so that nothing it does not declare (a header
    value, whatever a gateway might add) reaches the admin."""
    try:
        return model.model_validate_json(reply.content)
    except ValidationError:
        raise UpstreamError("bad_upstream_response", "mcp-client-service sent a malformed server answer") from None


def _refusal_passed_through(service: str, response: PeerReply) -> UpstreamError:
    """A 4xx of the gateway's tenant API as the admin is to read it: the same status, code and message."""
    said = _error_body(response)
    if said is None:
        return UpstreamError("bad_upstream_response", f"{service} answered HTTP {response.status}")
    code, message = said
    retry_after = response.headers.get("retry-after")
    headers = {"Retry-After": retry_after} if retry_after and response.status == 429 else None
    return UpstreamError(code, message, status=response.status, headers=headers)


def _call_body(name: str, arguments: dict[str, Any], route: ToolInfo | None, caller: CallerContext | None) -> bytes:
    """``call-tool``'s body; with ``route``, the server and its own name of the tool, for the gateway to hold to."""
    if route is None or not route.server:
        return dump(CallToolRequest(name=name, arguments=arguments, caller=caller)).encode()
    request = CallToolRequest(
        name=name, arguments=arguments, server=route.server, server_tool=route.server_tool or route.name, caller=caller
    )
    return dump(request).encode()


def _tenant_header(caller: CallerContext | None) -> dict[str, str]:
    return {TENANT_HEADER: caller.tenant} if caller is not None else {}


def _failed_call(response: PeerReply) -> CallToolResponse:
    """A ``call-tool`` answered with an HTTP error: an error result saying why; a rejected secret, an address the
    outbound policy blocks, and a server that needs a person's consent (``AuthorizationNeeded``), raise."""
    try:
        error = json.loads(response.content)["error"]
        code = error.get("code")
        text = _failure_text(error)
    except (ValueError, KeyError, TypeError, AttributeError):
        if response.status == 401:
            raise _unauthorized() from None
        return _error_result(f"The tool call failed: HTTP {response.status}")
    if response.status == 401:
        # The gateway's own 401 for a consent not given (its body says so); any other 401 is the shared secret.
        if code != AUTHORIZATION_REQUIRED:
            raise _unauthorized()
        needed = _authorization_needed(error)
        if needed is None:
            return _error_result(f"The tool call failed: {MALFORMED_CONSENT}.")
        raise needed
    if response.status == 403 and code == OUTBOUND_BLOCKED:
        raise _blocked(error)
    return _error_result(text)


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
    return _error_result(text)


MALFORMED_CONSENT = "mcp-client-service sent an authorization_required answer without its server or URL"


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


def _unauthorized() -> UpstreamError:
    return UpstreamError(
        "tools_unauthorized",
        "mcp-client-service rejected the shared secret: AGENT_MCP_SERVICE_SECRET must match MCP_CLIENT_SERVICE_SECRET",
    )


def _error_result(text: str) -> CallToolResponse:
    return CallToolResponse(content=[{"type": "text", "text": text}], is_error=True, server="", duration_ms=0)
