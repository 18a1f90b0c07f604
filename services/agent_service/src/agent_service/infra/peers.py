"""HTTP clients of completion-service and mcp-client-service, as the loop needs them.

Every call carries the run's remaining time in ``X-Deadline-Ms`` and is bounded by it; every
failure becomes an ``UpstreamError`` (``agent_service.core.errors``) with a code the loop can report.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter, ValidationError

from agent_service.core.errors import UpstreamError
from agent_service.infra.call_answers import (
    ProgressSink,
    QuestionSink,
    error_result,
    failed_call,
    read_call_events,
    read_to_the_end,
    unauthorized,
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
    CallerContext,
    CallToolElicitation,
    CallToolRequest,
    CallToolResponse,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    ElicitationAnswer,
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

__all__ = ["CompletionClient", "DeltaSink", "ProgressSink", "QuestionSink", "ToolsClient"]

_log = get_logger("agent_service.peers")

_completion_event = TypeAdapter[CompletionEvent](CompletionEvent)

DeltaSink = Callable[[TextDelta | ReasoningDelta], Awaitable[None]]
"""Where a streamed turn hands each text or reasoning delta as it arrives."""

_PASSED_THROUGH = frozenset({400, 413, 429, 503, 504})


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
                folded = await _fold_stream(stream, on_delta)
                await read_to_the_end(stream)
                return folded
        except httpx.HTTPError as error:
            raise _transport_error(self.service, error) from None
        except ValidationError:
            raise UpstreamError("bad_upstream_response", f"{self.service} sent a malformed completion") from None


async def _fold_stream(stream: PeerStream, on_delta: DeltaSink) -> CompletionResponse:
    """The stream's events folded into one response, each text or reasoning delta handed to ``on_delta`` as it
    comes. The events of each read are parsed and folded in one loop, with no generator between the reads and the
    fold: a layer per event was a good part of what a streamed call cost more than a plain one."""
    parser = EventStreamParser()
    text: list[str] = []
    reasoning: list[ReasoningBlock] = []
    calls: list[ToolCall] = []
    async for chunk in stream.chunks():
        for sse in parser.feed(chunk):
            if not sse.data:
                continue
            event = _completion_event.validate_json(sse.data)
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
            else:  # done: the answer is complete
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
        self.elicitations_url = base + "/mcp/v1/elicitations/"
        self.calls_url = base + "/mcp/v1/calls/"
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
        """A GET of the gateway answered 200; anything else raises (a rejected secret as ``unauthorized``)."""
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
            raise unauthorized()
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
            return error_result(f"The tool call failed: {failure.message}.")
        if response.status != 200:
            return failed_call(response)
        try:
            return CallToolResponse.model_validate_json(response.content)
        except ValidationError:
            return error_result(f"The tool call failed: {self.service} sent a malformed result.")

    async def call_tool_streamed(
        self,
        name: str,
        arguments: dict[str, Any],
        deadline: Deadline,
        on_progress: ProgressSink,
        *,
        route: ToolInfo | None = None,
        caller: CallerContext | None = None,
        call_id: str | None = None,
    ) -> CallToolResponse | CallToolElicitation:
        """``call_tool`` answered as SSE: the tool's progress goes to ``on_progress`` as it comes.

        ``call_id`` (``<runId>/<toolCallId>``): the run can wait for a person, so a question of the tool's server
        (``elicitation``) ends the reading and is returned, the call waiting at the gateway for its answer
        (``answer_question``, then ``follow_call``). Without one, nobody is asked: the question is declined at once
        and the call goes on. For streamed runs, and runs that may wait: the stream costs more than JSON.
        """
        body = _call_body(name, arguments, route, caller, call_id)
        headers = {**self._call_headers(deadline, caller), "content-type": "application/json"}

        async def ask(question: CallToolElicitation) -> bool:
            if call_id is not None:
                return True
            await self.answer_question(question.elicitation_id, ElicitationAnswer(action="decline"), deadline, caller)
            return False

        return await self._read_call("POST", self.call_url, body, headers, on_progress, ask)

    async def answer_question(
        self, elicitation_id: str, answer: ElicitationAnswer, deadline: Deadline, caller: CallerContext | None
    ) -> None:
        """``POST /mcp/v1/elicitations/{elicitationId}``: a person's answer (or a decline) to the server's question.
        An answer the gateway no longer waits for (404 ``elicitation_not_found``: it ran out or the gateway
        restarted; 409 ``elicitation_answered``: forwarded before a crash) is not an error: following the call
        tells what became of it. A rejected secret raises."""
        url = f"{self.elicitations_url}{quote(elicitation_id, safe='')}"
        headers = {**self._call_headers(deadline, caller), "content-type": "application/json"}
        try:
            response = await self.http.request(
                "POST", url, content=dump(answer).encode(), headers=headers, time_limit=deadline.remaining()
            )
        except httpx.HTTPError as error:
            _log.warning("elicitation_answer_not_sent", error=_transport_error(self.service, error).message)
            return
        if response.status == 401:
            raise unauthorized()
        if response.status != 200:
            said = _error_body(response)
            _log.info("elicitation_answer_refused", status=response.status, code=said[0] if said else None)

    async def follow_call(
        self, call_id: str, deadline: Deadline, on_progress: ProgressSink, caller: CallerContext | None
    ) -> CallToolResponse | CallToolElicitation | None:
        """``GET /mcp/v1/calls/{callId}/events``: a call that waited for its server's question followed again to its
        result, or to its next question; ``None``: the gateway no longer knows the call (it restarted, or the
        call's result went to another follower)."""
        url = f"{self.calls_url}{quote(call_id, safe='')}/events"

        async def stop(question: CallToolElicitation) -> bool:
            return True

        result = await self._read_call("GET", url, None, self._call_headers(deadline, caller), on_progress, stop)
        return None if result is _CALL_NOT_FOUND else result

    def _call_headers(self, deadline: Deadline, caller: CallerContext | None) -> dict[str, str]:
        return {
            **self.auth,
            **deadline.header(),
            **trace_headers(),
            **_tenant_header(caller),
            # JSON too: a call with no progress and no question to send is answered plainly (cheaper than a stream).
            "accept": "text/event-stream, application/json",
        }

    async def _read_call(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: dict[str, str],
        on_progress: ProgressSink,
        on_question: QuestionSink,
    ) -> CallToolResponse | CallToolElicitation:
        """A call's events read to its result or the question ``on_question`` stops at; ``_CALL_NOT_FOUND`` for a
        404 ``call_not_found``; the gateway's failures as error results (``failed_call``)."""
        try:
            async with self.http.stream(method, url, content=body, headers=headers) as stream:
                if stream.status != 200:
                    reply = PeerReply(stream.status, stream.headers, await stream.read())
                    said = _error_body(reply)
                    if stream.status == 404 and said is not None and said[0] == "call_not_found":
                        return _CALL_NOT_FOUND
                    return failed_call(reply)
                if not stream.headers.get("content-type", "").startswith("text/event-stream"):
                    # A gateway from before call-tool spoke SSE answers JSON, as it always did.
                    return CallToolResponse.model_validate_json(await stream.read())
                return await read_call_events(stream, on_progress, on_question, self.service)
        except httpx.HTTPError as error:
            failure = _transport_error(self.service, error)
            return error_result(f"The tool call failed: {failure.message}.")
        except (ValidationError, ValueError):
            return error_result(f"The tool call failed: {self.service} sent a malformed result.")

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
            raise unauthorized()
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


def _call_body(
    name: str,
    arguments: dict[str, Any],
    route: ToolInfo | None,
    caller: CallerContext | None,
    call_id: str | None = None,
) -> bytes:
    """``call-tool``'s body; with ``route``, the server and its own name of the tool, for the gateway to hold to."""
    if route is None or not route.server:
        return dump(CallToolRequest(name=name, arguments=arguments, caller=caller, call_id=call_id)).encode()
    request = CallToolRequest(
        name=name,
        arguments=arguments,
        server=route.server,
        server_tool=route.server_tool or route.name,
        caller=caller,
        call_id=call_id,
    )
    return dump(request).encode()


def _tenant_header(caller: CallerContext | None) -> dict[str, str]:
    return {TENANT_HEADER: caller.tenant} if caller is not None else {}


_CALL_NOT_FOUND = error_result("The call is not known to the gateway.")
"""What ``_read_call`` answers for a 404 ``call_not_found`` (compared by identity, never shown)."""
