"""A scripted agent-service for the console's browser tests: the real console files, and the agent API the console
calls answering as docs/agent-api.md and the wire models (``suite_common.wire``) say, from what the test scripts.

Not agent-service: no run is made. A run (``POST /api/v1/agent/run``) streams the events the test queued in
``first_events`` (wire models: ``RunStarted``, ``RunInputRequired``, ...), then waits for more: ``after_inputs``
answers ``POST /api/v1/agent/runs/{runId}/inputs`` (the events it returns go on the run's stream, in order; an
``ApiError`` it raises is the answer). ``servers`` (admin ``GET /api/v1/admin/mcp-servers``; ``None``: 403
``admin_only``), ``admin_connections`` and ``connections`` (``None``: 404, an agent-service without the endpoint)
are what the test sets. Every API request is recorded. ``GET /consent`` is the authorization server's page a Connect
opens (a plain page of this app, so that nothing leaves the machine).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agent_service.api.console import console_file
from suite_common.errors import ApiError
from suite_common.sse import encode_event
from suite_common.wire import InputsRequest, RunEvent, RunStarted
from suite_common.wire.base import dump

__all__ = ["RecordedRequest", "ScriptedAgent", "ScriptedRun"]

RUN_ID = "run-scripted-1"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class ScriptedRun:
    run_id: str
    events: list[tuple[str, str]] = field(default_factory=list)
    """(type, JSON data) in order; the n-th has id n + 1."""
    grew: anyio.Event = field(default_factory=anyio.Event)

    def push(self, *events: RunEvent) -> None:
        for event in events:
            self.events.append((event.type, dump(event)))
        self.grew.set()
        self.grew = anyio.Event()

    async def stream(self, after: int) -> AsyncIterator[bytes]:
        """The events after id ``after``, as they come, until the run's ``done`` or ``error``."""
        sent = after
        while True:
            while sent < len(self.events):
                kind, data = self.events[sent]
                sent += 1
                yield encode_event(data, event=kind, id=sent)
                if kind in ("done", "error"):
                    return
            await self.grew.wait()


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


@dataclass
class ScriptedAgent:
    first_events: list[RunEvent] = field(default_factory=list)
    """What a new run streams after its ``run_started``."""
    after_inputs: Callable[[ScriptedRun, InputsRequest], list[RunEvent]] = lambda run, request: []
    servers: list[dict[str, Any]] | None = None
    admin_connections: list[dict[str, Any]] | None = None
    connections: list[dict[str, Any]] | None = None
    available: list[str] = field(default_factory=list)
    """The per-user servers the person has not connected (``available`` of the connections answer)."""
    authorize_answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Server name → the answer of its ``.../authorize`` (admin's or the person's); absent: 404 ``server_not_found``."""
    base_url: str = ""
    """This app's own URL, once served (the consent page's address is made from it)."""
    runs: dict[str, ScriptedRun] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)

    def consent_url(self, server: str) -> str:
        return f"{self.base_url}/consent?server={server}&state=opaque-state"

    @property
    def app(self) -> Starlette:
        def fixed(answer: Any) -> Callable[[Request], Any]:
            async def endpoint(request: Request) -> Response:
                return JSONResponse(answer)

            return endpoint

        routes = [
            Route("/console", console_file, methods=["GET"]),
            Route("/console/{file:path}", console_file, methods=["GET"]),
            Route("/consent", self._consent, methods=["GET"]),
            Route("/v1/models", fixed({"object": "list", "data": [{"id": "demo", "object": "model"}]})),
            Route("/api/v1/agent/tools", fixed({"tools": []})),
            Route("/api/v1/agent/personas", fixed({"personas": []})),
            Route("/api/v1/agent/console/suggestions", fixed({"suggestions": []})),
            Route("/api/v1/agent/conversations", fixed({"conversations": []})),
            Route("/api/v1/agent/conversations/{id}", self._no_conversation),
            Route("/api/v1/admin/runtime", self._not_admin),
            Route("/api/v1/agent/run", self._run, methods=["POST"]),
            Route("/api/v1/agent/runs/{runId}/events", self._events),
            Route("/api/v1/agent/runs/{runId}/inputs", self._inputs, methods=["POST"]),
            Route("/api/v1/admin/mcp-servers", self._servers),
            Route("/api/v1/admin/mcp-servers/{name}/authorize", self._authorize, methods=["POST"]),
            Route("/api/v1/admin/oauth-connections", self._admin_connections, methods=["GET", "DELETE"]),
            Route("/api/v1/agent/connections", self._connections),
            Route("/api/v1/agent/connections/{name}/authorize", self._authorize, methods=["POST"]),
            Route("/api/v1/agent/connections/{name}", self._disconnect, methods=["DELETE"]),
        ]
        return Starlette(routes=routes, exception_handlers={ApiError: self._api_error})

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        body = json.loads(raw) if raw else None
        self.requests.append(RecordedRequest(request.method, request.url.path, dict(request.query_params), body))
        return body

    async def _api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _error(exc.status, exc.code, exc.message)

    async def _consent(self, request: Request) -> Response:
        return HTMLResponse(f"<!doctype html><title>Consent</title><p>Consent for {request.query_params['server']}</p>")

    async def _no_conversation(self, request: Request) -> Response:
        return _error(404, "conversation_not_found", "No such conversation.")

    async def _not_admin(self, request: Request) -> Response:
        return _error(403, "admin_only", "This key is not an admin key.")

    async def _run(self, request: Request) -> Response:
        await self._record(request)
        run = ScriptedRun(f"run-scripted-{len(self.runs) + 1}")
        self.runs[run.run_id] = run
        run.push(RunStarted(run_id=run.run_id, model="demo", tools=[], max_iterations=4), *self.first_events)
        return StreamingResponse(run.stream(0), media_type="text/event-stream", headers={"X-Agent-Run-Id": run.run_id})

    async def _events(self, request: Request) -> Response:
        run = self.runs.get(request.path_params["runId"])
        if run is None:
            return _error(404, "run_not_found", "No such run.")
        after = int(request.headers.get("Last-Event-ID", "0"))
        return StreamingResponse(run.stream(after), media_type="text/event-stream")

    async def _inputs(self, request: Request) -> Response:
        body = await self._record(request)
        run = self.runs.get(request.path_params["runId"])
        if run is None:
            return _error(404, "run_not_found", "No such run.")
        answers = InputsRequest.model_validate(body)
        run.push(*self.after_inputs(run, answers))  # an ApiError raised here is the answer
        return JSONResponse({"runId": run.run_id, "status": "tool_loop", "inputs": []})

    async def _servers(self, request: Request) -> Response:
        await self._record(request)
        if self.servers is None:
            return _error(403, "admin_only", "This key is not an admin key.")
        return JSONResponse({"servers": self.servers})

    async def _authorize(self, request: Request) -> Response:
        await self._record(request)
        answer = self.authorize_answers.get(request.path_params["name"])
        if answer is None:
            return _error(404, "server_not_found", "No such server.")
        return JSONResponse(answer)

    async def _admin_connections(self, request: Request) -> Response:
        await self._record(request)
        if self.admin_connections is None:
            return _error(404, "not_found", "Not found.")
        if request.method == "GET":
            return JSONResponse({"connections": self.admin_connections})
        server, user = request.query_params.get("server"), request.query_params.get("user", "")
        kept = [c for c in self.admin_connections if (c["server"], c.get("user") or "") != (server, user)]
        if len(kept) == len(self.admin_connections):
            return _error(404, "connection_not_found", "No such connection.")
        self.admin_connections = kept
        for listed in self.servers or []:  # the tenant's token gone: its machine server needs a consent again
            if listed["name"] == server and not user and "authorization" in listed:
                listed["authorization"] = {**listed["authorization"], "state": "required"}
        return Response(status_code=204)

    async def _connections(self, request: Request) -> Response:
        await self._record(request)
        if self.connections is None:
            return _error(404, "not_found", "Not found.")
        return JSONResponse({"connections": self.connections, "available": self.available})

    async def _disconnect(self, request: Request) -> Response:
        await self._record(request)
        if self.connections is None:
            return _error(404, "not_found", "Not found.")
        self.connections = [c for c in self.connections if c["server"] != request.path_params["name"]]
        return Response(status_code=204)
