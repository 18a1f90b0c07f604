"""Probes: one request each, checked, so that a benchmark never times errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client

from bench.httpload import HttpConnection, encode_request
from bench.measure import Probe, WorkerFactory
from bench.processes import Service

__all__ = ["BenchError", "HttpCall", "http_call", "mcp_call_probe", "mcp_list_probe"]


class BenchError(Exception):
    """A request of a benchmark did not get the answer it must get; the figures would be wrong."""


class HttpCall:
    """One pre-encoded request to a service, with what its answer must contain."""

    def __init__(self, service: Service, request: bytes, must_contain: bytes = b"") -> None:
        self.service = service
        self.request = request
        self.must_contain = must_contain

    def probe(self, connection: HttpConnection) -> Probe:
        request, must_contain, name = self.request, self.must_contain, self.service.name

        async def probe() -> float | None:
            reply = await connection.send(request)
            if reply.status != 200 or must_contain not in reply.body:
                raise BenchError(f"{name} answered {reply.status}: {reply.body[:300]!r}")
            return reply.first_byte

        return probe

    def workers(self) -> WorkerFactory:
        """One keep-alive connection per concurrent worker."""

        @asynccontextmanager
        async def worker() -> AsyncIterator[Probe]:
            async with HttpConnection("127.0.0.1", self.service.port) as connection:
                yield self.probe(connection)

        return worker


def http_call(
    service: Service,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    must_contain: bytes = b"",
) -> HttpCall:
    encoded = json.dumps(body).encode() if body is not None else b""
    all_headers = {**({"content-type": "application/json"} if body is not None else {}), **(headers or {})}
    request = encode_request(method, path, host=f"127.0.0.1:{service.port}", body=encoded, headers=all_headers)
    return HttpCall(service, request, must_contain)


def mcp_call_probe(client: Client, tool: str, arguments: dict[str, Any]) -> Probe:
    async def probe() -> float | None:
        result = await client.call_tool(tool, arguments)
        if result.is_error:
            raise BenchError(f"tools/call {tool} failed: {result.content}")
        return None

    return probe


def mcp_list_probe(client: Client) -> Probe:
    async def probe() -> float | None:
        if not (await client.list_tools()).tools:
            raise BenchError("tools/list returned no tools")
        return None

    return probe
