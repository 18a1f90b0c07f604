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
  ``notifications/tools/list_changed`` after its answer; ``grow_many(prefix, count, interval)``
  adds ``count`` tools ``<prefix><n>`` from a thread of its own, one every ``interval`` seconds,
  announcing each (the server keeps answering meanwhile); ``list_count()`` says how many
  ``tools/list`` requests it has answered;
- ``busy``: ``busy(seconds)`` keeps the whole server busy that long (it reads nothing meanwhile,
  so a ping waits too), then answers;
- ``deep-schema``: beside ``echo`` and ``pid``, ``deep`` whose ``inputSchema`` is nested 150
  levels of properties deep (about 300 levels of JSON: more than the SDK's JSON parser reads);
- ``stderr-noise``: writes to stderr at start: a line, one that looks like a JSON log record, one
  with terminal escapes, one of 10,000 characters, then ``--stderr-lines`` numbered lines;
- ``crash-at-start``: exits with status 1 before reading anything;
- ``crash-on-restart``: serves normally the first time (it creates the ``--state`` file), and
  exits at start every time after; ``die()`` ends the process without answering;
- ``slow-list``: answers ``tools/list`` only after ``--delay`` seconds (it exits when its stdin
  closes meanwhile, as a well-behaved server does);
- ``elicit``: ``ask(message, after=0)`` asks the client ``elicitation/create`` (form mode: ``name``, required,
  and ``greeting``, defaulting to ``"hello"``) ``after`` seconds on (a call cancelled meanwhile asks all the same)
  and answers with the client's ``ElicitResult`` as JSON text (an error answer as ``{"error": ...}``); several may
  wait at once;
- ``odd-tools``: lists ``echo`` a second time (with another description), ``long_job`` whose
  ``execution.taskSupport`` is ``"required"`` (it can only run as a task) and ``maybe_task``
  whose ``taskSupport`` is ``"optional"``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import threading
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
    "busy",
    "deep-schema",
    "stderr-noise",
    "odd-tools",
    "elicit",
)

ASK_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "greeting": {"type": "string", "default": "hello"}},
    "required": ["name"],
}
"""What ``ask`` (mode ``elicit``) asks for."""

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


def _deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


class RawServer:
    def __init__(self, mode: str, delay: float, state: Path | None = None, stderr_lines: int = 0) -> None:
        self.mode = mode
        self.delay = delay
        self.state = state
        self.stderr_lines = stderr_lines
        self.extra_tools: list[str] = []
        self.lists_answered = 0
        self.asking: dict[str, Any] = {}
        """Mode ``elicit``: the id of each ``elicitation/create`` sent -> the ``tools/call`` it answers."""
        self._writing = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self._writing:
            if self.mode == "noisy-stdout":
                sys.stdout.write("log: answering a request\n")
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def grow_many(self, prefix: str, count: int, interval: float) -> None:
        for n in range(count):
            self.extra_tools.append(f"{prefix}{n}")
            self.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            time.sleep(interval)

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
            many = {
                "type": "object",
                "properties": {
                    "prefix": {"type": "string"},
                    "count": {"type": "integer"},
                    "interval": {"type": "number"},
                },
            }
            grown = [_tool(extra, _OBJECT) for extra in list(self.extra_tools)]
            return [*base, _tool("grow", name), _tool("grow_many", many), _tool("list_count", _OBJECT), *grown]
        if self.mode == "busy":
            return [*base, _tool("busy", {"type": "object", "properties": {"seconds": {"type": "number"}}})]
        if self.mode == "odd-tools":
            return [
                *base,
                _tool("echo", text, description="A second echo: the server repeats the name."),
                {**_tool("long_job", _OBJECT), "execution": {"taskSupport": "required"}},
                {**_tool("maybe_task", _OBJECT), "execution": {"taskSupport": "optional"}},
            ]
        if self.mode == "deep-schema":
            return [*base, _tool("deep", _deep_schema(150))]
        if self.mode == "elicit":
            ask = {"type": "object", "properties": {"message": {"type": "string"}, "after": {"type": "number"}}}
            return [*base, _tool("ask", ask)]
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
        if name == "ask":
            asked = f"ask-{request_id}"
            self.asking[asked] = request_id
            question = {"mode": "form", "message": str(arguments.get("message", "Who?")), "requestedSchema": ASK_SCHEMA}
            request = {"jsonrpc": "2.0", "id": asked, "method": "elicitation/create", "params": question}
            # ``after``: the server works that long first (and goes on when the client cancels the call meanwhile).
            after = float(arguments.get("after", 0))
            if after > 0:
                threading.Timer(after, self.send, args=(request,)).start()
            else:
                self.send(request)
            return  # answered when the client's answer arrives (``handle``)
        if name == "echo":
            text = str(arguments.get("text", ""))
        elif name == "pid":
            text = str(os.getpid())
        elif name == "grow":
            self.extra_tools.append(str(arguments["name"]))
            text = f"added {arguments['name']}"
        elif name == "grow_many":
            count, interval = int(arguments["count"]), float(arguments["interval"])
            threading.Thread(target=self.grow_many, args=(str(arguments["prefix"]), count, interval)).start()
            text = f"adding {count} tools"
        elif name == "list_count":
            text = str(self.lists_answered)
        elif name == "busy":
            time.sleep(float(arguments["seconds"]))  # the whole server is busy: it reads nothing meanwhile
            text = "done"
        elif name in self.extra_tools or name in ("good", "maybe_task"):
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
        if method is None and request_id in self.asking:  # the client's answer to ``ask``'s question
            answer = message.get("result") or {"error": message.get("error")}
            text = json.dumps(answer, sort_keys=True)
            call_id = self.asking.pop(request_id)
            self.send({"jsonrpc": "2.0", "id": call_id, "result": {"content": [{"type": "text", "text": text}]}})
            return
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
            self.lists_answered += 1
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
        if self.mode == "stderr-noise":
            sys.stderr.write("raw_mcp_server: starting\n")
            sys.stderr.write('{"event": "mcp_server_ready", "server": "forged", "log_level": "info"}\n')
            sys.stderr.write("\x1b[31mred\x1b[0m and a carriage\rreturn\n")
            sys.stderr.write("L" * 10_000 + "\n")
            for n in range(self.stderr_lines):
                sys.stderr.write(f"line {n}\n")
            sys.stderr.flush()
        for line in sys.stdin:
            if line.strip():
                self.handle(json.loads(line))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mode", choices=MODES, default="plain")
    parser.add_argument("--delay", type=float, default=30.0)
    parser.add_argument("--state", type=Path, default=None)
    parser.add_argument("--stderr-lines", type=int, default=0)
    args = parser.parse_args(argv)
    RawServer(args.mode, args.delay, args.state, args.stderr_lines).serve()


if __name__ == "__main__":
    main()
