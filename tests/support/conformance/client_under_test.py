"""mcp-client-service as the client under test of the official MCP conformance suite (client scenarios).

The suite starts a scenario's MCP server and runs this program with the server's URL as its last argument, the
scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for some, its context (client credentials) as JSON in
``MCP_CONFORMANCE_CONTEXT``. This program does what an operator and a user of the gateway would: it writes a servers
file naming that URL, starts a real gateway on a loopback port, waits for the server, and lists and calls every tool
through the gateway's REST API. The suite then judges what the gateway sent the server. Tools are called with
``Accept: text/event-stream``, as agent-service calls them: a server's question (an ``elicitation`` event) is
answered ``accept`` with no content, so the gateway fills the requested schema's defaults (SEP-1034).

Run by ``tests/integration/test_mcp_conformance.py``; by hand::

    node --import tests/support/conformance/node20_globsync.mjs \\
        tests/support/node_servers/node_modules/@modelcontextprotocol/conformance/dist/index.js client \\
        --command "python tests/support/conformance/client_under_test.py" --scenario tools_call
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

from suite_common.sse_parser import EventStreamParser
from support.mcp_gateway import Gateway, running_gateway

SERVER = "conformance"


def arguments_for(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments that satisfy a tool's input schema: a value of the declared type for each required property."""
    samples = {"number": 1, "integer": 1, "string": "conformance", "boolean": True, "array": [], "object": {}}
    properties = schema.get("properties") or {}
    return {
        name: samples.get(str((properties.get(name) or {}).get("type")), "conformance")
        for name in schema.get("required") or []
    }


async def wait_for_tools(gateway: Gateway) -> list[dict[str, Any]]:
    """The scenario server's tools, once the gateway serves it (bounded)."""
    await gateway.wait_until_ready(SERVER)
    listing = (await gateway.http.get("/mcp/v1/tools/list-tools")).json()
    return [tool for tool in listing["tools"] if tool["server"] == SERVER]


async def call_answering_questions(gateway: Gateway, body: dict[str, Any]) -> str:
    """One call-tool as SSE, each of the server's questions answered ``accept`` with ``{}``: its last event."""
    parser, last = EventStreamParser(), ""
    headers = {"Accept": "text/event-stream"}
    async with gateway.http.stream("POST", "/mcp/v1/tools/call-tool", json=body, headers=headers) as response:
        async for chunk in response.aiter_bytes():
            for event in parser.feed(chunk):
                if event.event == "elicitation":
                    question = json.loads(event.data)["elicitationId"]
                    answer = {"action": "accept", "content": {}}
                    answered = await gateway.http.post(f"/mcp/v1/elicitations/{question}", json=answer)
                    print(f"answered {question}: {answered.status_code} {answered.text}", flush=True)
                last = f"{event.event} {event.data}"
    return last


async def call_every_tool(gateway: Gateway, tools: list[dict[str, Any]]) -> None:
    for tool in tools:
        body = {"name": tool["name"], "server": SERVER, "arguments": arguments_for(tool["inputSchema"])}
        print(f"call {tool['name']}: {await call_answering_questions(gateway, body)}", flush=True)


def server_config(url: str, scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    """The servers file's entry for the scenario's server."""
    return {"url": url, "transport": "streamable-http"}


async def main(url: str) -> None:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    async with running_gateway({SERVER: server_config(url, scenario, context)}) as gateway:
        tools = await wait_for_tools(gateway)
        print(f"tools: {[tool['name'] for tool in tools]}", flush=True)
        await call_every_tool(gateway, tools)


if __name__ == "__main__":
    anyio.run(main, sys.argv[-1])
