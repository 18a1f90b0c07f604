"""A scripted mcp-client-service whose tools ask their user questions, for agent-service's inputs (issue 33): it
speaks exactly the gateway's side of elicitation as CONTRACT-33 section 3 and docs/gateway-api.md say it, and
nothing else (``list-tools``, ``call-tool``, ``POST /mcp/v1/elicitations/{id}``, ``GET /mcp/v1/calls/{callId}/events``).

Not the gateway: it connects to no MCP server. Each tool is a script of questions (``Question``), asked one after
the other while the answers are ``accept``; the tool's result says what was answered. A ``call-tool`` asked for SSE
sends an ``elicitation`` event and waits for the answer; with a ``callId`` it keeps the call when its caller goes
away (detached), to be followed again. A JSON one (nobody to ask) gets its questions declined at once. An accepted
answer is checked with ``suite_common.elicitation.answer_content`` (defaults filled) as the gateway checks it. A
finished detached call's result goes to one follower, then the call is forgotten; ``forget_calls`` forgets them all,
as a restarted gateway would have.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from suite_common.elicitation import InvalidAnswer, answer_content
from suite_common.sse import Emit, EventStreamResponse, encode_event
from suite_common.wire import (
    TENANT_HEADER,
    CallToolElicitation,
    CallToolRequest,
    CallToolResponse,
    ElicitationAnswer,
    ListToolsResponse,
    ToolInfo,
    dump,
)

__all__ = ["Question", "ScriptedElicitGateway", "ScriptedTool"]


@dataclass(frozen=True)
class Question:
    message: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class ScriptedTool:
    name: str
    server: str
    questions: list[Question]


@dataclass
class _Call:
    call_id: str | None
    tenant: str | None
    tool: ScriptedTool
    answers: list[ElicitationAnswer] = field(default_factory=list)
    question: CallToolElicitation | None = None
    """The question that waits for its answer now."""
    answered: anyio.Event = field(default_factory=anyio.Event)


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


@dataclass
class ScriptedElicitGateway:
    secret: str
    tools: list[ScriptedTool]
    secret_header: str = "X-MCP-Service-Secret"
    calls: dict[str, _Call] = field(default_factory=dict)
    """Detached-capable calls by ``callId``."""
    questions: dict[str, _Call] = field(default_factory=dict)
    """Pending questions by ``elicitationId``."""
    call_requests: list[dict[str, Any]] = field(default_factory=list)
    answers: list[tuple[str, ElicitationAnswer]] = field(default_factory=list)
    """Every answer the gateway took (``elicitationId``, answer as forwarded to the server: defaults filled)."""
    follows: list[dict[str, str]] = field(default_factory=list)
    """The headers of each ``GET /mcp/v1/calls/{callId}/events``."""
    unavailable_answers: int = 0
    """How many answers to refuse with 503 before taking one (a gateway briefly unavailable)."""

    @property
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/mcp/v1/tools/list-tools", self._list_tools, methods=["GET"]),
                Route("/mcp/v1/tools/call-tool", self._call_tool, methods=["POST"]),
                Route("/mcp/v1/elicitations/{elicitationId}", self._answer, methods=["POST"]),
                Route("/mcp/v1/calls/{callId:path}/events", self._follow, methods=["GET"]),
            ]
        )

    def forget_calls(self) -> None:
        """What a restart of the gateway leaves: no call, no question."""
        self.calls.clear()
        self.questions.clear()

    def _authorized(self, request: Request) -> bool:
        return request.headers.get(self.secret_header) == self.secret

    async def _list_tools(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, "unauthorized", "wrong secret")
        infos = [
            ToolInfo(name=tool.name, input_schema={"type": "object"}, server=tool.server, description=tool.name)
            for tool in self.tools
        ]
        return JSONResponse(json.loads(dump(ListToolsResponse(tools=infos))))

    def _ask_next(self, call: _Call) -> CallToolElicitation | None:
        """The call's next question, registered as pending; ``None``: the script is done (or a question was not
        accepted)."""
        if call.answers and call.answers[-1].action != "accept":
            return None
        if len(call.answers) >= len(call.tool.questions):
            return None
        asked = call.tool.questions[len(call.answers)]
        question = CallToolElicitation(
            elicitation_id=f"el_{secrets.token_hex(6)}",
            message=asked.message,
            requested_schema=asked.schema,
            server=call.tool.server,
            expires_at=(datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        )
        call.question, call.answered = question, anyio.Event()
        self.questions[question.elicitation_id] = call
        return question

    @staticmethod
    def _result(call: _Call) -> CallToolResponse:
        said = "; ".join(
            f"{answer.action} {json.dumps(answer.content, sort_keys=True)}" if answer.content else answer.action
            for answer in call.answers
        )
        return CallToolResponse(
            content=[{"type": "text", "text": f"{call.tool.name}: {said}"}], server=call.tool.server, duration_ms=1
        )

    async def _run(self, call: _Call, emit: Emit, *, ask: bool) -> None:
        """The call's events from where it is: each question (waited for when someone can answer, else declined at
        once), then its result, after which a detached call is forgotten."""
        while True:
            question = call.question if call.question is not None else self._ask_next(call)
            if question is None:
                break
            if not ask:
                self.questions.pop(question.elicitation_id, None)
                call.question = None
                call.answers.append(ElicitationAnswer(action="decline"))
                continue
            await emit(encode_event(dump(question), event="elicitation"))
            await call.answered.wait()
        if call.call_id is not None:
            self.calls.pop(call.call_id, None)
        await emit(encode_event(dump(self._result(call)), event="result"))

    async def _call_tool(self, request: Request) -> Response | EventStreamResponse:
        if not self._authorized(request):
            return _error(401, "unauthorized", "wrong secret")
        body = CallToolRequest.model_validate_json(await request.body())
        self.call_requests.append(json.loads(dump(body)))
        tool = next((tool for tool in self.tools if tool.name == body.name), None)
        if tool is None:
            return _error(404, "tool_not_found", f"No tool {body.name}.")
        call = _Call(body.call_id, request.headers.get(TENANT_HEADER), tool)
        streamed = "text/event-stream" in request.headers.get("accept", "")
        if not streamed:
            await self._run(call, _discard, ask=False)
            return JSONResponse(json.loads(dump(self._result(call))))
        if body.call_id is not None:
            self.calls[body.call_id] = call
        # Over SSE the question is asked, callId or not: a caller without one answers it at once or loses the call.
        return EventStreamResponse(lambda emit: self._produce(call, emit, ask=True))

    async def _produce(self, call: _Call, emit: Emit, *, ask: bool) -> None:
        await self._run(call, emit, ask=ask)

    async def _answer(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, "unauthorized", "wrong secret")
        if self.unavailable_answers > 0:
            self.unavailable_answers -= 1
            return _error(503, "unavailable", "try again")
        elicitation_id = request.path_params["elicitationId"]
        answer = ElicitationAnswer.model_validate_json(await request.body())
        call = self.questions.get(elicitation_id)
        if call is None:
            answered = any(known == elicitation_id for known, _ in self.answers)
            if answered:
                return _error(409, "elicitation_answered", "answered already")
            return _error(404, "elicitation_not_found", "no such elicitation")
        if answer.action == "accept":
            assert call.question is not None
            try:
                answer = ElicitationAnswer(
                    action="accept", content=answer_content(call.question.requested_schema, answer.content)
                )
            except InvalidAnswer as invalid:
                return _error(400, "invalid_input", str(invalid))
        del self.questions[elicitation_id]
        self.answers.append((elicitation_id, answer))
        call.answers.append(answer)
        call.question = None
        call.answered.set()
        return JSONResponse({"elicitationId": elicitation_id, "action": answer.action})

    async def _follow(self, request: Request) -> Response | EventStreamResponse:
        if not self._authorized(request):
            return _error(401, "unauthorized", "wrong secret")
        self.follows.append(dict(request.headers))
        call = self.calls.get(request.path_params["callId"])
        if call is None or call.tenant != request.headers.get(TENANT_HEADER):
            return _error(404, "call_not_found", "no such call")
        return EventStreamResponse(lambda emit: self._produce(call, emit, ask=True))


async def _discard(frame: bytes) -> None:
    pass
