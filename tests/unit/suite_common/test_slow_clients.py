"""Slow clients against a real served app over real sockets: the head and body timeouts, the connection cap."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketStream
from pydantic_settings import SettingsConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from structlog.testing import capture_logs
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from suite_common.errors import install_error_handlers
from suite_common.http import read_model
from suite_common.serve import uvicorn_config
from suite_common.settings import ServiceSettings
from suite_common.slow_clients import ReceiveLimits, receive_limited_protocol
from suite_common.wire import CallToolRequest
from support.servers import serve_app

HEAD_SECONDS = 0.4
BODY_SECONDS = 0.6


class _Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="EDGE_")


async def _echo(request: Request) -> JSONResponse:
    body = await read_model(request, CallToolRequest)
    return JSONResponse({"name": body.name})


async def _stream(_: Request) -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"tick\n"
            await anyio.sleep(HEAD_SECONDS + BODY_SECONDS)  # a slow answer, longer than both receive bounds

    return StreamingResponse(chunks(), media_type="text/plain")


async def _early(_: Request) -> JSONResponse:
    return JSONResponse({"early": True})  # without reading the body, as a 401 of the secret's middleware


def _app() -> Starlette:
    routes = [
        Route("/echo", _echo, methods=["POST"]),
        Route("/stream", _stream),
        Route("/early", _early, methods=["GET", "POST"]),
    ]
    app = Starlette(routes=routes)
    install_error_handlers(app)
    return app


@asynccontextmanager
async def _served(base: type[Any] | None = None, **settings: Any) -> AsyncIterator[tuple[str, int]]:
    app = _app()
    bounds = {"request_head_timeout_seconds": HEAD_SECONDS, "request_body_timeout_seconds": BODY_SECONDS}
    config = uvicorn_config(app, _Settings(**{**bounds, **settings}))
    if base is not None:  # the same limits on another of uvicorn's HTTP implementations
        config.http = receive_limited_protocol(
            ReceiveLimits(HEAD_SECONDS, BODY_SECONDS, config.limit_concurrency or 1024, "EDGE_"), base
        )
    async with serve_app(app, config=config) as base_url:
        yield base_url, httpx.URL(base_url).port or 0


async def _read_until_closed(stream: SocketStream) -> bytes:
    received = b""
    while True:
        try:
            received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return received


def _status_and_body(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


BASES = pytest.mark.parametrize("base", [HttpToolsProtocol, H11Protocol], ids=["httptools", "h11"])


@pytest.mark.anyio
@BASES
@pytest.mark.parametrize("sent", [b"", b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Le"], ids=["nothing", "half_head"])
async def test_a_client_sending_half_a_head_gets_408_and_is_disconnected_within_the_bound(
    base: type[Any], sent: bytes
) -> None:
    async with _served(base) as (_, port), await anyio.connect_tcp("127.0.0.1", port) as stream:
        started = time.monotonic()
        if sent:
            await stream.send(sent)
        with anyio.fail_after(HEAD_SECONDS + 3):
            raw = await _read_until_closed(stream)
        elapsed = time.monotonic() - started

    status, body = _status_and_body(raw)
    assert status == 408
    assert body["error"]["code"] == "request_timeout"
    assert "EDGE_REQUEST_HEAD_TIMEOUT_SECONDS" in body["error"]["message"]
    assert b"connection: close" in raw.lower()
    assert elapsed >= HEAD_SECONDS * 0.9


@pytest.mark.anyio
@BASES
async def test_a_client_sending_half_a_body_gets_408_and_the_app_sees_it_gone(base: type[Any]) -> None:
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n"
    with capture_logs() as logs:
        async with _served(base) as (_, port), await anyio.connect_tcp("127.0.0.1", port) as stream:
            started = time.monotonic()
            await stream.send(head + b'{"name": "sl')
            with anyio.fail_after(BODY_SECONDS + 3):
                raw = await _read_until_closed(stream)
            elapsed = time.monotonic() - started

    status, body = _status_and_body(raw)
    assert status == 408
    assert "EDGE_REQUEST_BODY_TIMEOUT_SECONDS" in body["error"]["message"]
    assert elapsed >= BODY_SECONDS * 0.9
    assert not [entry for entry in logs if entry["event"] == "unhandled_error"]  # not a 500 in the log


@pytest.mark.anyio
async def test_the_next_request_on_a_kept_alive_connection_has_the_same_head_bound() -> None:
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n"
    request = head + b'{"name": "a"}'
    async with _served() as (_, port), await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        with anyio.fail_after(5):
            first = b""
            while not first.endswith(b'{"name":"a"}'):
                first += await stream.receive()
            await stream.send(b"GET /stream HTTP/1.1\r\n")
            raw = await _read_until_closed(stream)

    assert first.startswith(b"HTTP/1.1 200")
    assert _status_and_body(raw)[0] == 408


@pytest.mark.anyio
async def test_a_slow_answer_is_not_cut_by_the_receive_bounds() -> None:
    async with _served() as (base_url, _), httpx.AsyncClient() as client:
        with anyio.fail_after(10):
            response = await client.get(base_url + "/stream")

    assert response.status_code == 200
    assert response.text == "tick\n" * 3


@pytest.mark.anyio
async def test_connections_past_the_cap_are_refused_with_503_until_one_closes() -> None:
    served = _served(max_connections=2, request_head_timeout_seconds=30)
    async with served as (base_url, port), httpx.AsyncClient() as client:
        idle = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(2)]
        with anyio.fail_after(5):
            refused = await client.post(base_url + "/echo", json={"name": "x"})
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "too_many_connections"
        assert "EDGE_MAX_CONNECTIONS" in refused.json()["error"]["message"]
        assert refused.headers["retry-after"] == "1"

        await idle[0].aclose()
        with anyio.fail_after(5):  # the server notices the close on its next loop turn
            while (await client.post(base_url + "/echo", json={"name": "x"})).status_code == 503:
                pass
        await idle[1].aclose()


@pytest.mark.anyio
@BASES
async def test_a_request_that_is_not_http_gets_the_json_error_body(base: type[Any]) -> None:
    async with _served(base) as (_, port), await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"GET /echo HTTP/1.1\r\nHost: x\r\nBad Header\x01: y\r\n\r\n")
        with anyio.fail_after(5):
            raw = await _read_until_closed(stream)

    status, body = _status_and_body(raw)
    assert status == 400
    assert body["error"]["code"] == "invalid_http_request"
    assert body["error"]["message"].startswith("The request is not valid HTTP/1.1: Invalid HTTP request received")


async def _read_response(stream: SocketStream, ends_with: bytes) -> bytes:
    received = b""
    while not received.endswith(ends_with):
        received += await stream.receive()
    return received


@pytest.mark.anyio
async def test_a_request_answered_before_its_body_arrived_leaves_the_connection_to_the_next_ones() -> None:
    # /early answers without reading the body; the rest of it comes after the answer, with the next
    # request (a slow answer, outlasting the body bound), then a third.
    async with _served() as (_, port), await anyio.connect_tcp("127.0.0.1", port) as stream:
        with anyio.fail_after(10):
            await stream.send(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
            first = await _read_response(stream, b"}")
            await stream.send(b"cd" + b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            second = await _read_response(stream, b"0\r\n\r\n")  # the end of the chunked answer
            await stream.send(b"GET /early HTTP/1.1\r\nHost: x\r\n\r\n")
            third = await _read_response(stream, b"}")

    assert [answer.split(b"\r\n", 1)[0] for answer in (first, second, third)] == [b"HTTP/1.1 200 OK"] * 3
    assert b"connection: close" not in second.lower()
