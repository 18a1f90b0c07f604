"""fetch_url through an in-process MCP session, against a scripted web site on loopback.

The site is reachable only because each test's egress policy allows 127.0.0.1/32 (or loopback);
the default policy refuses it, which is tested too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketStream
from mcp import Client
from mcp.types import CallToolResult, TextContent

from mcp_web_search.server import build_server
from mcp_web_search.settings import WebSearchSettings
from suite_common.ssrf import Resolver
from support.fake_web_pages import ScriptedSite
from support.servers import serve_app

_ONLY_127_0_0_1: dict[str, Any] = {"ssrf_allowed_networks": ["127.0.0.1/32"]}


def _settings(**overrides: Any) -> WebSearchSettings:
    return WebSearchSettings(**{"backends": ["searxng"], **overrides})


@asynccontextmanager
async def _session(settings: WebSearchSettings, resolver: Resolver | None = None) -> AsyncIterator[Client]:
    async with Client(build_server(settings, resolver=resolver)) as client:
        yield client


def _text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


async def _fetch(
    site: ScriptedSite, path_or_url: str, *, max_chars: int | None = None, **settings: Any
) -> tuple[str, CallToolResult]:
    """``(site base URL, result)`` of one fetch_url call; a path is relative to the site."""
    arguments: dict[str, Any] = {} if max_chars is None else {"max_chars": max_chars}
    with anyio.fail_after(15):
        async with serve_app(site.app) as base_url, _session(_settings(**settings)) as client:
            url = path_or_url if "://" in path_or_url else base_url + path_or_url
            result = await client.call_tool("fetch_url", {"url": url, **arguments})
    return base_url, result


@pytest.mark.anyio
async def test_an_html_page_comes_back_as_markdown_with_its_title_and_url() -> None:
    site = ScriptedSite()

    base_url, result = await _fetch(site, "/article", **_ONLY_127_0_0_1)

    assert not result.is_error, _text(result)
    text = _text(result)
    assert text.startswith(f"# Pinning resolved addresses\nURL: {base_url}/article\n\n# Pinning resolved addresses\n")
    assert "**DNS rebinding**" in text
    assert "## What the guard checks" in text
    assert "- Loopback: 127.0.0.0/8 and ::1" in text
    assert "(https://owasp.org/www-community/attacks/Server_Side_Request_Forgery)" in text
    assert "All rights reserved" not in text  # boilerplate left out
    assert "Blog" not in text
    assert result.structured_content is not None
    assert result.structured_content["title"] == "Pinning resolved addresses"
    assert result.structured_content["final_url"] == f"{base_url}/article"
    assert result.structured_content["content_type"] == "text/html"
    assert result.structured_content["truncated"] is False


@pytest.mark.anyio
async def test_a_redirect_is_followed_and_the_final_url_reported() -> None:
    site = ScriptedSite()

    base_url, result = await _fetch(site, "/redirect?to=/article", **_ONLY_127_0_0_1)

    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    assert result.structured_content["url"] == f"{base_url}/redirect?to=/article"
    assert result.structured_content["final_url"] == f"{base_url}/article"
    assert f"URL: {base_url}/article\n(redirected from {base_url}/redirect?to=/article)" in _text(result)
    assert [path for path, _ in site.requests] == ["/redirect", "/article"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "content_type", "expected"),
    [
        ("/notes.md", "text/markdown", "# Release notes\n\n- fetch_url reads Markdown as is."),
        ("/plain.txt", "text/plain", "Plain text, café included."),
        ("/data.json", "application/json", '```json\n{\n  "name": "loopsuite",'),
    ],
)
async def test_markdown_text_and_json_are_read_as_served(path: str, content_type: str, expected: str) -> None:
    _, result = await _fetch(ScriptedSite(), path, **_ONLY_127_0_0_1)

    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    assert result.structured_content["content_type"] == content_type
    assert result.structured_content["content"].startswith(expected)


@pytest.mark.anyio
async def test_a_page_over_the_size_cap_is_cut_and_says_so() -> None:
    site = ScriptedSite()

    _, result = await _fetch(site, "/big.txt", max_chars=100_000, fetch_max_bytes=10_000, **_ONLY_127_0_0_1)

    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    assert len(result.structured_content["content"]) == 10_000  # of a 1,000,000-byte page
    assert result.structured_content["truncated"] is True
    assert _text(result).endswith(
        "[Truncated: the page is larger than this server reads (10000 bytes or 100000 characters).]"
    )


@pytest.mark.anyio
async def test_text_over_max_chars_is_cut_with_advice_to_ask_for_more() -> None:
    _, result = await _fetch(ScriptedSite(), "/big.txt", max_chars=500, **_ONLY_127_0_0_1)

    assert result.structured_content is not None
    assert len(result.structured_content["content"]) == 500
    assert _text(result).endswith(
        "[Truncated: call fetch_url again with a larger max_chars (up to 100000) to read more.]"
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "advice"),
    [
        ("/logo.png", "The URL serves image/png, which fetch_url cannot read: it reads HTML pages, plain text"),
        ("/paper.pdf", "The URL is a PDF document, which fetch_url cannot read; look for an HTML version"),
        ("/nowhere", "answered HTTP 404 Not Found: the page does not exist. Check the URL, or find the page"),
    ],
)
async def test_other_content_types_and_errors_are_refused_with_what_to_do(path: str, advice: str) -> None:
    _, result = await _fetch(ScriptedSite(), path, **_ONLY_127_0_0_1)

    assert result.is_error
    assert advice in _text(result)


@pytest.mark.anyio
async def test_loopback_is_refused_by_default_before_any_request() -> None:
    site = ScriptedSite()

    _, result = await _fetch(site, "/article")

    assert result.is_error
    assert _text(result).endswith(
        "Refused to connect: 127.0.0.1 is a loopback address, which this server may not reach. "
        "fetch_url only reads public web pages; do not retry this URL."
    )
    assert site.requests == []


@pytest.mark.anyio
async def test_the_loopback_setting_opens_loopback() -> None:
    _, result = await _fetch(ScriptedSite(), "/plain.txt", ssrf_allow_loopback=True)

    assert not result.is_error, _text(result)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/iam/", "169.254.169.254 is a cloud metadata endpoint"),
        ("http://10.1.2.3/admin", "10.1.2.3 is a private address (RFC 1918)"),
        ("http://[::ffff:127.0.0.3]:8080/", "::ffff:127.0.0.3 is an IPv4-mapped IPv6 form of a loopback address"),
        ("http://[fd00::1]/", "fd00::1 is a private address (unique local, fc00::/7)"),
        ("http://127.0.0.2/", "127.0.0.2 is a loopback address"),
    ],
)
async def test_blocked_addresses_are_refused(url: str, reason: str) -> None:
    _, result = await _fetch(ScriptedSite(), url, **_ONLY_127_0_0_1)

    assert result.is_error
    assert f"Refused to connect: {reason}, which this server may not reach." in _text(result)


@pytest.mark.anyio
@pytest.mark.parametrize("target", ["http://127.0.0.2:{port}/article", "http://169.254.169.254/latest/meta-data/"])
async def test_a_redirect_from_an_allowed_host_to_a_blocked_one_is_refused(target: str) -> None:
    site = ScriptedSite()
    with anyio.fail_after(15):
        async with serve_app(site.app) as base_url, _session(_settings(**_ONLY_127_0_0_1)) as client:
            to = target.replace("{port}", str(httpx.URL(base_url).port))
            result = await client.call_tool("fetch_url", {"url": f"{base_url}/redirect?to={to}"})

    assert result.is_error
    host = httpx.URL(to).host
    assert f"Refused to connect: {host} is a" in _text(result)
    assert site.requests == [("/redirect", base_url.removeprefix("http://"))]


def _resolver(answers: dict[str, Sequence[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in answers:
            raise OSError(-2, "Name or service not known")
        return answers[host]

    return resolve


@pytest.mark.anyio
async def test_a_host_name_is_resolved_checked_and_connected_to_with_its_host_header() -> None:
    site = ScriptedSite()
    resolver = _resolver({"pages.test": ["127.0.0.1"], "intranet.test": ["10.0.0.8"]})
    with anyio.fail_after(15):
        async with serve_app(site.app) as base_url, _session(_settings(**_ONLY_127_0_0_1), resolver) as client:
            port = httpx.URL(base_url).port
            fetched = await client.call_tool("fetch_url", {"url": f"http://pages.test:{port}/plain.txt"})
            refused = await client.call_tool("fetch_url", {"url": f"http://intranet.test:{port}/plain.txt"})
            unknown = await client.call_tool("fetch_url", {"url": "http://nowhere.test/"})

    assert not fetched.is_error, _text(fetched)
    assert site.requests == [("/plain.txt", f"pages.test:{port}")]
    assert refused.is_error
    assert "Refused to connect: intranet.test resolves to a private address (RFC 1918)" in _text(refused)
    assert "10.0.0.8" not in _text(refused)
    assert unknown.is_error
    assert "The host name nowhere.test could not be resolved: check the spelling of the URL." in _text(unknown)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("url", "advice"),
    [
        ("file:///etc/passwd", "is not an http:// or https:// URL; only those can be fetched."),
        ("gopher://example.com/", "is not an http:// or https:// URL"),
        ("not a url", "is not an http:// or https:// URL"),
        # URLs that urlsplit takes and httpx refuses: the model is told why, not just that the tool failed.
        ("http://0177.0.0.1/", "is not a valid URL (Invalid IPv4 address: '0177.0.0.1'"),
        ("http://\uff11\uff12\uff17.0.0.1/", "is not a valid URL (Invalid IDNA hostname"),
        ("http://exa\tmple.com/", "is not a valid URL (Invalid non-printable ASCII character in URL"),
    ],
)
async def test_urls_that_are_not_http_are_refused(url: str, advice: str) -> None:
    with anyio.fail_after(15):
        async with _session(_settings()) as client:
            result = await client.call_tool("fetch_url", {"url": url})

    assert result.is_error
    assert advice in _text(result)


@pytest.mark.anyio
async def test_max_chars_out_of_bounds_is_refused() -> None:
    with anyio.fail_after(15):
        async with _session(_settings(fetch_max_chars_cap=5000)) as client:
            result = await client.call_tool("fetch_url", {"url": "https://example.com/", "max_chars": 5001})
            (tool,) = [tool for tool in (await client.list_tools()).tools if tool.name == "fetch_url"]

    assert result.is_error
    assert "max_chars must be between 100 and 5000, got 5001." in _text(result)
    assert tool.input_schema["properties"]["max_chars"]["default"] == 5000
    assert tool.output_schema is not None
    assert set(tool.output_schema["properties"]) == {
        "url",
        "final_url",
        "title",
        "content_type",
        "content",
        "truncated",
    }


@pytest.mark.anyio
async def test_a_server_that_never_answers_is_given_up_at_the_deadline() -> None:
    connections: list[SocketStream] = []

    async def hold(stream: SocketStream) -> None:
        connections.append(stream)
        await anyio.sleep_forever()

    with anyio.fail_after(15):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener, anyio.create_task_group() as tg:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            tg.start_soon(listener.serve, hold)
            async with _session(_settings(fetch_timeout_seconds=0.3, **_ONLY_127_0_0_1)) as client:
                result = await client.call_tool("fetch_url", {"url": f"http://127.0.0.1:{port}/slow"})
            tg.cancel_scope.cancel()

    assert result.is_error
    assert f"http://127.0.0.1:{port}/slow did not answer within 0.3 s (WEB_SEARCH_FETCH_TIMEOUT_SECONDS)." in _text(
        result
    )
    assert len(connections) == 1
