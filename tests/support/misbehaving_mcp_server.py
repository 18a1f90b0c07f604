"""A real MCP server that misbehaves on purpose, over stdio or streamable HTTP.

As a script (the way mcp-client-service spawns it)::

    python tests/support/misbehaving_mcp_server.py --mode MODE [--mode MODE ...]
        [--transport stdio|streamable-http] [--port N | --fd FD] [--side-effects FILE]

In a test, ``misbehaving_server(transport, modes, ...)`` starts it (a child process either way:
a crash must not take the test with it) and yields its ``mcpServers`` entry.

Every server has ``echo(text)`` and ``pid()``, which behave, so a test can see that the rest of
the server (and the gateway) keeps working. Each ``--mode`` adds its tools:

- ``crash-mid-call``: ``crash_mid_call(note)`` appends ``note`` as a line to the side-effects
  file, then ends the process without answering: a call whose outcome the client cannot know;
- ``hang``: ``hang(tag)`` never answers, and honours cancellation; ``hang_status(tag, event)``
  returns once the ``hang`` call of ``tag`` has ``started`` or was ``cancelled``, naming the
  JSON-RPC id of the request it saw start or cancelled, so that a test sees without sleeping
  that the cancellation reached the server for that very request;
- ``hang-ignoring-cancel``: ``hang_ignoring_cancel(tag, seconds)`` ignores cancellation and
  answers only after ``seconds`` (a stdio child is killed at shutdown all the same);
  ``hang_status(tag, "started")`` works for it too;
- ``bad-output``: ``wrong_output()`` returns ``structuredContent`` that breaks the
  ``outputSchema`` it declares, ``missing_output()`` declares one and sends none;
- ``huge-result``: ``huge_result(chars)`` returns ``chars`` characters as text and as
  ``structuredContent``; ``huge_image(size)`` returns a PNG-typed image block of ``size`` bytes;
- ``strict-schemas``: ``plan_trip(traveller, legs, cabin?)``, whose ``inputSchema`` uses
  ``$ref``/``$defs``, nested arrays, ``enum`` and ``oneOf``; every call that reaches it is
  appended to the side-effects file, so a test can prove that an invalid call never did;
- ``rpc-error``: ``rpc_error(code?)`` answers with a JSON-RPC error (``code``, -32603 by default:
  a server may use -32000..-32099 too), not a result.

Over streamable HTTP, ``--json-response`` answers each request with a JSON body instead of an
event stream.

To add a mode, write a function returning its ``MisbehavingTool`` list and add it to ``MODES``.
Only ``mcp`` and ``anyio`` (and ``uvicorn`` over HTTP) are imported, so the script runs under any
interpreter with the SDK.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ImageContent,
    ListToolsResult,
    PaginatedRequestParams,
    RequestId,
    TextContent,
    Tool,
)

__all__ = ["MODES", "PLAN_TRIP_SCHEMA", "MisbehavingTool", "build_misbehaving_server", "main", "misbehaving_server"]

SCRIPT = Path(__file__).resolve()

Handler = Callable[[ServerRequestContext[Any], dict[str, Any]], Awaitable[CallToolResult]]


@dataclass(frozen=True)
class MisbehavingTool:
    tool: Tool
    handler: Handler


@dataclass
class _Hang:
    started: anyio.Event = field(default_factory=anyio.Event)
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    request_id: RequestId | None = None


@dataclass
class _State:
    side_effects: Path | None
    hangs: dict[str, _Hang] = field(default_factory=dict)

    def record(self, line: str) -> None:
        if self.side_effects is None:
            raise MCPError(INVALID_PARAMS, "this server was started without --side-effects")
        with self.side_effects.open("a", encoding="utf-8") as file:
            file.write(line + "\n")
            file.flush()
            os.fsync(file.fileno())


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text)])


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or list(properties)}


def _base_tools(_: _State) -> list[MisbehavingTool]:
    async def echo(_: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        return _text(str(arguments.get("text", "")))

    async def pid(_: ServerRequestContext[Any], __: dict[str, Any]) -> CallToolResult:
        return CallToolResult(content=[TextContent(text=str(os.getpid()))], structured_content={"pid": os.getpid()})

    return [
        MisbehavingTool(Tool(name="echo", input_schema=_object({"text": {"type": "string"}})), echo),
        MisbehavingTool(
            Tool(
                name="pid",
                input_schema=_object({}),
                output_schema=_object({"pid": {"type": "integer"}}),
            ),
            pid,
        ),
    ]


def _crash_tools(state: _State) -> list[MisbehavingTool]:
    async def crash_mid_call(_: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        state.record(str(arguments["note"]))
        os._exit(3)

    schema = _object({"note": {"type": "string"}})
    return [MisbehavingTool(Tool(name="crash_mid_call", input_schema=schema), crash_mid_call)]


def _hang_status_tool(state: _State) -> MisbehavingTool:
    async def hang_status(_: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        tag, event = str(arguments["tag"]), str(arguments["event"])
        hang = state.hangs.setdefault(tag, _Hang())
        await (hang.started if event == "started" else hang.cancelled).wait()
        return _text(f"{tag} {event}: request {hang.request_id!r}")

    schema = _object({"tag": {"type": "string"}, "event": {"enum": ["started", "cancelled"]}})
    return MisbehavingTool(Tool(name="hang_status", input_schema=schema), hang_status)


def _hang_tools(state: _State) -> list[MisbehavingTool]:
    async def hang(ctx: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        record = state.hangs.setdefault(str(arguments["tag"]), _Hang())
        record.request_id = ctx.request_id
        record.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            record.cancelled.set()  # only a cancellation ends sleep_forever
        raise AssertionError("sleep_forever returned")

    return [
        MisbehavingTool(Tool(name="hang", input_schema=_object({"tag": {"type": "string"}})), hang),
        _hang_status_tool(state),
    ]


def _hang_ignoring_cancel_tools(state: _State) -> list[MisbehavingTool]:
    async def hang_ignoring_cancel(ctx: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        record = state.hangs.setdefault(str(arguments["tag"]), _Hang())
        record.request_id = ctx.request_id
        record.started.set()
        with anyio.CancelScope(shield=True):
            await anyio.sleep(float(arguments["seconds"]))
        return _text("finished after all")

    schema = _object({"tag": {"type": "string"}, "seconds": {"type": "number"}})
    return [
        MisbehavingTool(Tool(name="hang_ignoring_cancel", input_schema=schema), hang_ignoring_cancel),
        _hang_status_tool(state),  # a server with both modes lists it once
    ]


_COUNT_SCHEMA = _object({"count": {"type": "integer"}, "labels": {"type": "array", "items": {"type": "string"}}})


def _bad_output_tools(_: _State) -> list[MisbehavingTool]:
    async def wrong_output(_: ServerRequestContext[Any], __: dict[str, Any]) -> CallToolResult:
        structured = {"count": "many", "labels": ["a", 2]}
        return CallToolResult(content=[TextContent(text=json.dumps(structured))], structured_content=structured)

    async def missing_output(_: ServerRequestContext[Any], __: dict[str, Any]) -> CallToolResult:
        return _text("no structured content, although the tool declares an outputSchema")

    return [
        MisbehavingTool(Tool(name="wrong_output", input_schema=_object({}), output_schema=_COUNT_SCHEMA), wrong_output),
        MisbehavingTool(
            Tool(name="missing_output", input_schema=_object({}), output_schema=_COUNT_SCHEMA), missing_output
        ),
    ]


def _huge_result_tools(_: _State) -> list[MisbehavingTool]:
    async def huge_result(_: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        blob = "y" * int(arguments["chars"])
        return CallToolResult(content=[TextContent(text=blob)], structured_content={"blob": blob})

    async def huge_image(_: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        data = base64.b64encode(b"\x89PNG" + b"\0" * int(arguments["size"])).decode()
        return CallToolResult(content=[TextContent(text="an image"), ImageContent(data=data, mime_type="image/png")])

    return [
        MisbehavingTool(
            Tool(
                name="huge_result",
                input_schema=_object({"chars": {"type": "integer"}}),
                output_schema=_object({"blob": {"type": "string"}}),
            ),
            huge_result,
        ),
        MisbehavingTool(Tool(name="huge_image", input_schema=_object({"size": {"type": "integer"}})), huge_image),
    ]


PLAN_TRIP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "traveller": {"$ref": "#/$defs/person"},
        "legs": {"type": "array", "items": {"$ref": "#/$defs/leg"}, "minItems": 1},
        "cabin": {"enum": ["economy", "business"]},
    },
    "required": ["traveller", "legs"],
    "additionalProperties": False,
    "$defs": {
        "person": _object({"name": {"type": "string", "minLength": 1}, "age": {"type": "integer", "minimum": 0}}),
        "leg": {
            "type": "object",
            "properties": {
                "from": {"type": "string"},
                "to": {"type": "string"},
                "when": {
                    "oneOf": [
                        {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
                        _object({"flexible": {"const": True}}),
                    ]
                },
            },
            "required": ["from", "to", "when"],
        },
    },
}


def _strict_schema_tools(state: _State) -> list[MisbehavingTool]:
    async def plan_trip(_: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        state.record(json.dumps(arguments, sort_keys=True))
        legs = arguments["legs"]
        return CallToolResult(
            content=[TextContent(text=f"{len(legs)} legs planned")], structured_content={"legs": len(legs)}
        )

    tool = Tool(
        name="plan_trip",
        description="Plan a trip of one or more legs.",
        input_schema=PLAN_TRIP_SCHEMA,
        output_schema=_object({"legs": {"type": "integer"}}),
    )
    return [MisbehavingTool(tool, plan_trip)]


def _rpc_error_tools(_: _State) -> list[MisbehavingTool]:
    async def rpc_error(_: ServerRequestContext[Any], arguments: dict[str, Any]) -> CallToolResult:
        raise MCPError(int(arguments.get("code", INTERNAL_ERROR)), "the database is down")

    schema = {"type": "object", "properties": {"code": {"type": "integer"}}}
    return [MisbehavingTool(Tool(name="rpc_error", input_schema=schema), rpc_error)]


MODES: dict[str, Callable[[_State], list[MisbehavingTool]]] = {
    "crash-mid-call": _crash_tools,
    "hang": _hang_tools,
    "hang-ignoring-cancel": _hang_ignoring_cancel_tools,
    "bad-output": _bad_output_tools,
    "huge-result": _huge_result_tools,
    "strict-schemas": _strict_schema_tools,
    "rpc-error": _rpc_error_tools,
}


def build_misbehaving_server(modes: list[str], *, side_effects: Path | None = None) -> Server[Any]:
    state = _State(side_effects=side_effects)
    tools: dict[str, MisbehavingTool] = {}
    for mode in ["base", *modes]:
        build = _base_tools if mode == "base" else MODES[mode]
        for entry in build(state):
            tools.setdefault(entry.tool.name, entry)

    async def list_tools(_: ServerRequestContext[Any], __: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=[entry.tool for entry in tools.values()])

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        entry = tools.get(params.name)
        if entry is None:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        return await entry.handler(ctx, dict(params.arguments or {}))

    return Server("misbehaving", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


@asynccontextmanager
async def misbehaving_server(
    transport: str,
    modes: Sequence[str],
    *,
    side_effects: Path | None = None,
    json_response: bool = False,
    **options: Any,
) -> AsyncIterator[dict[str, Any]]:
    """Yields the ``mcpServers`` entry (plus ``options``, such as ``callTimeoutSeconds``) of this server.

    Over stdio the gateway spawns it. Over streamable HTTP it runs here as a child process, on a
    socket that listens before the child starts: connections wait in its backlog instead of being
    refused while the child imports, so nothing has to wait for it. It is stopped on exit.
    """
    args = [str(SCRIPT), *(part for mode in modes for part in ("--mode", mode))]
    if side_effects is not None:
        args += ["--side-effects", str(side_effects)]
    if json_response:
        args.append("--json-response")
    if transport == "stdio":
        yield {"command": sys.executable, "args": [*args, "--transport", "stdio"], **options}
        return
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        port = listening.getsockname()[1]
        command = [sys.executable, *args, "--transport", "streamable-http", "--fd", str(listening.fileno())]
        process = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None, pass_fds=[listening.fileno()]
        )
    try:
        yield {"url": f"http://127.0.0.1:{port}/mcp", **options}
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mode", action="append", choices=sorted(MODES), default=[])
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8198)
    parser.add_argument("--fd", type=int, default=None, help="serve on this inherited listening socket instead")
    parser.add_argument("--side-effects", type=Path, default=None)
    parser.add_argument("--json-response", action="store_true", help="answer with JSON bodies, not event streams")
    args = parser.parse_args(argv)
    server = build_misbehaving_server(args.mode, side_effects=args.side_effects)
    if args.transport == "stdio":
        anyio.run(_serve_stdio, server)
    else:
        import uvicorn

        app = server.streamable_http_app(json_response=args.json_response)
        if args.fd is not None:
            uvicorn.run(app, fd=args.fd, log_level="warning", timeout_graceful_shutdown=1)
        else:
            uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
