"""The shared Redis client's bound, against a server that takes a connection and then never answers a command (a
hung Redis)."""

from __future__ import annotations

import asyncio

import pytest

from agent_service.infra import shared_redis
from agent_service.infra.shared_redis import REDIS_ERRORS, bounded, connect_redis

pytestmark = pytest.mark.anyio


async def test_a_call_redis_never_answers_is_cut_by_its_bound_and_its_connection_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_redis, "REDIS_TIMEOUT_SECONDS", 0.05)
    received: list[bytes] = []
    closed = asyncio.Event()

    async def hung(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            if b"HELLO" in chunk:  # the handshake answered (RESP3), and each CLIENT SETINFO
                writer.write(b"%1\r\n$5\r\nproto\r\n:3\r\n")
            writer.write(b"+OK\r\n" * chunk.count(b"CLIENT"))
            if b"GET" in chunk:  # never answered
                received.append(chunk)
        closed.set()
        writer.close()

    server = await asyncio.start_server(hung, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = connect_redis(f"redis://127.0.0.1:{port}/0")
    try:
        with pytest.raises(REDIS_ERRORS) as raised:
            await bounded(client.get("k"))
        assert isinstance(raised.value, TimeoutError)
        await asyncio.wait_for(closed.wait(), 5)  # cut mid-read: the connection is not handed out again
        assert received == [b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"]  # sent once: a slow reply is no reason to resend
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
