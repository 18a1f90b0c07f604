"""mcp-client-service as the client under test of the official MCP conformance suite (client scenarios).

The suite starts a scenario's MCP server and runs this program with the server's URL as its last argument, the
scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for some, its context (client credentials) as JSON in
``MCP_CONFORMANCE_CONTEXT``. This program does what an operator and a user of the gateway would: it writes a servers
file naming that URL, starts a real gateway on a loopback port, waits for the server, and lists and calls every tool
through the gateway's REST API. The suite then judges what the gateway sent the server. Tools are called with
``Accept: text/event-stream``, as agent-service calls them: a server's question (an ``elicitation`` event) is
answered ``accept`` with no content, so the gateway fills the requested schema's defaults (SEP-1034).

For the ``auth/`` scenarios it also plays the operator (an ``auth`` block: the context's pre-registered client, the
gateway's client ID metadata document URL, a secrets key for the vault) and the person: when the server's status
says ``authorization.authorizationUrl`` (or a call answers 401 ``authorization_required``, a step-up), it opens the
URL without following redirects (the scenario's authorization server redirects at once), takes ``code`` and
``state`` from the ``Location`` and hands them to ``POST /mcp/v1/oauth/callback``, as agent-service's callback would.

Run by ``tests/integration/test_mcp_conformance.py``; by hand::

    node --import tests/support/conformance/node20_globsync.mjs \\
        tests/support/node_servers/node_modules/@modelcontextprotocol/conformance/dist/index.js client \\
        --command "python tests/support/conformance/client_under_test.py" --scenario tools_call
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
from cryptography.fernet import Fernet
from pydantic import SecretStr

from mcp_client_service.registry.server_registry import ServerRegistry
from suite_common.sse_parser import EventStreamParser
from support.mcp_gateway import Gateway, running_gateway

SERVER = "conformance"
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document URL the suite's authorization servers expect (``auth/basic-cimd``)."""
WAIT_SECONDS = 20
MAX_CONSENTS_PER_CALL = 4
"""A person consenting again on a step-up: a bound of the test's own, above the gateway's step-up limit (3), so that
the gateway's limit is what stops ``auth/scope-retry-limit``."""


def arguments_for(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments that satisfy a tool's input schema: a value of the declared type for each required property."""
    samples = {"number": 1, "integer": 1, "string": "conformance", "boolean": True, "array": [], "object": {}}
    properties = schema.get("properties") or {}
    return {
        name: samples.get(str((properties.get(name) or {}).get("type")), "conformance")
        for name in schema.get("required") or []
    }


async def consent(gateway: Gateway, authorization_url: str) -> None:
    """What a person and agent-service's callback do: open the URL, come back with the code, hand it over."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
        answer = await browser.get(authorization_url)
    location = answer.headers.get("location", "")
    query = {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}
    body = {name: query[name] for name in ("state", "code", "error", "error_description", "iss") if name in query}
    response = await gateway.http.post("/mcp/v1/oauth/callback", json=body)
    print(f"consent: {answer.status_code}, callback {response.status_code} {response.text}", flush=True)


def _settled(consented: set[str]) -> Any:
    """Whether the server serves, waits for a consent not given yet, or failed for another reason."""

    def check(registry: ServerRegistry) -> bool:
        connection = registry.connections[SERVER]
        waiting = connection.consent
        return (
            connection.serving
            or (waiting is not None and waiting.authorization_url not in consented)
            or connection.state == "failed"
        )

    return check


async def wait_for_tools(gateway: Gateway) -> list[dict[str, Any]] | None:
    """The scenario server's tools, once the gateway serves it, consenting as often as it asks (bounded); ``None``
    when it failed (as ``auth/scope-retry-limit`` wants, once the gateway stopped asking)."""
    consented: set[str] = set()
    with anyio.fail_after(WAIT_SECONDS):
        while True:
            await gateway.registry.wait_until(_settled(consented))
            connection = gateway.registry.connections[SERVER]
            if connection.serving:
                break
            if connection.consent is None:
                print(f"the server failed: {connection.last_error}", flush=True)
                return None
            consented.add(connection.consent.authorization_url)
            await consent(gateway, connection.consent.authorization_url)
    listing = (await gateway.http.get("/mcp/v1/tools/list-tools")).json()
    return [tool for tool in listing["tools"] if tool["server"] == SERVER]


async def call_answering_questions(gateway: Gateway, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One call-tool as SSE, each of the server's questions answered ``accept`` with ``{}``: its last event (name and
    data)."""
    parser = EventStreamParser()
    last: tuple[str, dict[str, Any]] = ("", {})
    headers = {"Accept": "text/event-stream"}
    async with gateway.http.stream("POST", "/mcp/v1/tools/call-tool", json=body, headers=headers) as response:
        async for chunk in response.aiter_bytes():
            for event in parser.feed(chunk):
                if event.event == "elicitation":
                    question = json.loads(event.data)["elicitationId"]
                    answer = {"action": "accept", "content": {}}
                    answered = await gateway.http.post(f"/mcp/v1/elicitations/{question}", json=answer)
                    print(f"answered {question}: {answered.status_code} {answered.text}", flush=True)
                last = (event.event, json.loads(event.data) if event.data else {})
    return last


async def call_every_tool(gateway: Gateway, tools: list[dict[str, Any]]) -> None:
    for tool in tools:
        body = {"name": tool["name"], "server": SERVER, "arguments": arguments_for(tool["inputSchema"])}
        for _ in range(MAX_CONSENTS_PER_CALL):
            kind, data = await call_answering_questions(gateway, body)
            print(f"call {tool['name']}: {kind} {json.dumps(data)}", flush=True)
            if kind != "error" or data.get("code") != "authorization_required":
                break
            await consent(gateway, data["authorizationUrl"])


def server_config(url: str, scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    """The servers file's entry for the scenario's server: an ``auth`` block for the auth scenarios, with the
    context's pre-registered client where it gives one."""
    config: dict[str, Any] = {"url": url, "transport": "streamable-http"}
    if scenario.startswith("auth/"):
        auth: dict[str, Any] = {"type": "oauth"}
        if context.get("client_id"):
            auth["clientId"] = context["client_id"]
        if context.get("client_secret"):
            auth["clientSecret"] = context["client_secret"]
        if scenario.startswith("auth/client-credentials"):
            auth["grant"] = "client_credentials"
        config["auth"] = auth
    return config


async def main(url: str) -> None:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory() as folder:
        settings: dict[str, Any] = {"database_url": f"sqlite:///{folder}/gateway.db"}
        if scenario.startswith("auth/"):
            settings |= {
                "secrets_key": SecretStr(Fernet.generate_key().decode()),
                "oauth_client_metadata_url": CLIENT_METADATA_URL,
            }
        async with running_gateway({SERVER: server_config(url, scenario, context)}, **settings) as gateway:
            tools = await wait_for_tools(gateway)
            if tools is None:
                return
            print(f"tools: {[tool['name'] for tool in tools]}", flush=True)
            await call_every_tool(gateway, tools)


if __name__ == "__main__":
    anyio.run(main, sys.argv[-1])
