"""Images in runs through the real services: a user's image and an MCP tool's image reach the LLM call, a stored run
keeps them by reference and serves them to its tenant only, and the OpenAI front takes images from the ``openai`` SDK.

The tool is ``get-tiny-image`` of the MCP reference server ``@modelcontextprotocol/server-everything`` (npm, over
stdio, behind a real mcp-client-service); completion-service is the real one over a scripted OpenAI, with what
agent-service sends it recorded on the way in (the neutral request: how a provider's adapter sends images is
completion-service's own business; a user's image goes to its ``demo`` model, which reads the text only).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
from pydantic import SecretStr
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from suite_common.sse_parser import EventStreamParser
from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.everything_server import EVERYTHING_DIR, everything_stdio_server
from support.fake_openai import ScriptedOpenAI
from support.mcp_gateway import running_gateway
from support.servers import serve_app
from support.stacks import running_agent

pytestmark = pytest.mark.anyio

TOOL = "get-tiny-image"
ACME_KEY = "acme-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex
CALLERS_FILE = f"""
[tenants.acme]

[tenants.globex]

{key_entry("acme-app", "acme", ACME_KEY)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}
"""
IMAGES_MAX_BYTES = 64 * 1024

PNG = b"\x89PNG\r\n\x1a\n" + uuid.uuid4().bytes * 8
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def _tiny_image() -> bytes:
    """The PNG ``get-tiny-image`` answers with, read from the installed server's source."""
    source = EVERYTHING_DIR / "node_modules/@modelcontextprotocol/server-everything/dist/tools/get-tiny-image.js"
    line = next(line for line in source.read_text().splitlines() if line.startswith("export const MCP_TINY_IMAGE"))
    return base64.b64decode(line.split('"')[1])


class RecordingCompletions:
    """completion-service with the body of each ``POST /api/v1/completions`` recorded as it comes in."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/api/v1/completions":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        self.requests.append(json.loads(body))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class Stack:
    def __init__(self, llm: ScriptedOpenAI, completions: RecordingCompletions, agent_url: str) -> None:
        self.llm, self.completions, self.agent_url = llm, completions, agent_url
        self.acme = httpx.AsyncClient(base_url=agent_url, timeout=30, headers=as_caller(ACME_KEY))
        self.globex = httpx.AsyncClient(base_url=agent_url, timeout=30, headers=as_caller(GLOBEX_KEY))


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    folder: Path = tmp_path_factory.mktemp("images")
    (folder / "callers.toml").write_text(CALLERS_FILE)
    llm = ScriptedOpenAI()
    async with AsyncExitStack() as running:
        llm_url = await running.enter_async_context(serve_app(llm.app))
        gateway = await running.enter_async_context(running_gateway({"everything": everything_stdio_server()}))
        settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), max_retries=0
        )
        completions = RecordingCompletions(create_completion_app(settings))
        completion_url = await running.enter_async_context(serve_app(completions))
        await gateway.wait_until_ready("everything")
        agent_url = await running.enter_async_context(
            running_agent(
                completion_url,
                gateway,
                database_url=f"sqlite:///{folder}/runs.db",
                callers_file=folder / "callers.toml",
                run_images_max_bytes=IMAGES_MAX_BYTES,
            )
        )
        stack = Stack(llm, completions, agent_url)
        running.push_async_callback(stack.acme.aclose)
        running.push_async_callback(stack.globex.aclose)
        yield stack


def _image_parts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    return (
        [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        if isinstance(content, list)
        else []
    )


async def test_an_mcp_tools_image_reaches_the_next_llm_call_and_the_stream_tells_only_its_type_and_size(
    stack: Stack,
) -> None:
    tiny = _tiny_image()
    stack.llm.push(fake_openai.tool_calls(("call_img", TOOL, {})), fake_openai.text("It is the MCP logo."))
    recorded = len(stack.completions.requests)
    body = {"model": "gpt-4o", "stream": True, "tools": [TOOL], "messages": [{"role": "user", "content": "Show me."}]}
    parser, events = EventStreamParser(), list[tuple[str, dict[str, Any]]]()
    with anyio.fail_after(30):
        async with stack.acme.stream("POST", "/api/v1/agent/run", json=body) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_bytes():
                events.extend((sse.event, json.loads(sse.data)) for sse in parser.feed(chunk))
    assert events[-1][0] == "done"
    [result] = [data for kind, data in events if kind == "tool_result"]
    assert result["images"] == [{"mimeType": "image/png", "sizeBytes": len(tiny)}]
    assert result["content"] == "Here's the image you requested:\nThe image above is the MCP logo."
    assert base64.b64encode(tiny).decode() not in json.dumps([data for _, data in events])

    # The second LLM call carries the tool's answer as a tool message with the image as an image part.
    second = stack.completions.requests[recorded + 1]
    [tool_message] = [message for message in second["messages"] if message["role"] == "tool"]
    assert _image_parts(tool_message) == ["data:image/png;base64," + base64.b64encode(tiny).decode()]

    # Stored by reference; the reference serves the same bytes to the run's tenant.
    run = (await stack.acme.get(f"/api/v1/agent/runs/{result['runId']}")).json()
    [stored] = [message for message in run["messages"] if message["role"] == "tool"]
    reference = f"/api/v1/agent/images/{hashlib.sha256(tiny).hexdigest()}"
    assert _image_parts(stored) == [reference]
    served = await stack.acme.get(reference)
    assert (served.status_code, served.headers["content-type"], served.content) == (200, "image/png", tiny)


async def test_a_stored_run_keeps_a_users_image_by_reference_served_to_its_tenant_only(stack: Stack) -> None:
    recorded = len(stack.completions.requests)
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PNG_URL}}]
    body = {"model": "demo", "stream": False, "tools": [], "messages": [{"role": "user", "content": content}]}
    response = await stack.acme.post("/api/v1/agent/run", json=body)
    assert response.status_code == 200, response.text
    [call] = stack.completions.requests[recorded:]
    assert _image_parts(call["messages"][-1]) == [PNG_URL]

    run = (await stack.acme.get(f"/api/v1/agent/runs/{response.json()['runId']}")).json()
    reference = f"/api/v1/agent/images/{hashlib.sha256(PNG).hexdigest()}"
    assert run["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": reference}},
    ]
    served = await stack.acme.get(reference)
    assert (served.status_code, served.content) == (200, PNG)
    # Another tenant's key learns nothing: the same answer as for an image never stored.
    other = await stack.globex.get(reference)
    assert (other.status_code, other.json()["error"]["code"]) == (404, "image_not_found")
    for path in ("/api/v1/agent/images/" + "0" * 64, "/api/v1/agent/images/nope"):
        unknown = await stack.acme.get(path)
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "image_not_found")


async def test_images_past_the_runs_cap_are_refused_with_413_and_bad_urls_with_400(stack: Stack) -> None:
    big = "data:image/png;base64," + base64.b64encode(b"\x89PNG" + bytes(IMAGES_MAX_BYTES)).decode()
    for url, status, code in ((big, 413, "images_too_large"), ("http://example.com/a.png", 400, "invalid_request")):
        content = [{"type": "image_url", "image_url": {"url": url}}]
        body = {"model": "gpt-4o", "stream": False, "messages": [{"role": "user", "content": content}]}
        response = await stack.acme.post("/api/v1/agent/run", json=body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code)


async def test_the_openai_sdk_sends_an_image_through_the_front(stack: Stack) -> None:
    recorded = len(stack.completions.requests)
    async with openai.AsyncOpenAI(base_url=f"{stack.agent_url}/v1", api_key=ACME_KEY, max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="demo",  # with a question it finds no tool for
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}},
                    ],
                }
            ],
        )
    assert completion.choices[0].message.content
    [call] = stack.completions.requests[recorded:]
    assert call["messages"][-1]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}},
    ]


async def test_the_next_run_of_a_conversation_sends_its_earlier_image_to_the_model_again(stack: Stack) -> None:
    conversation = f"conv-{uuid.uuid4().hex}"
    content = [{"type": "text", "text": "Keep this."}, {"type": "image_url", "image_url": {"url": PNG_URL}}]
    first = {"model": "demo", "stream": False, "tools": [], "conversationId": conversation}
    response = await stack.acme.post(
        "/api/v1/agent/run", json=first | {"messages": [{"role": "user", "content": content}]}
    )
    assert response.status_code == 200, response.text
    recorded = len(stack.completions.requests)
    again = first | {"messages": [{"role": "user", "content": "And now?"}]}
    response = await stack.acme.post("/api/v1/agent/run", json=again)
    assert response.status_code == 200, response.text
    # The stored reference was made the image's data: URL again before the call.
    [call] = stack.completions.requests[recorded:]
    assert _image_parts(call["messages"][0]) == [PNG_URL]
    stored = (await stack.acme.get(f"/api/v1/agent/conversations/{conversation}")).json()
    assert _image_parts(stored["messages"][0]) == [f"/api/v1/agent/images/{hashlib.sha256(PNG).hexdigest()}"]
