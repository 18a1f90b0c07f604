"""0. The load client itself: is it fast enough not to be what a benchmark measures?

The same hello endpoint, driven by the raw keep-alive client this harness uses, by httpx's
``AsyncClient`` and, when it is installed, by aiohttp: sequential latency, then closed-loop
throughput at 64 concurrent requests and the client's own CPU time per request (this process's
CPU time over the requests it sent). The client with the least CPU per request leaves the most
headroom on its core; the harness uses the raw client.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx

from bench.measure import LoadFigures, Rounds, WorkerFactory, closed_loop, interleave, shared_probe
from bench.probes import BenchError, http_call
from bench.report import Section, Table, ms
from bench.suite import Suite

__all__ = ["CONCURRENCY", "run_clients"]

CONCURRENCY = 64

ClientSetup = Callable[[str], AbstractAsyncContextManager[WorkerFactory]]
"""Given the URL, opens a client and yields its worker factory."""


@asynccontextmanager
async def _httpx(url: str) -> AsyncIterator[WorkerFactory]:
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def probe() -> float | None:
            response = await client.get(url)
            if response.status_code != 200:
                raise BenchError(f"httpx: HTTP {response.status_code}")
            return None

        yield shared_probe(probe)


@asynccontextmanager
async def _aiohttp(url: str) -> AsyncIterator[WorkerFactory]:
    aiohttp: Any = importlib.import_module("aiohttp")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:

        async def probe() -> float | None:
            async with session.get(url) as response:
                await response.read()
                if response.status != 200:
                    raise BenchError(f"aiohttp: HTTP {response.status}")
            return None

        yield shared_probe(probe)


def _setups(suite: Suite) -> dict[str, ClientSetup]:
    hello = http_call(suite.hello, "GET", "/hello", must_contain=b"hello")

    @asynccontextmanager
    async def raw(_: str) -> AsyncIterator[WorkerFactory]:
        yield hello.workers()

    setups: dict[str, ClientSetup] = {"raw keep-alive (asyncio streams, uvloop)": raw, "httpx.AsyncClient": _httpx}
    if importlib.util.find_spec("aiohttp") is not None:
        setups["aiohttp.ClientSession"] = _aiohttp
    return setups


async def _cpu_per_request(workers: WorkerFactory, requests: int, seconds: float) -> tuple[LoadFigures, float]:
    cpu_started = 0.0

    def mark() -> None:
        nonlocal cpu_started
        cpu_started = time.process_time()

    load = await closed_loop(workers, concurrency=CONCURRENCY, requests=requests, max_seconds=seconds, on_start=mark)
    return load, (time.process_time() - cpu_started) / load.requests


async def run_clients(suite: Suite, *, sequential: int, requests: int, seconds: float) -> Section:
    url = f"{suite.hello.url}/hello"
    table = Table(
        "0. Load client check: GET /hello (Starlette on uvicorn, SUT core), client on the load core",
        [
            "client",
            "seq p50 ms",
            "seq client CPU us/req",
            f"req/s at {CONCURRENCY}",
            f"p99 ms at {CONCURRENCY}",
            f"client CPU us/req at {CONCURRENCY}",
        ],
    )
    figures: dict[str, Any] = {}
    for name, setup in _setups(suite).items():
        async with setup(url) as workers, workers() as probe:
            await interleave({name: probe}, Rounds(rounds=0, per_round=0, warmup=50))
            cpu_started = time.process_time()
            seq = await interleave({name: probe}, Rounds(rounds=1, per_round=sequential, warmup=0))
            seq_cpu = (time.process_time() - cpu_started) / sequential
        async with setup(url) as workers:
            await closed_loop(workers, concurrency=CONCURRENCY, requests=CONCURRENCY * 4)  # warm the pool
            load, cpu = await _cpu_per_request(workers, requests, seconds)
        table.add(name, ms(seq[name].p50), f"{seq_cpu * 1e6:.0f}", f"{load.rate:.0f}", ms(load.p99), f"{cpu * 1e6:.0f}")
        figures[name] = {
            "seq_p50_ms": seq[name].p50 * 1000,
            "seq_cpu_us_per_request": seq_cpu * 1e6,
            "rps": load.rate,
            "cpu_us_per_request": cpu * 1e6,
        }
    table.notes.append(
        "req/s is bounded by the server on the other core; client CPU per request is the client's own cost"
    )
    return Section("clients", tables=[table], figures=figures)
