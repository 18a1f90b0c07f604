"""Scripted completion-service and mcp-client-service behind ``httpx.MockTransport``, for agent-service's unit tests.

They speak the suite's neutral wire format, so the loop's real HTTP clients are exercised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx

from agent_service.engine.loop import AgentLoop
from agent_service.infra.peers import CompletionClient, ToolsClient
from suite_common.peer_client import HttpxPeerClient
from suite_common.sse import encode_event
from suite_common.wire import (
    CallToolProgress,
    CompletionDone,
    CompletionResponse,
    Message,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
    dump,
)

__all__ = ["Scripted", "Tool", "answer", "call_tools"]

Tool = Callable[[dict[str, Any]], Awaitable[str]]


def answer(text: str) -> CompletionResponse:
    return CompletionResponse(
        message=Message(role="assistant", content=text),
        finish_reason="stop",
        usage=Usage(input_tokens=10, output_tokens=5),
        model="scripted",
        provider="test",
    )


def call_tools(*calls: tuple[str, str, dict[str, Any]]) -> CompletionResponse:
    return CompletionResponse(
        message=Message(
            role="assistant", tool_calls=[ToolCall(id=id_, name=name, arguments=args) for id_, name, args in calls]
        ),
        finish_reason="tool_calls",
        usage=Usage(input_tokens=10, output_tokens=5),
        model="scripted",
        provider="test",
    )


def _sse(reply: CompletionResponse) -> bytes:
    events: list[Any] = []
    for block in reply.message.reasoning or []:
        events += [ReasoningDelta(delta=word) for word in re.findall(r"\S+\s*", block.text)]
        events.append(ReasoningBlockEvent(block=block))
    if reply.message.text:
        events += [TextDelta(delta=word) for word in re.findall(r"\S+\s*", reply.message.text)]
    for call in reply.message.tool_calls or []:
        events.append(
            ToolCallEvent(
                id=call.id,
                name=call.name,
                arguments=call.arguments,
                invalid_arguments=call.invalid_arguments,
                signature=call.signature,
            )
        )
    events.append(
        CompletionDone(
            finish_reason=reply.finish_reason,
            usage=reply.usage,
            model=reply.model,
            provider=reply.provider,
            warnings=reply.warnings,
        )
    )
    return b"".join(encode_event(dump(event), event=event.type) for event in events)


class Scripted:
    """Replies to completions in order; runs tools as Python functions.

    A call-tool asked for ``text/event-stream`` is answered as SSE (contract C2): the tool's
    ``progress`` events (scripted per tool name), then its ``result``; a tool named in
    ``stream_errors`` answers one ``error`` event instead. A tool named in ``blocked`` is refused as the gateway
    refuses a server whose address the outbound policy blocks (403 ``outbound_ssrf_blocked``), never run. A tool
    named in ``consent`` (→ its server) is refused as the gateway refuses a call whose OAuth server holds no token
    for whom it acts: 401 ``authorization_required``, or that ``error`` event when streamed; never run (a per-user
    server's, unless its server is in ``machine``: a machine server's, whose consent is an admin's).
    """

    def __init__(
        self,
        replies: list[CompletionResponse | None],
        tools: dict[str, Tool] | None = None,
        *,
        progress: dict[str, list[CallToolProgress]] | None = None,
        stream_errors: dict[str, tuple[str, str]] | None = None,
        blocked: set[str] | None = None,
        consent: dict[str, str] | None = None,
        machine: set[str] | None = None,
    ) -> None:
        self.replies = list(replies)  # None: never answer (a hung LLM)
        self.tools = tools or {}
        self.progress = progress or {}
        self.stream_errors = stream_errors or {}
        self.blocked = blocked or set()
        self.consent = consent or {}
        self.machine = machine or set()
        self.call_tool_requests: list[httpx.Request] = []
        """Every call-tool request as sent (headers and body), blocked ones included."""
        self.completion_requests: list[dict[str, Any]] = []
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.tool_call_accepts: list[str] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if request.url.path == "/api/v1/completions":
            self.completion_requests.append(body)
            reply = self.replies.pop(0)
            if reply is None:
                await anyio.sleep_forever()
            assert reply is not None
            if body.get("stream"):
                return httpx.Response(200, content=_sse(reply), headers={"content-type": "text/event-stream"})
            return httpx.Response(200, content=dump(reply), headers={"content-type": "application/json"})
        if request.url.path == "/mcp/v1/tools/call-tool":
            name, arguments = body["name"], body["arguments"]
            self.call_tool_requests.append(request)
            if name in self.blocked:
                refusal = {"code": "outbound_ssrf_blocked", "message": "10.0.0.7 is a private address"}
                return httpx.Response(403, json={"error": refusal})
            accept = request.headers.get("accept", "")
            streamed = "text/event-stream" in accept
            if name in self.consent:
                server = self.consent[name]
                needed = {
                    "code": "authorization_required",
                    "message": f"{server} needs the user's authorization",
                    "server": server,
                    "tokens": "machine" if server in self.machine else "perUser",
                    "authorizationUrl": f"https://as.example/authorize?client_id=gw&state=st-{server}",
                }
                if not streamed:
                    return httpx.Response(401, json={"error": needed})
                event = encode_event(json.dumps(needed), event="error")
                return httpx.Response(200, content=event, headers={"content-type": "text/event-stream"})
            self.tool_calls.append((name, arguments))
            self.tool_call_accepts.append(accept)
            if streamed and name in self.stream_errors:
                code, message = self.stream_errors[name]
                error = encode_event(json.dumps({"code": code, "message": message}), event="error")
                return httpx.Response(200, content=error, headers={"content-type": "text/event-stream"})
            try:
                text, is_error = await self.tools[name](arguments), False
            except RuntimeError as error:
                text, is_error = str(error), True
            result = {"content": [{"type": "text", "text": text}], "isError": is_error, "server": "s", "durationMs": 1}
            if not streamed:
                return httpx.Response(200, json=result)
            events = [encode_event(dump(step), event="progress") for step in self.progress.get(name, [])]
            events.append(encode_event(json.dumps(result), event="result"))
            return httpx.Response(200, content=b"".join(events), headers={"content-type": "text/event-stream"})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": request.url.path}})

    def loop(self, *, tool_result_max_chars: int = 10_000) -> AgentLoop:
        http = HttpxPeerClient(httpx.AsyncClient(transport=httpx.MockTransport(self.handle)))
        return AgentLoop(
            CompletionClient(http, "http://completion"),
            ToolsClient(http, "http://mcp", secret="s", secret_header="X-MCP-Service-Secret"),
            tool_result_max_chars=tool_result_max_chars,
        )
