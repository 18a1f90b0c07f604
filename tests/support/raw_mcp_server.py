"""A stdio MCP server written by hand, to break the protocol in ways an SDK server cannot.

    python tests/support/raw_mcp_server.py --mode MODE [--delay SECONDS]

It speaks the handshake-era protocol (``initialize``, 2025-06-18) on stdin/stdout with the
standard library only, as many third-party servers still do; it answers ``server/discover`` with
"method not found", so a client falls back to the handshake. Every mode lists ``echo(text)`` and
``pid()``, which behave. Modes:

- ``plain``: nothing else;
- ``invalid-schemas``: beside ``good``, tools whose ``inputSchema`` is missing, a string, not a
  JSON Schema (``"type": "objekt"``), not an object schema, invalid in the draft it declares, of
  an unknown dialect;
- ``no-valid-tools``: only such tools (``echo`` and ``pid`` left out);
- ``flood``: ``flood()`` answers with one line that never ends (64 KiB chunks, no newline);
- ``noisy-stdout``: writes lines that are not JSON-RPC (a banner, a log line, broken JSON, JSON
  that is not a message) to stdout at start and before every answer;
- ``list-changed``: ``grow(name)`` adds a tool ``name`` and sends
  ``notifications/tools/list_changed`` after its answer;
- ``crash-at-start``: exits with status 1 before reading anything;
- ``crash-on-restart``: serves normally the first time (it creates the ``--state`` file), and
  exits at start every time after; ``die()`` ends the process without answering;
- ``slow-list``: answers ``tools/list`` only after ``--delay`` seconds (it exits when its stdin
  closes meanwhile, as a well-behaved server does).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["INVALID_TOOLS", "MODES", "main"]

MODES = (
    "plain",
    "invalid-schemas",
    "no-valid-tools",
    "flood",
    "noisy-stdout",
    "list-changed",
    "crash-at-start",
    "crash-on-restart",
    "slow-list",
)

_PROTOCOL_VERSION = "2025-06-18"


def _tool(name: str, schema: Any = None, *, description: str = "") -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "description": description}
    if schema is not None:
        tool["inputSchema"] = schema
    return tool


_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}

INVALID_TOOLS: dict[str, dict[str, Any]] = {
    "no_schema": _tool("no_schema"),
    "string_schema": _tool("string_schema", "object"),
    "not_json_schema": _tool("not_json_schema", {"type": "objekt"}),
    "array_root": _tool("array_root", {"type": "array", "items": {"type": "string"}}),
    "bad_draft7": _tool(
        "bad_draft7",
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": "zero"}},
        },
    ),
    "unknown_dialect": _tool("unknown_dialect", {"$schema": "https://example.com/my-dialect", "type": "object"}),
}
"""Tools the gateway must drop, by name."""

_NOISE = ["Starting server v1.2 ...", "{broken json", '{"hello": "not a JSON-RPC message"}', "   ", "INFO ready"]


class RawServer:
    def __init__(self, mode: str, delay: float, state: Path | None = None) -> None:
        self.mode = mode
        self.delay = delay
        self.state = state
        self.extra_tools: list[str] = []

    def send(self, message: dict[str, Any]) -> None:
        if self.mode == "noisy-stdout":
            sys.stdout.write("log: answering a request\n")
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def tools(self) -> list[dict[str, Any]]:
        text = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        base = [_tool("echo", text, description="Return the text."), _tool("pid", _OBJECT)]
        if self.mode == "invalid-schemas":
            return [*base, _tool("good", _OBJECT, description="A tool with a valid schema."), *INVALID_TOOLS.values()]
        if self.mode == "no-valid-tools":
            return list(INVALID_TOOLS.values())
        if self.mode == "flood":
            return [*base, _tool("flood", _OBJECT)]
        if self.mode == "crash-on-restart":
            return [*base, _tool("die", _OBJECT)]
        if self.mode == "list-changed":
            name = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
            return [*base, _tool("grow", name), *(_tool(extra, _OBJECT) for extra in self.extra_tools)]
        return base

    def call(self, request_id: Any, params: dict[str, Any]) -> None:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name == "flood":
            sys.stdout.write(f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "result": {{"content": "')
            chunk = "x" * 65536
            while True:  # until the client kills us
                sys.stdout.write(chunk)
                sys.stdout.flush()
        if name == "die":
            os._exit(3)
        if name == "echo":
            text = str(arguments.get("text", ""))
        elif name == "pid":
            text = str(os.getpid())
        elif name == "grow":
            self.extra_tools.append(str(arguments["name"]))
            text = f"added {arguments['name']}"
        elif name in self.extra_tools or name == "good":
            text = f"{name} called"
        else:
            self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"no tool {name}"}})
            return
        self.send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})
        if name == "grow":
            self.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    def handle(self, message: dict[str, Any]) -> None:
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            return  # a notification (initialized, cancelled): nothing to answer
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": _PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": self.mode == "list-changed"}},
                "serverInfo": {"name": f"raw-{self.mode}", "version": "0.0.1"},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            if self.mode == "slow-list":
                self.stall()
            result = {"tools": self.tools()}
        elif method == "tools/call":
            self.call(request_id, message.get("params") or {})
            return
        else:
            self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})
            return
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def stall(self) -> None:
        """Wait ``delay`` seconds before answering, but end at once when stdin closes (the client left)."""
        deadline = time.monotonic() + self.delay
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([sys.stdin], [], [], left)
            if readable and not sys.stdin.readline():
                sys.exit(0)  # anything else read here is a notification (cancelled): nothing to answer

    def serve(self) -> None:
        if self.mode == "crash-on-restart":
            if self.state is None:
                sys.exit("raw_mcp_server: crash-on-restart needs --state FILE")
            if self.state.exists():
                self.mode = "crash-at-start"
            self.state.touch()
        if self.mode == "crash-at-start":
            sys.stderr.write("raw_mcp_server: crashing at start, as asked\n")
            sys.exit(1)
        if self.mode == "noisy-stdout":
            sys.stdout.write("\n".join(_NOISE) + "\n")
            sys.stdout.flush()
        for line in sys.stdin:
            if line.strip():
                self.handle(json.loads(line))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mode", choices=MODES, default="plain")
    parser.add_argument("--delay", type=float, default=30.0)
    parser.add_argument("--state", type=Path, default=None)
    args = parser.parse_args(argv)
    RawServer(args.mode, args.delay, args.state).serve()


if __name__ == "__main__":
    main()
