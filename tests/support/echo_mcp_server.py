"""A tiny real MCP server for tests and benchmarks, over stdio or streamable HTTP.

As a script (the way mcp-client-service spawns it)::

    python tests/support/echo_mcp_server.py [--transport stdio|streamable-http] [--port N]
        [--name NAME] [--tool-prefix PREFIX]

In process, serve ``build_echo_server(name).streamable_http_app()`` with ``serve_app``: that
app's own lifespan runs the session manager.

Tools (each name prefixed with ``tool_prefix``, so that two instances can have distinct tools):

- ``echo(text)``, ``add(a, b)``;
- ``fail(message)``: raises ``ToolError``, so the result has ``isError``;
- ``slow(seconds)``: sleeps, to simulate a slow tool;
- ``rendezvous(group, parties)``: returns only once ``parties`` calls of ``group`` are in
  flight at once, so that calls handled one after the other hang (bound the wait);
- ``hold(tag)``: never returns on its own; it records that it started and, when cancelled, that
  it was cancelled. ``await_hold(tag, event)`` returns once the ``hold`` call of ``tag`` has
  ``started`` or was ``cancelled``: how a test sees, without sleeping, that a call abandoned by
  the gateway stopped on the server;
- ``gate(tag)``: returns only once ``open_gate(tag)`` is called on the same server instance
  (``await_hold(tag, "started")`` returns once the gate call has started): a call that stays in
  flight exactly as long as a test wants, for instance across a reload of the gateway;
- ``whoami()``: the server's name, to prove where a call went;
- ``env_keys()``: the sorted names of the process's environment variables, to prove what a
  stdio child inherits;
- ``pid()``: the process id; ``crash()``: ends the process at once, to simulate a server dying
  mid-call (for a stdio child; never call it in process).

Only ``mcp`` is imported, so the script runs under any interpreter that has the SDK.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

__all__ = ["ECHO_TOOLS", "build_echo_server", "main"]

ECHO_TOOLS = (
    "echo",
    "add",
    "fail",
    "slow",
    "rendezvous",
    "hold",
    "await_hold",
    "gate",
    "open_gate",
    "whoami",
    "env_keys",
    "pid",
    "crash",
    "trace_context",
    "caller_meta",
)
"""The tool names of an echo server without a prefix, in the order it lists them."""


@dataclass
class _Gathering:
    present: int = 0
    complete: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class _Held:
    started: anyio.Event = field(default_factory=anyio.Event)
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    opened: anyio.Event = field(default_factory=anyio.Event)


def build_echo_server(name: str = "echo", *, tool_prefix: str = "") -> MCPServer:
    server = MCPServer(name)
    # Per server instance; events are made inside tool calls, so on the server's event loop.
    gatherings: dict[str, _Gathering] = {}
    held: dict[str, _Held] = {}

    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def fail(message: str) -> str:
        """Always fail, with the given message as the tool's error."""
        raise ToolError(message)

    async def slow(seconds: float) -> str:
        """Sleep for the given number of seconds, then say so (a deliberately slow tool)."""
        await anyio.sleep(seconds)
        return f"slept {seconds} s"

    async def rendezvous(group: str, parties: int) -> str:
        """Return once `parties` calls with this `group` are in flight at the same time."""
        gathering = gatherings.setdefault(group, _Gathering())
        gathering.present += 1
        try:
            if gathering.present >= parties:
                gathering.complete.set()
                del gatherings[group]  # the group's name may be used again for a new meeting
            await gathering.complete.wait()
        finally:
            gathering.present -= 1
        return f"{parties} calls met in {group}"

    async def hold(tag: str) -> str:
        """Never return on its own: record that this call started, and whether it was cancelled."""
        state = held.setdefault(tag, _Held())
        state.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            state.cancelled.set()  # only cancellation ends sleep_forever
        raise AssertionError("sleep_forever returned")

    async def await_hold(tag: str, event: Literal["started", "cancelled"]) -> str:
        """Return once the `hold` (or `gate`) call with this `tag` has started, or was cancelled."""
        state = held.setdefault(tag, _Held())
        await (state.started if event == "started" else state.cancelled).wait()
        return f"{tag} {event}"

    async def gate(tag: str) -> str:
        """Return once `open_gate` is called with this `tag`."""
        state = held.setdefault(tag, _Held())
        state.started.set()
        await state.opened.wait()
        return f"{tag} passed"

    def open_gate(tag: str) -> str:
        """Let the `gate` call with this `tag` return."""
        held.setdefault(tag, _Held()).opened.set()
        return f"{tag} opened"

    def whoami() -> str:
        """The name of this server."""
        return name

    def env_keys() -> list[str]:
        """The sorted names of this process's environment variables (never their values)."""
        return sorted(os.environ)

    def pid() -> int:
        """The process id of this server."""
        return os.getpid()

    def crash() -> str:
        """End this server's process immediately, without answering."""
        os._exit(3)

    def trace_context(ctx: Context) -> str:
        """The W3C trace context this call's request carried in its `_meta` (JSON)."""
        meta: dict[str, object] = dict(ctx.request_context.meta or {})
        return json.dumps({key: meta[key] for key in ("traceparent", "tracestate") if key in meta})

    def caller_meta(ctx: Context) -> str:
        """Who the gateway said this call acts for: its `_meta["io.loopsuite/caller"]` (JSON; `null` without)."""
        meta: dict[str, object] = dict(ctx.request_context.meta or {})
        return json.dumps(meta.get("io.loopsuite/caller"))

    tools = (
        echo,
        add,
        fail,
        slow,
        rendezvous,
        hold,
        await_hold,
        gate,
        open_gate,
        whoami,
        env_keys,
        pid,
        crash,
        trace_context,
        caller_meta,
    )
    for tool in tools:
        server.add_tool(tool, name=tool_prefix + tool.__name__)
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8199)
    parser.add_argument("--name", default="echo")
    parser.add_argument("--tool-prefix", default="")
    args = parser.parse_args(argv)
    server = build_echo_server(args.name, tool_prefix=args.tool_prefix)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
