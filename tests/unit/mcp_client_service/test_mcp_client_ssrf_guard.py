"""The SSRF guard on the gateway's httpx2 client: names resolved and checked per connection, redirects too;
and the bound on how much of a response the client holds.

The servers are real, on loopback; names resolve through a scripted resolver, so that a name can
point anywhere without DNS. A refused address is refused before any connection is attempted.
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator, Sequence

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from mcp_client_service.transport.response_limits import ResponseTooLarge, is_oversized_answer
from mcp_client_service.transport.ssrf_guard import EgressPolicy, check_endpoint, guarded_http_client
from suite_common.ssrf import EgressBlocked, Resolver
from support.servers import serve_app

pytestmark = pytest.mark.anyio

TIMEOUT = httpx2.Timeout(5.0)


def _resolver(table: dict[str, list[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> Sequence[str]:
        return table[host]

    return resolve


def _app(seen: list[str]) -> Starlette:
    async def hello(request: Request) -> Response:
        seen.append(request.headers["host"])
        return JSONResponse({"host": request.headers["host"]})

    async def bounce(request: Request) -> Response:
        seen.append(request.headers["host"])
        return RedirectResponse(request.query_params["to"], status_code=307)

    return Starlette(routes=[Route("/hello", hello), Route("/bounce", bounce)])


async def test_a_name_is_connected_at_its_checked_address_and_keeps_its_host_header() -> None:
    seen: list[str] = []
    async with serve_app(_app(seen)) as url:
        port = url.rsplit(":", 1)[1]
        resolver = _resolver({"mcp.example": ["127.0.0.1"]})
        async with guarded_http_client(EgressPolicy(allow_loopback=True), timeout=TIMEOUT, resolver=resolver) as http:
            response = await http.get(f"http://mcp.example:{port}/hello")

    assert response.json() == {"host": f"mcp.example:{port}"}
    assert seen == [f"mcp.example:{port}"]


@pytest.mark.parametrize(
    ("host", "addresses", "reason"),
    [
        ("metadata.example", ["169.254.169.254"], "a cloud metadata endpoint"),
        ("intranet.example", ["10.1.2.3"], "a private address (RFC 1918)"),
        ("cgnat.example", ["100.64.0.9"], "a shared carrier-grade NAT address"),
        ("ula.example", ["fd12::1"], "a private address (unique local, fc00::/7)"),
        ("mapped.example", ["::ffff:127.0.0.1"], "an IPv4-mapped IPv6 form of a loopback address"),
        ("localhost", ["127.0.0.1"], "a loopback address"),
        ("mixed.example", ["93.184.216.34", "192.168.1.1"], "a private address (RFC 1918)"),
    ],
)
async def test_a_name_that_resolves_to_a_blocked_address_is_refused_before_connecting(
    host: str, addresses: list[str], reason: str
) -> None:
    resolver = _resolver({host: addresses})
    async with guarded_http_client(EgressPolicy(), timeout=TIMEOUT, resolver=resolver) as http:
        with pytest.raises(EgressBlocked) as refused:
            await http.get(f"http://{host}:8102/mcp")

    assert reason in refused.value.message


async def test_each_redirect_is_checked_again() -> None:
    seen: list[str] = []
    async with serve_app(_app(seen)) as url:
        resolver = _resolver({"internal.example": ["10.0.0.7"]})
        policy = EgressPolicy(allow_loopback=True)
        async with guarded_http_client(policy, timeout=TIMEOUT, resolver=resolver) as http:
            with pytest.raises(EgressBlocked, match="a private address"):
                await http.get(f"{url}/bounce", params={"to": "http://internal.example/mcp"}, follow_redirects=True)

    assert len(seen) == 1  # the first hop was served; the second was refused before connecting


async def test_the_endpoint_check_says_which_setting_allows_an_address() -> None:
    with pytest.raises(EgressBlocked) as refused:
        await check_endpoint("http://127.0.0.1:8102/mcp", EgressPolicy())

    assert refused.value.message.startswith("Refused to connect: 127.0.0.1 is a loopback address")
    assert "MCP_CLIENT_SSRF_ALLOW_LOOPBACK" in refused.value.message

    await check_endpoint("http://127.0.0.1:8102/mcp", EgressPolicy(allow_loopback=True))  # allowed: no error
    allowed_network = EgressPolicy.create(allowed_cidrs=["10.20.0.0/16"])
    await check_endpoint("http://10.20.3.4:8102/mcp", allowed_network)


def _sized_app() -> Starlette:
    """``/json?bytes=N`` answers N bytes of JSON (streamed, without a length), ``/events?bytes=N`` one event of N."""

    async def json_body(request: Request) -> Response:
        size = int(request.query_params["bytes"])

        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"text": "'
            for _ in range(size // 65536):
                yield b"x" * 65536
            yield b'"}'

        return StreamingResponse(chunks(), media_type="application/json")

    async def events(request: Request) -> Response:
        data = "y" * int(request.query_params["bytes"])
        return Response(f"event: message\ndata: {data}\n\n", media_type="text/event-stream")

    async def gzipped(_: Request) -> Response:
        bomb = gzip.compress(b"0" * 10_000_000)  # 10 MB of zeros in about 10 KB
        return Response(bomb, media_type="application/json", headers={"content-encoding": "gzip"})

    return Starlette(routes=[Route("/json", json_body), Route("/events", events), Route("/gzipped", gzipped)])


async def test_a_json_answer_beyond_the_limit_fails_to_read_with_an_error_saying_so() -> None:
    policy = EgressPolicy(allow_loopback=True)
    async with (
        serve_app(_sized_app()) as url,
        guarded_http_client(policy, timeout=TIMEOUT, max_response_bytes=256 * 1024) as http,
    ):
        small = await http.get(f"{url}/json", params={"bytes": 65536})
        with pytest.raises(ResponseTooLarge) as refused:
            await http.get(f"{url}/json", params={"bytes": 64 * 1024 * 1024})

    assert len(small.json()["text"]) == 65536
    assert str(refused.value) == (
        "the server's answer is larger than the gateway accepts: more than 262144 bytes "
        "(MCP_CLIENT_HTTP_MAX_RESPONSE_BYTES)"
    )
    assert is_oversized_answer(f"Failed to parse JSON response: {refused.value}")


async def test_an_event_stream_is_not_cut_as_a_whole_and_a_compressed_body_is_not_inflated() -> None:
    policy = EgressPolicy(allow_loopback=True)
    async with (
        serve_app(_sized_app()) as url,
        guarded_http_client(policy, timeout=TIMEOUT, max_response_bytes=64 * 1024) as http,
    ):
        # Events are bounded one by one (the SDK's max_sse_event_size), not by the body's total.
        stream = await http.get(f"{url}/events", params={"bytes": 100_000})
        bomb = await http.get(f"{url}/gzipped")

    assert len(stream.text) > 100_000
    assert stream.request.headers["accept-encoding"] == "identity"
    assert len(bomb.content) < 64 * 1024  # left compressed: it fails to parse instead of filling memory
