"""Concurrency per tenant: the run slots on their own, then through agent-service, in one process and in two.

Redis is the real one at 127.0.0.1:6379 (a test fails when it is unreachable: the shared cap is what is tested);
each test uses keys of its own prefix (the ``redis_prefix`` fixture) and deletes them. Runs are held open by the
scripted LLM's ``hang()`` reply: an admitted run waits on its first LLM call until its client leaves, so a test
decides how many runs are in progress without sleeping.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis.asyncio as aioredis

from agent_service.admission.run_slots import LocalRunSlots, RedisRunSlots, RunSlots
from agent_service.infra.shared_redis import connect_redis
from suite_common.errors import ApiError
from support import fake_openai
from support.databases import REDIS_URL
from support.fake_openai import ScriptedOpenAI
from support.processes import agent_env, spawned
from support.servers import free_port
from support.stacks import Upstreams, running_agent

pytestmark = pytest.mark.anyio

CAP = 16


async def _redis_now_ms() -> int:
    """Redis's clock, which the slots' expiries are scored on."""
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        seconds, micros = await client.time()
    finally:
        await client.aclose()
    return int(seconds) * 1000 + int(micros) // 1000


async def _renewed_after(key: str, moment_ms: int, ttl_ms: int = 1000) -> None:
    """Wait (bounded) until every slot of ``key`` was renewed after ``moment_ms``: each expires later than a slot
    taken or renewed by then could. A process polled from outside: there is no event to await."""
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        with anyio.fail_after(10):
            while True:
                held: list[Any] = await client.zrange(key, 0, -1, withscores=True)
                scores = [float(score) for _, score in held]
                if scores and min(scores) > moment_ms + ttl_ms:
                    return
                await anyio.sleep(0.05)
    finally:
        await client.aclose()


@asynccontextmanager
async def _slots(kind: str, prefix: str, ttl: float) -> AsyncIterator[RunSlots]:
    if kind == "local":
        yield LocalRunSlots(ttl)
        return
    client = connect_redis(REDIS_URL)  # the service's own way to reach Redis; the slots do not own it
    try:
        yield RedisRunSlots(client, ttl, key_prefix=prefix)
    finally:
        await client.aclose()


async def _refusal(slots: RunSlots, tenant: str, run_id: str, cap: int) -> ApiError:
    with pytest.raises(ApiError) as refused:
        await slots.acquire(tenant, run_id, cap)
    return refused.value


BACKENDS = pytest.mark.parametrize("kind", ["local", "redis"])


# --- the slots on their own ---------------------------------------------------------------------------------


@BACKENDS
async def test_a_tenant_at_its_cap_is_refused_with_429_and_retry_after_until_a_slot_is_released(
    kind: str, redis_prefix: str
) -> None:
    async with _slots(kind, redis_prefix, ttl=30) as slots:
        for index in range(3):
            await slots.acquire("acme", f"run-{index}", 3)
        await slots.acquire("acme", "run-1", 3)  # the same run again: still one slot
        refusal = await _refusal(slots, "acme", "run-3", 3)
        assert refusal.status == 429
        assert refusal.code == "too_many_runs"
        assert "'acme'" in refusal.message
        assert "3 runs" in refusal.message
        assert 29 <= int(refusal.headers["Retry-After"]) <= 30  # the soonest slot expires in about 30 s

        await slots.acquire("other", "run-x", 3)  # another tenant counts apart
        await slots.release("acme", "run-0")
        await slots.acquire("acme", "run-3", 3)
        assert (await _refusal(slots, "acme", "run-4", 3)).status == 429
        await slots.release("acme", "never-held")  # nothing happens


@BACKENDS
async def test_a_slot_that_is_not_renewed_expires_and_a_renewed_one_does_not(kind: str, redis_prefix: str) -> None:
    async with _slots(kind, redis_prefix, ttl=0.6) as slots:
        await slots.acquire("acme", "renewed", 2)
        await slots.acquire("acme", "forgotten", 2)
        assert int((await _refusal(slots, "acme", "third", 2)).headers["Retry-After"]) == 1  # at least 1
        started = time.monotonic()
        with anyio.fail_after(5):
            while True:  # the renewed slot is kept, every 0.1 s, past the TTL; "forgotten" expires
                await slots.renew("acme", ["renewed"])
                try:
                    await slots.acquire("acme", "third", 2)
                    break
                except ApiError:
                    await anyio.sleep(0.1)
        assert time.monotonic() - started >= 0.5
        assert (await _refusal(slots, "acme", "fourth", 2)).status == 429  # renewed + third
        await slots.renew("acme", ["forgotten"])  # expired: renewing does not take it back
        await slots.release("acme", "third")
        await slots.acquire("acme", "fourth", 2)


async def test_redis_slots_are_one_sorted_set_per_tenant_scored_by_expiry(redis_prefix: str) -> None:
    async with _slots("redis", redis_prefix, ttl=15) as slots:
        await slots.acquire("acme", "run-a", 4)
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            key = f"{redis_prefix}run-slots:acme"
            slots_stored: list[Any] = list(await client.zrange(key, 0, -1, withscores=True))
            seconds, micros = await client.time()
            now_ms = int(seconds) * 1000 + int(micros) / 1000
            [(member, expiry)] = slots_stored
            assert member == b"run-a"
            assert 14_000 < float(expiry) - now_ms <= 15_000
            assert 14_000 < await client.pttl(key) <= 15_000  # the key goes with its last slot
            await slots.release("acme", "run-a")
            assert await client.exists(key) == 0
        finally:
            await client.aclose()


async def test_redis_unreachable_refuses_new_runs_with_503_and_never_breaks_renewal_or_release() -> None:
    client = connect_redis(f"redis://127.0.0.1:{free_port()}/0")
    slots = RedisRunSlots(client, 15)
    try:
        with anyio.fail_after(5):
            refusal = await _refusal(slots, "acme", "run-a", 16)
            await slots.renew("acme", ["run-a"])
            await slots.release("acme", "run-a")
    finally:
        await client.aclose()
    assert refusal.status == 503
    assert refusal.code == "limits_unavailable"
    assert refusal.headers["Retry-After"] == "1"


# --- through agent-service ----------------------------------------------------------------------------------


def _body(content: str) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}], "tools": ["echo"]}


@dataclass
class Held:
    """Runs started at once; the admitted ones stay open (their LLM call hangs) until the block ends."""

    refused: list[httpx.Response]


@asynccontextmanager
async def _runs_at_once(clients: list[httpx.AsyncClient], llm: ScriptedOpenAI, admitted: int) -> AsyncIterator[Held]:
    """One run per client (a client per run: a slot per connection), all at once; yields once ``admitted`` runs
    wait on the LLM and every other has been answered; leaving cancels the held ones (their clients leave)."""
    held = Held([])
    llm.push(*[fake_openai.hang() for _ in range(admitted)])
    answered = anyio.Event()

    async def run(http: httpx.AsyncClient, index: int) -> None:
        try:
            response = await http.post("/api/v1/agent/run", json=_body(f"run {index}"))
        except httpx.TransportError:  # a held run whose process the test killed
            return
        held.refused.append(response)
        if len(held.refused) == len(clients) - admitted:
            answered.set()

    async with anyio.create_task_group() as task_group:
        for index, http in enumerate(clients):
            task_group.start_soon(run, http, index)
        with anyio.fail_after(20):
            await llm.wait_for_request(admitted)
            if admitted < len(clients):
                await answered.wait()
        yield held
        task_group.cancel_scope.cancel()


def _assert_refused_with_retry_after(responses: list[httpx.Response], count: int) -> None:
    assert [r.status_code for r in responses] == [429] * count, [r.text for r in responses]
    for response in responses:
        assert response.json()["error"]["code"] == "too_many_runs"
        assert int(response.headers["Retry-After"]) >= 1


async def _admitted_again(url: str, llm: ScriptedOpenAI, within: float) -> float:
    """Polls ``url`` with a run until one is admitted (it answers at once); returns how long that took."""
    started = time.monotonic()
    llm.push(fake_openai.text("admitted"))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        with anyio.fail_after(within):
            while True:
                response = await http.post("/api/v1/agent/run", json=_body("again"))
                if response.status_code != 429:
                    assert response.status_code == 200, response.text
                    return time.monotonic() - started
                await anyio.sleep(0.05)  # another process frees the slots: nothing to await


@asynccontextmanager
async def _clients(urls: list[str]) -> AsyncIterator[list[httpx.AsyncClient]]:
    clients = [httpx.AsyncClient(base_url=url, timeout=30) for url in urls]
    try:
        yield clients
    finally:
        for client in clients:
            await client.aclose()


@pytest.mark.parametrize("kind", ["local", "redis"])
async def test_twenty_runs_of_one_tenant_at_once_with_cap_16_give_exactly_four_429s_then_slots_come_back(
    kind: str, upstreams: Upstreams, redis_prefix: str
) -> None:
    shared = {"redis_url": REDIS_URL, "redis_key_prefix": redis_prefix} if kind == "redis" else {}
    async with running_agent(
        upstreams.completion_url,
        upstreams.gateway,
        database_url="",
        max_concurrent_runs_per_tenant=CAP,
        **shared,
    ) as agent_url:
        async with _clients([agent_url] * 20) as clients, _runs_at_once(clients, upstreams.llm, CAP) as held:
            _assert_refused_with_retry_after(held.refused, 4)
        # The 16 clients left: their runs were cancelled, and each released its slot on the way out.
        await _admitted_again(agent_url, upstreams.llm, within=10)
    if kind == "redis":
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            assert await client.zcard(f"{redis_prefix}run-slots:default") == 0
        finally:
            await client.aclose()


def _replica_env(upstreams: Upstreams, prefix: str, port: int, **settings: object) -> dict[str, str]:
    """An agent-service process sharing the test's Redis slots, with a one-second lease (and slot TTL)."""
    defaults: dict[str, object] = {
        "database_url": "",
        "redis_url": REDIS_URL,
        "redis_key_prefix": prefix,
        "max_concurrent_runs_per_tenant": CAP,
        "lease_seconds": 1,
    }
    return agent_env(port, upstreams.completion_url, upstreams.gateway, **{**defaults, **settings})


@asynccontextmanager
async def _replica(upstreams: Upstreams, prefix: str, log: Path, **settings: object) -> AsyncIterator[str]:
    port = free_port()
    async with spawned("agent_service", _replica_env(upstreams, prefix, port, **settings), port, log):
        yield f"http://127.0.0.1:{port}"


async def test_two_processes_sharing_redis_give_exactly_four_429s_for_twenty_runs_of_one_tenant(
    upstreams: Upstreams, redis_prefix: str, tmp_path: Path
) -> None:
    async with (
        _replica(upstreams, redis_prefix, tmp_path / "a.log") as url_a,
        _replica(upstreams, redis_prefix, tmp_path / "b.log") as url_b,
        _clients([url_a, url_b] * 10) as clients,
        _runs_at_once(clients, upstreams.llm, CAP) as held,
    ):
        _assert_refused_with_retry_after(held.refused, 4)


async def test_the_slots_of_a_killed_process_come_back_within_their_ttl(
    upstreams: Upstreams, redis_prefix: str, tmp_path: Path
) -> None:
    port = free_port()
    async with (
        _replica(upstreams, redis_prefix, tmp_path / "b.log") as url_b,
        spawned("agent_service", _replica_env(upstreams, redis_prefix, port), port, tmp_path / "a.log") as process_a,
    ):
        async with (
            _clients([f"http://127.0.0.1:{port}"] * CAP) as clients,
            _runs_at_once(clients, upstreams.llm, CAP) as held,
        ):
            assert held.refused == []
            async with httpx.AsyncClient(base_url=url_b, timeout=10) as http:
                # A holds all 16, each renewed past the one-second TTL it was taken with: B refuses.
                await _renewed_after(f"{redis_prefix}run-slots:default", await _redis_now_ms())
                refused = await http.post("/api/v1/agent/run", json=_body("one too many"))
                _assert_refused_with_retry_after([refused], 1)
            process_a.kill()  # SIGKILL: nothing is released
            with anyio.fail_after(10):
                await process_a.wait()
            # Nothing released them: they expire, one TTL (1 s) after A's last renewal at most.
            elapsed = await _admitted_again(url_b, upstreams.llm, within=5)
        assert elapsed < 1.0 + 0.5, elapsed


async def test_a_cap_of_zero_counts_nothing_and_refuses_nothing(upstreams: Upstreams) -> None:
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url="",
            max_concurrent_runs_per_tenant=0,
            redis_url=f"redis://127.0.0.1:{free_port()}/0",  # unused: a Redis that is down refuses nothing here
        ) as agent_url,
        _clients([agent_url] * 20) as clients,
        _runs_at_once(clients, upstreams.llm, 20) as held,
    ):
        assert held.refused == []


async def test_with_stored_runs_a_refused_run_is_never_stored_and_a_refused_conversation_gives_its_slot_back(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    database = tmp_path / "runs.db"
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url=f"sqlite:///{database}",
            max_concurrent_runs_per_tenant=2,
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        upstreams.llm.push(fake_openai.hang())
        conversation = f"conv-{uuid.uuid4().hex}"
        busy = {**_body("holds its conversation"), "onDisconnect": "continue", "conversationId": conversation}
        async with http.stream("POST", "/api/v1/agent/run", json={**busy, "stream": True}) as started:
            assert started.status_code == 200
            run_id = started.headers["x-agent-run-id"]
        with anyio.fail_after(10):
            await upstreams.llm.wait_for_request(1)
        # The conversation is busy (409): its slot, taken first, is given back, else the cap of 2 would be reached.
        for _ in range(3):
            refused = await http.post("/api/v1/agent/run", json={**_body("again"), "conversationId": conversation})
            assert refused.status_code == 409, refused.text
        async with _clients([agent_url] * 2) as clients, _runs_at_once(clients, upstreams.llm, 1) as held:
            _assert_refused_with_retry_after(held.refused, 1)
        stored = sqlite3.connect(database)
        try:
            [(count,)] = stored.execute("SELECT count(*) FROM runs").fetchall()
        finally:
            stored.close()
        assert count == 2, "the detached run and the one admitted beside it; never the refused ones"
        await http.post(f"/api/v1/agent/runs/{run_id}/cancel")


async def test_the_openai_front_refuses_an_agentic_run_over_the_cap_with_429_and_retry_after(
    upstreams: Upstreams,
) -> None:
    async with running_agent(
        upstreams.completion_url, upstreams.gateway, database_url="", max_concurrent_runs_per_tenant=1
    ) as agent_url:
        async with (
            _clients([agent_url]) as clients,
            _runs_at_once(clients, upstreams.llm, 1),
            httpx.AsyncClient(base_url=agent_url, timeout=10) as http,
        ):
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
            refused = await http.post("/v1/chat/completions", json=body)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "too_many_runs"
        assert int(refused.headers["Retry-After"]) >= 1


async def test_a_run_taken_over_after_a_kill_takes_its_slot_on_the_replica_that_resumes_it(
    upstreams: Upstreams, redis_prefix: str, tmp_path: Path, own_postgres_url: str
) -> None:
    upstreams.llm.push(fake_openai.hang(), fake_openai.hang())  # the run's first LLM call on A, then on B
    key = f"{redis_prefix}run-slots:default"
    client = aioredis.Redis.from_url(REDIS_URL)
    port_a = free_port()
    env_a = _replica_env(upstreams, redis_prefix, port_a, database_url=own_postgres_url)
    url_a = f"http://127.0.0.1:{port_a}"
    async with (
        spawned("agent_service", env_a, port_a, tmp_path / "a.log") as process_a,
        _replica(upstreams, redis_prefix, tmp_path / "b.log", database_url=own_postgres_url) as url_b,
        httpx.AsyncClient(timeout=10) as http,
    ):
        body = {**_body("survive a kill"), "onDisconnect": "continue", "stream": True}
        async with http.stream("POST", f"{url_a}/api/v1/agent/run", json=body) as started:
            assert started.status_code == 200
            run_id = started.headers["x-agent-run-id"]
        with anyio.fail_after(10):
            await upstreams.llm.wait_for_request(1)
        assert await client.zrange(key, 0, -1) == [run_id.encode()]
        process_a.kill()  # SIGKILL: its lease and its slot lapse unrenewed
        killed_at_ms = await _redis_now_ms()
        with anyio.fail_after(10):
            await process_a.wait()
        with anyio.fail_after(15):
            await upstreams.llm.wait_for_request(2)  # B resumed it: its first LLM call again
        # The same slot (named by the run), now renewed by B: it expires later than A could have kept it.
        await _renewed_after(key, killed_at_ms)
        assert await client.zrange(key, 0, -1) == [run_id.encode()]
        cancelled = await http.post(f"{url_b}/api/v1/agent/runs/{run_id}/cancel")
        assert cancelled.json()["status"] == "cancelled"
        assert await client.zcard(key) == 0, "released when the resumed run ended"
    await client.aclose()


async def test_plain_completions_of_the_openai_front_hold_a_slot_each_so_a_cap_of_one_lets_one_through(
    upstreams: Upstreams, redis_prefix: str
) -> None:
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    # The ways to a plain completion: the opt-out header, and tool_choice "none" (no tool of ours offered).
    requests = [({"X-Agent-Disabled": "true"}, chat), ({}, {**chat, "tool_choice": "none"})] * 4
    async with running_agent(
        upstreams.completion_url,
        upstreams.gateway,
        database_url="",
        max_concurrent_runs_per_tenant=1,
        redis_url=REDIS_URL,
        redis_key_prefix=redis_prefix,
    ) as agent_url:
        upstreams.llm.push(fake_openai.hang())
        refused: list[httpx.Response] = []
        all_answered = anyio.Event()

        async def send(http: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any]) -> None:
            response = await http.post("/v1/chat/completions", json=body, headers=headers)
            refused.append(response)
            if len(refused) == len(requests) - 1:
                all_answered.set()

        async with _clients([agent_url] * len(requests)) as clients, anyio.create_task_group() as task_group:
            for http, (headers, body) in zip(clients, requests, strict=True):
                task_group.start_soon(send, http, headers, body)
            with anyio.fail_after(20):
                await upstreams.llm.wait_for_request(1)
                await all_answered.wait()
            in_flight = len(upstreams.llm.requests)
            task_group.cancel_scope.cancel()  # the held completion's client leaves
        assert in_flight == 1, f"{in_flight} completions in flight under a cap of 1"
        _assert_refused_with_retry_after(refused, len(requests) - 1)
        # Its slot came back as its client left: the next plain completion is admitted.
        upstreams.llm.push(fake_openai.text("admitted"))
        async with httpx.AsyncClient(base_url=agent_url, timeout=10) as http:
            with anyio.fail_after(10):
                while True:
                    again = await http.post("/v1/chat/completions", json=chat, headers=requests[0][0])
                    if again.status_code != 429:
                        break
                    await anyio.sleep(0.05)  # the slot is released as the cancelled request unwinds there
            assert again.status_code == 200, again.text
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        assert await client.zcard(f"{redis_prefix}run-slots:default") == 0
    finally:
        await client.aclose()
