"""Monthly budgets per tenant and per end user, through the real services and the real Redis.

Only the LLM is scripted (``fake_openai`` reports usage as OpenAI does). ``acme`` has a tenant budget of
``ACME_TOKENS`` tokens a month; ``initech``'s users have ``user_monthly_tokens = 1`` each (a run's first call uses
it up); ``globex`` has no budget. Redis keys use a prefix of each test's own (``redis_prefix``, from the run slots'
tests); the month is the real one.
"""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis.asyncio as aioredis

from agent_service.admission.spend_ledgers import month_start, next_month_start
from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.databases import REDIS_URL
from support.processes import agent_env, spawned
from support.servers import free_port
from support.stacks import Upstreams, running_agent

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
INITECH_KEY = "initech-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex
HOOLI_KEY = "hooli-" + uuid.uuid4().hex
ACME_TOKENS = 60
HOOLI_TOKENS = 1000
UMBRELLA_KEY = "umbrella-" + uuid.uuid4().hex
UMBRELLA_TOKENS = 20_000
UMBRELLA_CAP = 3


CALLERS_FILE = f"""
[tenants.acme]
monthly_tokens = {ACME_TOKENS}

[tenants.initech]
user_monthly_tokens = 1

[tenants.globex]

[tenants.hooli]
monthly_tokens = {HOOLI_TOKENS}
user_monthly_tokens = 500

{key_entry("acme-app", "acme", ACME_KEY)}

{key_entry("initech-app", "initech", INITECH_KEY, trusted=True)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}

{key_entry("hooli-app", "hooli", HOOLI_KEY, trusted=True)}
"""


@pytest.fixture
def callers_file(tmp_path: Path) -> Path:
    path = tmp_path / "callers.toml"
    path.write_text(CALLERS_FILE)
    return path


def _run(content: str = "hello") -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}], "tools": ["echo"]}


def _echo_forever(upstreams: Upstreams, rounds: int = 12) -> None:
    """The model calls ``echo`` round after round: the run goes on until a limit ends it."""
    upstreams.llm.push(*[fake_openai.tool_calls((f"call_{i}", "echo", {"text": "again"})) for i in range(rounds)])


def _seconds_to_next_month() -> float:
    now = datetime.now(UTC)
    return (next_month_start(now) - now).total_seconds()


def _assert_budget_exhausted(response: httpx.Response, budget: str) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "budget_exhausted"
    assert budget in error["message"]
    assert f"resets at {next_month_start(datetime.now(UTC)):%Y-%m-%d} 00:00 UTC" in error["message"]
    assert abs(int(response.headers["Retry-After"]) - _seconds_to_next_month()) <= 5


async def test_a_tenant_runs_until_its_monthly_tokens_are_used_up_then_new_runs_are_429_until_the_month_ends(
    upstreams: Upstreams, callers_file: Path, redis_prefix: str
) -> None:
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url="",
            callers_file=callers_file,
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        upstreams.llm.push(fake_openai.text("done"))
        first = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY))
        assert first.status_code == 200, first.text
        assert first.json()["finishReason"] == "stop"
        used = first.json()["usage"]["inputTokens"] + first.json()["usage"]["outputTokens"]
        assert used < ACME_TOKENS

        _echo_forever(upstreams)
        crossing = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY))
        assert crossing.status_code == 200, crossing.text
        result = crossing.json()
        assert (result["finishReason"], result["budget"]) == ("budget", "tenant_monthly_tokens")
        # Its partial result is kept: every round's call and its answer.
        assert [m["role"] for m in result["messages"]] == ["assistant", "tool"] * result["iterations"]
        spent = used + result["usage"]["inputTokens"] + result["usage"]["outputTokens"]
        assert spent >= ACME_TOKENS
        assert len(upstreams.llm.requests) == 1 + result["iterations"]

        _assert_budget_exhausted(
            await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY)), "tenant_monthly_tokens"
        )
        # The OpenAI front refuses it too: an agentic run, and one plain completion (no tools of ours).
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
        for extra in ({}, {"X-Agent-Disabled": "true"}):
            refused = await http.post("/v1/chat/completions", json=chat, headers={**as_caller(ACME_KEY), **extra})
            _assert_budget_exhausted(refused, "tenant_monthly_tokens")
            assert refused.json()["error"]["type"] == "rate_limit_error"  # OpenAI's shape: the SDK's RateLimitError
        upstreams.llm.push(fake_openai.text("fine"))
        other = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(GLOBEX_KEY))
        assert other.status_code == 200, other.text  # another tenant, without a budget

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        key = f"{redis_prefix}spend:{month_start(datetime.now(UTC)):%Y-%m}:acme"
        assert int(await client.hget(key, "tokens") or 0) == spent
        ttl = await client.ttl(key)
        assert _seconds_to_next_month() < ttl <= _seconds_to_next_month() + timedelta(days=1).total_seconds() + 5
        assert [k async for k in client.scan_iter(match=f"{redis_prefix}spend:*globex*")] == []
    finally:
        await client.aclose()


async def test_a_users_budget_stops_that_user_and_not_another_user_of_the_tenant(
    upstreams: Upstreams, callers_file: Path, redis_prefix: str
) -> None:
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url="",
            callers_file=callers_file,
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        _echo_forever(upstreams, rounds=1)  # alice's run makes one call, which uses her token up
        async with http.stream(
            "POST", "/api/v1/agent/run", json={**_run(), "stream": True}, headers=as_caller(INITECH_KEY, "alice")
        ) as streamed:
            assert streamed.status_code == 200
            text = "".join([chunk async for chunk in streamed.aiter_text()])
        done = [line for line in text.splitlines() if line.startswith("data:") and '"done"' in line]
        assert len(done) == 1
        assert '"finishReason":"budget"' in done[0]
        assert '"budget":"user_monthly_tokens"' in done[0]
        assert '"iterations":1' in done[0]  # the first call used alice's one token up

        _assert_budget_exhausted(
            await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(INITECH_KEY, "alice")),
            "The end user 'alice' of tenant 'initech'",
        )
        upstreams.llm.push(fake_openai.text("hello bob"))
        bob = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(INITECH_KEY, "bob"))
        assert bob.status_code == 200, bob.text
        assert bob.json()["finishReason"] == "stop"
        upstreams.llm.push(fake_openai.text("no user"))
        anonymous = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(INITECH_KEY))
        assert anonymous.status_code == 200, anonymous.text  # no user: only the tenant's budgets, and it has none


async def test_two_processes_sharing_redis_share_the_tenants_budget(
    upstreams: Upstreams, callers_file: Path, redis_prefix: str, tmp_path: Path
) -> None:
    ports = free_port(), free_port()
    envs = [
        agent_env(
            port,
            upstreams.completion_url,
            upstreams.gateway,
            database_url="",
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
            callers_file=callers_file,
        )
        for port in ports
    ]
    async with (
        spawned("agent_service", envs[0], ports[0], tmp_path / "a.log"),
        spawned("agent_service", envs[1], ports[1], tmp_path / "b.log"),
        httpx.AsyncClient(timeout=30) as http,
    ):
        _echo_forever(upstreams, rounds=40)
        on_a = await http.post(
            f"http://127.0.0.1:{ports[0]}/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY)
        )
        assert on_a.status_code == 200, on_a.text
        assert (on_a.json()["finishReason"], on_a.json()["budget"]) == ("budget", "tenant_monthly_tokens")
        on_b = await http.post(
            f"http://127.0.0.1:{ports[1]}/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY)
        )
        _assert_budget_exhausted(on_b, "tenant_monthly_tokens")


async def test_a_run_taken_over_after_a_kill_still_counts_toward_its_end_users_budget(
    upstreams: Upstreams, callers_file: Path, redis_prefix: str, tmp_path: Path, own_postgres_url: str
) -> None:
    upstreams.llm.push(fake_openai.hang(), fake_openai.text("done on B"))  # the run's first LLM call on A, then B's
    ports = free_port(), free_port()
    envs = [
        agent_env(
            port,
            upstreams.completion_url,
            upstreams.gateway,
            database_url=own_postgres_url,
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
            callers_file=callers_file,
            lease_seconds=1,
        )
        for port in ports
    ]
    user_key = f"{redis_prefix}spend:{month_start(datetime.now(UTC)):%Y-%m}:initech:user:alice"
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        async with (
            spawned("agent_service", envs[0], ports[0], tmp_path / "a.log") as process_a,
            spawned("agent_service", envs[1], ports[1], tmp_path / "b.log"),
            httpx.AsyncClient(timeout=10) as http,
        ):
            body = {**_run(), "onDisconnect": "continue", "stream": True}
            url_a = f"http://127.0.0.1:{ports[0]}/api/v1/agent/run"
            async with http.stream("POST", url_a, json=body, headers=as_caller(INITECH_KEY, "alice")) as started:
                assert started.status_code == 200
                run_id = started.headers["x-agent-run-id"]
            with anyio.fail_after(10):
                await upstreams.llm.wait_for_request(1)
            assert await client.exists(user_key) == 0, "admitted on A, nothing spent yet: no counter"
            process_a.kill()  # SIGKILL: B takes the run over once its lease has lapsed
            with anyio.fail_after(10):
                await process_a.wait()
            url_b = f"http://127.0.0.1:{ports[1]}/api/v1/agent/runs/{run_id}"
            with anyio.fail_after(20):  # followed on B to its end: the stream closes after done
                events = await http.get(f"{url_b}/events", headers=as_caller(INITECH_KEY), timeout=20)
            assert "event: done" in events.text, events.text
            run = (await http.get(url_b, headers=as_caller(INITECH_KEY))).json()
            assert run["status"] == "completed"
            assert run["user"] == "alice"
            spent = int(await client.hget(user_key, "tokens") or 0)
            assert spent == run["usage"]["inputTokens"] + run["usage"]["outputTokens"] > 0, "B counted it as alice's"
    finally:
        await client.aclose()


def _log_usage(database: Path, tenant: str, tokens: int, at: datetime) -> None:
    """A usage log row, as the service writes one per LLM call."""
    with sqlite3.connect(database) as connection:
        connection.execute(
            "INSERT INTO usage_log (tenant, model, input_tokens, output_tokens, created_at) VALUES (?, ?, ?, ?, ?)",
            (tenant, "gpt-4o", tokens, 0, at.strftime("%Y-%m-%d %H:%M:%S.%f")),
        )


async def test_a_restarted_process_starts_its_counters_from_the_months_usage_in_the_store(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    database = tmp_path / "runs.db"
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE.replace("[tenants.globex]", "[tenants.globex]\nmonthly_tokens = 100"))
    settings: dict[str, Any] = {"database_url": f"sqlite:///{database}", "callers_file": callers}
    async with running_agent(upstreams.completion_url, upstreams.gateway, **settings):
        pass  # the schema is made
    now = datetime.now(UTC)
    _log_usage(database, "acme", ACME_TOKENS, now - timedelta(seconds=1))  # this month: acme's budget is used up
    last_month = month_start(now) - timedelta(seconds=1)
    _log_usage(database, "globex", 1000, last_month)  # last month's: not this month's spend
    async with (
        running_agent(upstreams.completion_url, upstreams.gateway, **settings) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        _assert_budget_exhausted(
            await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY)), "tenant_monthly_tokens"
        )
        upstreams.llm.push(fake_openai.text("fine"))
        globex = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(GLOBEX_KEY))
        assert globex.status_code == 200, globex.text


async def test_redis_down_refuses_runs_of_a_tenant_with_a_budget_with_503_and_not_the_others(
    upstreams: Upstreams, callers_file: Path
) -> None:
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url="",
            callers_file=callers_file,
            redis_url=f"redis://127.0.0.1:{free_port()}/0",
            max_concurrent_runs_per_tenant=0,  # no slots: only the budgets need Redis here
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        refused = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY))
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "limits_unavailable"
        assert refused.headers["Retry-After"] == "1"
        upstreams.llm.push(fake_openai.text("fine"))
        globex = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(GLOBEX_KEY))
        assert globex.status_code == 200, globex.text


async def _keys(prefix: str) -> list[bytes]:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        return sorted([key async for key in client.scan_iter(match=f"{prefix}*")])
    finally:
        await client.aclose()


async def test_requests_of_new_users_of_a_tenant_whose_budget_is_used_up_leave_no_redis_keys(
    upstreams: Upstreams, callers_file: Path, redis_prefix: str, tmp_path: Path
) -> None:
    database = tmp_path / "runs.db"
    settings: dict[str, Any] = {"database_url": f"sqlite:///{database}", "callers_file": callers_file}
    async with running_agent(upstreams.completion_url, upstreams.gateway, **settings):
        pass  # the schema is made
    _log_usage(database, "hooli", HOOLI_TOKENS, datetime.now(UTC) - timedelta(seconds=1))
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            **settings,
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
            max_users_per_tenant_month=50,
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        _assert_budget_exhausted(
            await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(HOOLI_KEY)), "tenant_monthly_tokens"
        )
        before = await _keys(redis_prefix)
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
        for index in range(300):
            user = f"mallory-{index}"
            if index % 2:
                refused = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(HOOLI_KEY, user))
            else:
                headers = {**as_caller(HOOLI_KEY, user), "X-Agent-Disabled": "true"}
                refused = await http.post("/v1/chat/completions", json=chat, headers=headers)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "budget_exhausted"
        after = await _keys(redis_prefix)
    assert after == before, f"{len(before)} keys before, {len(after)} after"
    assert len(upstreams.llm.requests) == 0


async def test_a_tenant_with_per_user_budgets_refuses_a_new_end_user_past_the_months_bound_with_429(
    upstreams: Upstreams, callers_file: Path, redis_prefix: str
) -> None:
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url="",
            callers_file=callers_file,
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
            max_users_per_tenant_month=3,
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        for user in ("u1", "u2", "u3"):
            upstreams.llm.push(fake_openai.text("hi"))
            answered = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(HOOLI_KEY, user))
            assert answered.status_code == 200, answered.text
        for index in range(20):
            refused = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(HOOLI_KEY, f"new-{index}"))
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert error["code"] == "too_many_users"
            assert "Tenant 'hooli' has had 3 end users (X-User-Id)" in error["message"]
            assert abs(int(refused.headers["Retry-After"]) - _seconds_to_next_month()) <= 5
        upstreams.llm.push(fake_openai.text("again"))
        known = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(HOOLI_KEY, "u2"))
        assert known.status_code == 200, known.text
    month = f"{month_start(datetime.now(UTC)):%Y-%m}"
    user_keys = [key for key in await _keys(redis_prefix) if b":user:" in key]
    assert len(user_keys) == 3, user_keys
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        assert await client.smembers(f"{redis_prefix}spend-users:{month}:hooli") == {b"u1", b"u2", b"u3"}
    finally:
        await client.aclose()


async def test_thirty_plain_completions_at_once_pass_the_budget_by_at_most_one_call_per_slot(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str
) -> None:
    callers_file = tmp_path / "umbrella.toml"  # a file of its own: a tenant's run cap makes every tenant's count
    callers_file.write_text(
        f"[tenants.umbrella]\nmonthly_tokens = {UMBRELLA_TOKENS}\nmax_concurrent_runs = {UMBRELLA_CAP}\n\n"
        + key_entry("umbrella-app", "umbrella", UMBRELLA_KEY)
    )
    answer = " ".join(["token"] * 2000)  # 2,000 completion tokens as the scripted model counts them
    upstreams.llm.push(*[fake_openai.text(answer, delay=0.2) for _ in range(60)])
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "write at length"}]}
    headers = {**as_caller(UMBRELLA_KEY), "X-Agent-Disabled": "true"}
    statuses: list[tuple[int, str]] = []
    async with running_agent(
        upstreams.completion_url,
        upstreams.gateway,
        database_url="",
        callers_file=callers_file,
        redis_url=REDIS_URL,
        redis_key_prefix=redis_prefix,
    ) as agent_url:

        async def ask(http: httpx.AsyncClient) -> None:
            response = await http.post("/v1/chat/completions", json=chat, headers=headers)
            code = response.json()["error"]["code"] if response.status_code != 200 else "ok"
            statuses.append((response.status_code, code))

        # No connection kept alive between waves: under load one can be closed by the server as it is reused.
        no_keepalive = httpx.Limits(max_keepalive_connections=0)
        clients = [httpx.AsyncClient(base_url=agent_url, timeout=30, limits=no_keepalive) for _ in range(30)]
        try:
            with anyio.fail_after(60):
                while ("ok" in [code for _, code in statuses[-30:]]) or not statuses:  # waves until one is all refused
                    async with anyio.create_task_group() as task_group:
                        for http in clients:
                            task_group.start_soon(ask, http)
        finally:
            for http in clients:
                await http.aclose()
    answered = sum(1 for _, code in statuses if code == "ok")
    per_call = len(answer.split()) + fake_openai_prompt_tokens(chat)
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        key = f"{redis_prefix}spend:{month_start(datetime.now(UTC)):%Y-%m}:umbrella"
        spent = int(await client.hget(key, "tokens") or 0)
    finally:
        await client.aclose()
    assert spent == answered * per_call
    assert {code for _, code in statuses} <= {"ok", "too_many_runs", "budget_exhausted"}
    assert spent <= UMBRELLA_TOKENS + UMBRELLA_CAP * per_call, f"{spent} tokens of a {UMBRELLA_TOKENS} budget"


def fake_openai_prompt_tokens(chat: dict[str, Any]) -> int:
    """The prompt's tokens as the scripted model counts them: its words, and 4 per message."""
    return sum(len(message["content"].split()) + 4 for message in chat["messages"])
