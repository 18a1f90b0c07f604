"""The load client: raw HTTP/1.1 with keep-alive on asyncio streams (under uvloop), one connection per worker.

Why not httpx: its ``AsyncClient`` spends more CPU per request than a lean server does (pool
bookkeeping, h11, per-request model objects), and under concurrency it collapses; a load client
that is slower than the system under test measures itself. This client sends pre-encoded
request bytes and parses only what it must (status, Content-Length or chunked framing), so one
core drives far more requests than any service here can answer. ``python -m bench --only client``
compares it with httpx (and aiohttp when installed) on the same hello endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

__all__ = ["HttpConnection", "Reply", "encode_request"]


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    first_byte: float
    """Seconds from sending the request to the first body byte (for a chunked body: its first
    non-empty chunk, i.e. the first SSE event of a stream)."""


def encode_request(
    method: str, path: str, *, host: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> bytes:
    """A complete HTTP/1.1 request, encoded once and sent as many times as needed."""
    lines = [f"{method} {path} HTTP/1.1", f"host: {host}", "user-agent: loopsuite-bench"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class HttpConnection:
    """One keep-alive connection; requests on it are sequential (one worker, one connection)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> HttpConnection:
        await self._connect()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._reader = self._writer = None

    async def send(self, request: bytes, *, _retried: bool = False) -> Reply:
        """Send ``request`` (from ``encode_request``) and read the whole response."""
        if self._reader is None or self._reader.at_eof():
            # Never used, or the server closed it while it was idle (uvicorn does after 5 s).
            await self.close()
            await self._connect()
        reader, writer = self._reader, self._writer
        if reader is None or writer is None:
            raise ConnectionError(f"no connection to {self.host}:{self.port}")
        started = time.perf_counter()
        writer.write(request)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionResetError) as error:
            if _retried or (isinstance(error, asyncio.IncompleteReadError) and error.partial):
                raise
            # The server closed the idle connection just as the request went out: once more, on a new one.
            await self.close()
            return await self.send(request, _retried=True)
        status = int(head[9:12])
        length: int | None = None
        chunked, keep_alive = False, True
        for line in head[:-4].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                keep_alive = b"close" not in value.lower()
        if chunked:
            body, first_byte = await self._read_chunked(reader, started)
        elif length is not None:
            first_byte = time.perf_counter() - started
            body = await reader.readexactly(length)
        else:
            first_byte = time.perf_counter() - started
            body = await reader.read()
            keep_alive = False
        if not keep_alive:
            await self.close()
        return Reply(status, body, first_byte)

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader, started: float) -> tuple[bytes, float]:
        parts: list[bytes] = []
        first_byte: float | None = None
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                    pass
                break
            chunk = await reader.readexactly(size + 2)
            if first_byte is None:
                first_byte = time.perf_counter() - started
            parts.append(chunk[:-2])
        return b"".join(parts), first_byte if first_byte is not None else time.perf_counter() - started
