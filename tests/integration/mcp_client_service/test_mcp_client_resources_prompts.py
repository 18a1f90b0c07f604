"""Resources and prompts of every server through the gateway's ``/mcp``, for the official SDK client.

Behind the gateway, in this config order: the MCP reference server
``@modelcontextprotocol/server-everything`` (npm, stdio), then two small SDK servers ``alpha``
and ``beta`` (streamable HTTP) that share a resource URI, a URI template and a prompt name, each
answering with its own name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp.client.client import ConnectMode
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ResourceLink, TextContent, TextResourceContents

from support.everything_server import everything_stdio_server
from support.library_mcp_server import SHARED_README, build_library_server
from support.mcp_gateway import Gateway, face_client, running_gateway
from support.misbehaving_mcp_server import build_misbehaving_server
from support.servers import serve_app

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def _gateway_over_libraries(**overrides: Any) -> AsyncIterator[Gateway]:
    alpha, beta = build_library_server("alpha"), build_library_server("beta")
    async with (
        serve_app(alpha.streamable_http_app()) as alpha_url,
        serve_app(beta.streamable_http_app()) as beta_url,
        running_gateway(
            {
                "everything": everything_stdio_server(),
                "alpha": {"url": alpha_url + "/mcp"},
                "beta": {"url": beta_url + "/mcp"},
            },
            **overrides,
        ) as gateway,
    ):
        await gateway.wait_until_ready("everything", "alpha", "beta")
        yield gateway


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    async with _gateway_over_libraries() as gateway:
        yield gateway


def _text(contents: list[object]) -> str:
    [content] = contents
    assert isinstance(content, TextResourceContents)
    return content.text


async def test_a_resource_link_a_tool_returned_can_be_read_through_the_gateway(gateway: Gateway) -> None:
    async with face_client(gateway) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("get-resource-links", {"count": 2})
            links = [block for block in result.content if isinstance(block, ResourceLink)]
            read = [await client.read_resource(str(link.uri)) for link in links]

    assert [str(link.uri) for link in links] == ["demo://resource/dynamic/blob/1", "demo://resource/dynamic/text/2"]
    assert [str(answer.contents[0].uri) for answer in read] == [str(link.uri) for link in links]
    assert _text(list(read[1].contents)).startswith("Resource 2: This is a plaintext resource")


async def test_the_resources_of_every_server_are_listed_once_each(gateway: Gateway) -> None:
    async with face_client(gateway) as client:
        with anyio.fail_after(20):
            listed = [str(resource.uri) for resource in (await client.list_resources()).resources]

    everything = [uri for uri in listed if uri.startswith("demo://")]
    assert len(everything) == 7  # server-everything's static documents
    assert [uri for uri in listed if not uri.startswith("demo://")] == [
        SHARED_README,
        "alpha://note",
        "beta://note",
    ]


async def test_a_uri_two_servers_list_is_read_from_the_first_of_them_in_the_config(gateway: Gateway) -> None:
    async with face_client(gateway) as client:
        with anyio.fail_after(20):
            shared = await client.read_resource(SHARED_README)
            only_beta = await client.read_resource("beta://note")

    assert _text(list(shared.contents)) == "the readme of alpha"
    assert _text(list(only_beta.contents)) == "a note only beta has"


async def test_resource_templates_of_every_server_are_listed_and_route_reads(gateway: Gateway) -> None:
    async with face_client(gateway) as client:
        with anyio.fail_after(20):
            listed = (await client.list_resource_templates()).resource_templates
            page = await client.read_resource("beta://page/7")
            chapter = await client.read_resource("shared://chapter/2")

    assert [template.uri_template for template in listed] == [
        "demo://resource/dynamic/text/{resourceId}",
        "demo://resource/dynamic/blob/{resourceId}",
        "shared://chapter/{number}",
        "alpha://page/{number}",
        "beta://page/{number}",
    ]
    assert _text(list(page.contents)) == "page 7 of beta"
    assert _text(list(chapter.contents)) == "chapter 2 of alpha"


async def test_reading_a_uri_no_server_offers_is_an_invalid_params_error(gateway: Gateway) -> None:
    async with face_client(gateway) as client:
        with anyio.fail_after(20), pytest.raises(MCPError) as raised:
            await client.read_resource("nowhere://at/all")

    assert raised.value.code == INVALID_PARAMS
    assert 'No MCP server lists the resource "nowhere://at/all"' in raised.value.message


async def test_prompts_of_every_server_are_listed_and_a_shared_name_goes_to_the_first_server(gateway: Gateway) -> None:
    async with face_client(gateway) as client:
        with anyio.fail_after(20):
            names = [prompt.name for prompt in (await client.list_prompts()).prompts]
            greeting = await client.get_prompt("greet", {"who": "Ada"})
            simple = await client.get_prompt("simple-prompt")

    assert names == ["simple-prompt", "args-prompt", "completable-prompt", "resource-prompt", "greet"]
    message = greeting.messages[0].content
    assert isinstance(message, TextContent)
    assert message.text == "alpha greets Ada"
    simple_message = simple.messages[0].content
    assert isinstance(simple_message, TextContent)
    assert simple_message.text == "This is a simple prompt without arguments."


async def test_an_upstream_servers_prompt_error_reaches_the_client(gateway: Gateway) -> None:
    async with face_client(gateway) as client:
        with anyio.fail_after(20), pytest.raises(MCPError) as raised:
            await client.get_prompt("args-prompt", {})  # its "city" argument is required

    assert raised.value.code == INVALID_PARAMS


async def test_getting_a_prompt_no_server_offers_is_an_invalid_params_error(gateway: Gateway) -> None:
    async with face_client(gateway) as client:
        with anyio.fail_after(20), pytest.raises(MCPError) as raised:
            await client.get_prompt("no-such-prompt")

    assert raised.value.code == INVALID_PARAMS
    assert 'No MCP server offers a prompt named "no-such-prompt"' in raised.value.message


async def test_under_the_prefix_policy_a_later_servers_prompt_is_listed_under_its_server_name() -> None:
    async with _gateway_over_libraries(tool_name_collision="prefix") as gateway, face_client(gateway) as client:
        with anyio.fail_after(20):
            names = [prompt.name for prompt in (await client.list_prompts()).prompts]
            first = await client.get_prompt("greet", {"who": "Ada"})
            later = await client.get_prompt("beta__greet", {"who": "Ada"})
            shared = await client.read_resource(SHARED_README)

    assert names[-2:] == ["greet", "beta__greet"]
    assert [message.content.text for message in (*first.messages, *later.messages)] == [  # type: ignore[union-attr]
        "alpha greets Ada",
        "beta greets Ada",
    ]
    # A URI is never renamed: what a resource_link carries must stay readable.
    assert _text(list(shared.contents)) == "the readme of alpha"


@pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["protocol 2026", "protocol 2025 (initialize)"])
async def test_initialize_declares_resources_and_prompts_when_a_server_has_them(
    gateway: Gateway, mode: ConnectMode
) -> None:
    async with face_client(gateway, mode=mode) as client:
        capabilities = client.server_capabilities

    assert capabilities.tools is not None
    assert capabilities.resources is not None
    assert capabilities.resources.subscribe is False
    assert capabilities.prompts is not None


async def test_initialize_declares_neither_when_no_server_has_them() -> None:
    tools_only = build_misbehaving_server(["strict-schemas"]).streamable_http_app()  # the SDK's lowlevel Server
    async with serve_app(tools_only) as url, running_gateway({"strict": {"url": url + "/mcp"}}) as gateway:
        await gateway.wait_until_ready("strict")
        async with face_client(gateway) as client:
            capabilities = client.server_capabilities

    assert capabilities.tools is not None
    assert capabilities.resources is None
    assert capabilities.prompts is None


async def test_with_one_resource_server_a_read_goes_straight_to_it_and_its_error_reaches_the_client() -> None:
    async with running_gateway({"everything": everything_stdio_server()}) as gateway:
        await gateway.wait_until_ready("everything")
        async with face_client(gateway) as client:
            with anyio.fail_after(20):
                text = await client.read_resource("demo://resource/dynamic/text/5")
                with pytest.raises(MCPError) as raised:
                    await client.read_resource("demo://resource/nowhere")

    assert _text(list(text.contents)).startswith("Resource 5: This is a plaintext resource")
    # server-everything's own answer (the gateway found no listing to route by, so it asked the server).
    assert "demo://resource/nowhere" in raised.value.message
    assert "No MCP server lists" not in raised.value.message
