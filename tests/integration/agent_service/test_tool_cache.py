"""The tool-result cache through the real services and the real Redis at 127.0.0.1:6379 (``redis_prefix``: keys of
the test's own), only the LLM scripted.

The tools are the ledger MCP server's (``get_status``: ``readOnlyHint: true``; ``set_status``: idempotent, not
read-only) behind a real mcp-client-service; the ledger counts every call that reaches it, so "dispatched once" is
what the tool saw. Each test asks about keys of its own (``order-<uuid>``), and opens the gates of the calls it may
make before making them: a call the cache should have answered completes too, and the count says it was made.
Two tenants, ``acme`` and ``globex``, call with their own keys. agent-service runs in the test's process, and, to
show what replicas share, as processes of its own (``python -m agent_service``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis.asyncio as aioredis
from opentelemetry import trace
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from agent_service.admission.pending import PendingWrites
from agent_service.engine import tool_cache
from agent_service.engine.tool_cache import RedisStore, ToolCache, ToolCachePolicy, cache_key
from agent_service.infra.shared_redis import connect_redis
from agent_service.infra.telemetry import RunTelemetry
from suite_common.wire import CallerContext, ToolInfo
from support import fake_openai, stacks
from support.caller_keys import key_entry
from support.databases import REDIS_URL
from support.ledger_mcp_server import Ledger
from support.processes import agent_env, spawned
from support.servers import free_port
from support.stacks import running_agent, running_upstreams

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex


CALLERS_FILE = f"""
[tenants.acme]
[tenants.globex]

{key_entry("acme-app", "acme", ACME_KEY)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}
"""

PEPPER = "pepper-" + uuid.uuid4().hex


@dataclass
class Upstreams(stacks.Upstreams):
    ledger: Ledger
    callers_file: Path


@pytest.fixture(scope="module")
async def upstreams(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Upstreams]:
    callers = tmp_path_factory.mktemp("tool-cache") / "callers.toml"
    callers.write_text(CALLERS_FILE)
    ledger = Ledger()
    async with (
        ledger.serving() as ledger_url,
        running_upstreams(echo={}, servers={"ledger": {"url": ledger_url}}) as running,
    ):
        yield Upstreams(**vars(running), ledger=ledger, callers_file=callers)


@asynccontextmanager
async def agent(upstreams: Upstreams, prefix: str, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """agent-service with the cache in the test's Redis (read-only tools for 60 s, unless ``settings`` say
    otherwise); yields a client of it."""
    defaults: dict[str, Any] = {
        "database_url": "",
        "redis_url": REDIS_URL,
        "redis_key_prefix": prefix,
        "callers_file": upstreams.callers_file,
        "tool_cache_seconds": 60,
        "tool_cache_pepper": SecretStr(PEPPER),
    }
    async with (
        running_agent(upstreams.completion_url, upstreams.gateway, **{**defaults, **settings}) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        yield http


def order() -> str:
    return f"order-{uuid.uuid4().hex[:8]}"


async def call_once(
    upstreams: Upstreams, http: httpx.AsyncClient, tool: str, arguments: dict[str, Any], *, key: str = ACME_KEY
) -> dict[str, Any]:
    """A streamed run that makes one tool call and then answers; returns that call's ``tool_result`` event."""
    upstreams.llm.push(fake_openai.tool_calls(("call_1", tool, arguments)), fake_openai.text("done"))
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "status?"}], "tools": [tool], "stream": True}
    events: list[tuple[str, dict[str, Any]]] = []
    name = ""
    with anyio.fail_after(20):
        async with http.stream(
            "POST", "/api/v1/agent/run", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((name, json.loads(line.removeprefix("data: "))))
    assert events[-1][0] == "done", events[-1]
    [result] = [data for kind, data in events if kind == "tool_result"]
    return result


def open_gates(ledger: Ledger, tool: Any, arguments: dict[str, Any], attempts: int = 3) -> None:
    for attempt in range(1, attempts + 1):
        ledger.open(tool, arguments, attempt)


def dispatched(ledger: Ledger, tool: Any, arguments: dict[str, Any]) -> int:
    return sum(1 for call in ledger.of(tool) if call.arguments == arguments)


async def cache_metrics(http: httpx.AsyncClient) -> dict[str, float]:
    text = (await http.get("/metrics")).text
    counted = {"hit": 0.0, "miss": 0.0, "store": 0.0, "rejected": 0.0, "error": 0.0}
    for line in text.splitlines():
        if line.startswith('agent_tool_cache_total{outcome="'):
            labels, value = line.rsplit(" ", 1)
            counted[labels.split('"')[1]] = float(value)
    return counted


@asynccontextmanager
async def redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_read_only_tool_called_by_two_runs_of_one_tenant_is_dispatched_once_and_the_second_is_cached(
    upstreams: Upstreams, redis_prefix: str
) -> None:
    arguments = {"key": order()}
    open_gates(upstreams.ledger, "get_status", arguments)
    async with agent(upstreams, redis_prefix) as http:
        first = await call_once(upstreams, http, "get_status", arguments)
        second = await call_once(upstreams, http, "get_status", arguments)
        metrics = await cache_metrics(http)
    assert dispatched(upstreams.ledger, "get_status", arguments) == 1
    assert "cached" not in first
    assert second["cached"] is True
    assert second["content"] == first["content"] == f"{arguments['key']} is unknown"
    assert second["isError"] is False
    assert second["durationMs"] < first["durationMs"]
    assert (metrics["miss"], metrics["store"], metrics["hit"]) == (1, 1, 1)
    async with redis() as client:
        [key] = [key async for key in client.scan_iter(match=f"{redis_prefix}tool-cache:*")]
        assert key.decode() == cache_key(redis_prefix, "acme", "ledger", "get_status", arguments)
        assert 55_000 < await client.pttl(key) <= 60_000  # Redis's own expiry, the TTL of the setting


async def test_another_tenants_identical_call_is_not_served_from_the_cache(
    upstreams: Upstreams, redis_prefix: str
) -> None:
    arguments = {"key": order()}
    open_gates(upstreams.ledger, "get_status", arguments)
    async with agent(upstreams, redis_prefix) as http:
        await call_once(upstreams, http, "get_status", arguments, key=ACME_KEY)
        globex = await call_once(upstreams, http, "get_status", arguments, key=GLOBEX_KEY)
        globex_again = await call_once(upstreams, http, "get_status", arguments, key=GLOBEX_KEY)
    assert "cached" not in globex
    assert globex_again["cached"] is True  # its own entry, from its own call
    assert dispatched(upstreams.ledger, "get_status", arguments) == 2


async def test_a_tool_without_read_only_hint_is_cached_only_when_the_settings_name_it(
    upstreams: Upstreams, redis_prefix: str
) -> None:
    arguments = {"key": order(), "value": "packed"}
    open_gates(upstreams.ledger, "set_status", arguments, attempts=4)
    async with agent(upstreams, redis_prefix) as http:
        results = [await call_once(upstreams, http, "set_status", arguments) for _ in range(2)]
    assert [result.get("cached") for result in results] == [None, None]
    assert dispatched(upstreams.ledger, "set_status", arguments) == 2
    async with agent(upstreams, redis_prefix, tool_cache_ttls={"ledger:set_status": 60}) as http:
        results = [await call_once(upstreams, http, "set_status", arguments) for _ in range(2)]
    assert [result.get("cached") for result in results] == [None, True]
    assert dispatched(upstreams.ledger, "set_status", arguments) == 3


@pytest.mark.parametrize(
    "settings",
    [{"tool_cache_seconds": 0}, {"tool_cache_ttls": {"ledger:get_status": 0}}, {"tool_cache_ttls": {"ledger:*": 0}}],
    ids=["default-0", "tool-0", "server-0"],
)
async def test_a_ttl_of_zero_caches_nothing(upstreams: Upstreams, redis_prefix: str, settings: dict[str, Any]) -> None:
    arguments = {"key": order()}
    open_gates(upstreams.ledger, "get_status", arguments)
    async with agent(upstreams, redis_prefix, **settings) as http:
        results = [await call_once(upstreams, http, "get_status", arguments) for _ in range(2)]
    assert [result.get("cached") for result in results] == [None, None]
    assert dispatched(upstreams.ledger, "get_status", arguments) == 2
    async with redis() as client:
        assert [key async for key in client.scan_iter(match=f"{redis_prefix}tool-cache:*")] == []


async def test_a_value_forged_in_redis_or_moved_from_another_key_is_rejected_and_the_tool_is_called(
    upstreams: Upstreams, redis_prefix: str
) -> None:
    mine, other = {"key": order()}, {"key": order()}
    open_gates(upstreams.ledger, "get_status", mine, attempts=4)
    open_gates(upstreams.ledger, "get_status", other)
    my_key = cache_key(redis_prefix, "acme", "ledger", "get_status", mine)
    async with agent(upstreams, redis_prefix) as http, redis() as client:
        await call_once(upstreams, http, "get_status", mine)
        await call_once(upstreams, http, "get_status", other, key=GLOBEX_KEY)  # globex's, under another key

        # Moved: globex's value, validly signed for its own key, copied over acme's.
        globex_value = await client.get(cache_key(redis_prefix, "globex", "ledger", "get_status", other))
        assert globex_value is not None
        await client.set(my_key, globex_value, px=60_000)
        moved = await call_once(upstreams, http, "get_status", mine)
        assert "cached" not in moved
        assert moved["content"] == f"{mine['key']} is unknown"
        assert dispatched(upstreams.ledger, "get_status", mine) == 2

        # Forged: a value written by hand, without the pepper (its own MAC made up, or one of another value).
        stored = await client.get(my_key)  # the real result, stored again by the call just made
        assert isinstance(stored, bytes)
        assert stored.startswith(b"v1.")
        for forged in (stored.replace(b"unknown", b"shipped"), b"v1." + b"0" * 64 + b"." + mine["key"].encode()):
            await client.set(my_key, forged, px=60_000)
            result = await call_once(upstreams, http, "get_status", mine)
            assert "cached" not in result
            assert result["content"] == f"{mine['key']} is unknown"
        assert dispatched(upstreams.ledger, "get_status", mine) == 4
        metrics = await cache_metrics(http)
    assert metrics["rejected"] == 3
    assert metrics["hit"] == 0


@asynccontextmanager
async def replica(upstreams: Upstreams, prefix: str, pepper: str, log: Path) -> AsyncIterator[httpx.AsyncClient]:
    """Another agent-service, a process of its own, on the same Redis with ``pepper``; yields a client of it."""
    port = free_port()
    env = agent_env(
        port,
        upstreams.completion_url,
        upstreams.gateway,
        database_url="",
        redis_url=REDIS_URL,
        redis_key_prefix=prefix,
        callers_file=upstreams.callers_file,
        tool_cache_seconds=60,
        tool_cache_pepper=pepper,
    )
    async with (
        spawned("agent_service", env, port, log),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
    ):
        yield http


async def test_another_process_with_the_same_pepper_is_served_and_one_with_another_pepper_misses(
    upstreams: Upstreams, redis_prefix: str, tmp_path: Path
) -> None:
    arguments = {"key": order()}
    open_gates(upstreams.ledger, "get_status", arguments)
    async with agent(upstreams, redis_prefix) as http:
        first = await call_once(upstreams, http, "get_status", arguments)
    async with replica(upstreams, redis_prefix, PEPPER, tmp_path / "same-pepper.log") as http:
        shared = await call_once(upstreams, http, "get_status", arguments)
    rotated_pepper = "the-rotated-pepper-" + uuid.uuid4().hex
    async with replica(upstreams, redis_prefix, rotated_pepper, tmp_path / "rotated.log") as http:
        rotated = await call_once(upstreams, http, "get_status", arguments)
        metrics = await cache_metrics(http)
    assert "cached" not in first
    assert shared["cached"] is True  # the replicas share the cache
    assert shared["content"] == first["content"]
    assert "cached" not in rotated  # the old pepper's value is no good: the tool was called
    assert metrics["rejected"] == 1
    assert dispatched(upstreams.ledger, "get_status", arguments) == 2


async def test_redis_unreachable_is_a_miss_and_the_run_goes_on(upstreams: Upstreams, redis_prefix: str) -> None:
    arguments = {"key": order()}
    open_gates(upstreams.ledger, "get_status", arguments)
    down = f"redis://127.0.0.1:{free_port()}/0"
    # No cap on runs: the run slots would refuse a run without Redis (fail closed); the cache never does.
    async with agent(upstreams, redis_prefix, redis_url=down, max_concurrent_runs_per_tenant=0) as http:
        results = [await call_once(upstreams, http, "get_status", arguments) for _ in range(2)]
        metrics = await cache_metrics(http)
    assert [result.get("cached") for result in results] == [None, None]
    assert [result["content"] for result in results] == [f"{arguments['key']} is unknown"] * 2
    assert dispatched(upstreams.ledger, "get_status", arguments) == 2
    assert metrics["error"] == 4  # two lookups, two stores


# --- stores off the answer's path (the cache on the real Redis, in this process) ------------------------------

READ_ONLY = ToolInfo(
    name="get_status", input_schema={"type": "object"}, server="ledger", annotations={"readOnlyHint": True}
)
ACME = CallerContext(tenant="acme", run_id="run_1")


@asynccontextmanager
async def redis_cache(
    prefix: str, url: str = REDIS_URL
) -> AsyncIterator[tuple[ToolCache, PendingWrites, CollectorRegistry]]:
    """The cache as agent-service opens it on ``url``: its stores started among the replica's pending writes."""
    client = connect_redis(url)
    pending, registry = PendingWrites(), CollectorRegistry()
    results = ToolCache(
        ToolCachePolicy(60, {}),
        RedisStore(client),
        PEPPER.encode(),
        key_prefix=prefix,
        telemetry=RunTelemetry(registry, trace.NoOpTracer()),
        start_write=pending.start,
    )
    try:
        yield results, pending, registry
    finally:
        await pending.drain()
        await client.aclose()


def outcomes(registry: CollectorRegistry) -> dict[str, float]:
    return {
        outcome: registry.get_sample_value("agent_tool_cache_total", {"outcome": outcome}) or 0.0
        for outcome in ("hit", "miss", "store", "rejected", "error")
    }


async def test_a_store_in_redis_is_sent_off_the_path_served_here_meanwhile_and_lands_by_the_drain(
    redis_prefix: str,
) -> None:
    arguments = {"key": order()}
    async with redis_cache(redis_prefix) as (results, pending, registry):
        await results.remember(ACME, READ_ONLY, arguments, "the result")
        # Not awaited: the store is one of the tenant's writes under way, the run has gone on.
        assert (pending.pending("acme"), results.stores_under_way()) == (1, 1)
        # This replica serves the value being stored, with no round trip (the write has not even started).
        assert await results.lookup(ACME, READ_ONLY, arguments) == "the result"
        assert outcomes(registry) == {"hit": 1, "miss": 0, "store": 0, "rejected": 0, "error": 0}
        await pending.drain()  # what the service's shutdown does
        assert (pending.pending(), results.stores_under_way()) == (0, 0)
        assert outcomes(registry)["store"] == 1
    async with redis_cache(redis_prefix) as (another_replica, _, _):
        assert await another_replica.lookup(ACME, READ_ONLY, arguments) == "the result"
    async with redis() as client:
        key = cache_key(redis_prefix, "acme", "ledger", "get_status", arguments)
        assert 55_000 < await client.pttl(key) <= 60_000


async def test_past_the_bound_of_stores_under_way_a_store_is_awaited(
    redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tool_cache, "MAX_STORES_UNDER_WAY", 1)
    async with redis_cache(redis_prefix) as (results, pending, registry):
        started: list[str] = []

        def start_write(tenant: str, write: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
            started.append(tenant)
            return pending.start(tenant, write)

        results.start_write = start_write
        await results.remember(ACME, READ_ONLY, {"key": order()}, "sent off the path")
        await results.remember(ACME, READ_ONLY, {"key": order()}, "awaited: one store is under way already")
        assert started == ["acme"]
        assert outcomes(registry)["store"] >= 1  # the second, made before ``remember`` returned


async def test_while_redis_fails_a_store_is_awaited_not_left_under_way(redis_prefix: str) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    async with redis_cache(redis_prefix, down) as (results, pending, registry):
        arguments = {"key": order()}
        assert await results.lookup(ACME, READ_ONLY, arguments) is None  # Redis down: a miss, and it fails
        await results.remember(ACME, READ_ONLY, arguments, "the result")
        assert (pending.pending(), results.stores_under_way()) == (0, 0)
        assert outcomes(registry) == {"hit": 0, "miss": 0, "store": 0, "rejected": 0, "error": 2}
