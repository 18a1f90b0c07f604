"""7. agent-service's run limits: what the per-tenant run slot costs a run, in Redis and in memory, against none, and
what all of a tenant's controls together cost (a caller key, the Redis slot, a run token cap, the tenant's and its
user's monthly budgets in Redis).

Four agent-services, alike but for their limits, run side by side on the system-under-test core behind the suite's
completion-service and mcp-client-service, none storing runs (``AGENT_DATABASE_URL=""``, so that the limits are the
only difference): no cap (``AGENT_MAX_CONCURRENT_RUNS_PER_TENANT=0``: nothing counted), the in-process slots, the
Redis slots on ``BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``, keys under a prefix of this run's own,
deleted at the end), and "tenancy": the Redis slots with a callers file whose tenant has every control on (none
reached), each run sent with its key and an end user. Each gets the same run (``rounds-1``: one tool call, then the
answer; ``stream: false``), one at a time (the cap is never reached: this is the cost of admitting and releasing),
in interleaved rounds. Per mode: p50, p99, agent-service's CPU per run, what it adds per run against no cap, and
the ratios. Then, apart from the timed rounds, each Redis mode makes ``_COUNTED_RUNS`` more runs under Redis's
``MONITOR``: the commands it sent per run with keys of this run's prefix (a script's own commands not counted; each
command one round trip, none pipelined), by name. Redis out of reach: the Redis modes are left out, with a note
saying why.

``BENCH_LIMITS_BASE=<checkout>`` adds a fifth mode: "tenancy" again, on the agent-service of another checkout of the
suite (its ``PYTHONPATH``; e.g. ``main``'s), interleaved with the others, so that a change to the limits is compared
with its base in one run, under the same load.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from collections import Counter
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bench.agent import MESSAGES
from bench.httpload import HttpConnection
from bench.measure import Probe, Rounds, interleave
from bench.probes import HttpCall, http_call
from bench.processes import Service
from bench.report import Section, Table, Target, ms
from bench.suite import STDIO_TOOL, Suite, start_agent

__all__ = [
    "ADDED_PER_RUN_TARGET",
    "BENCH_KEY",
    "REDIS_URL_VARIABLE",
    "TENANCY_CALLERS",
    "delete_keys",
    "redis_reachable",
    "run_limits",
]

REDIS_URL_VARIABLE = "BENCH_REDIS_URL"
BASE_VARIABLE = "BENCH_LIMITS_BASE"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
ADDED_PER_RUN_TARGET = 0.0005
"""What the Redis slot may add to a run (seconds of p50 latency) against no cap, Redis on loopback."""
_ROUNDS = 1
_COUNTED_RUNS = 40
"""Runs per Redis mode under ``MONITOR`` (commands per run: a keeper's renewal every few seconds adds about 0.02)."""
_SETTLE_SECONDS = 0.5
"""How long the count waits after its last run for the writes sent off the answers' paths (a slot given back)."""


@dataclass
class _Mode:
    key: str
    label: str
    env: dict[str, str]
    service: Service | None = None
    headers: dict[str, str] = field(default_factory=dict)


BENCH_KEY = f"bench-{secrets.token_hex(16)}"
TENANCY_CALLERS = f"""
# The tenant of the "tenancy" mode: every control of a run on, none of them reached.
[tenants.bench]
max_concurrent_runs = 16
max_run_tokens = 1000000000
monthly_tokens = 1000000000000
user_monthly_tokens = 1000000000000

[[keys]]
name = "bench"
tenant = "bench"
sha256 = "{hashlib.sha256(BENCH_KEY.encode()).hexdigest()}"
trusted = true
"""


def _run_call(mode: _Mode) -> HttpCall:
    assert mode.service is not None
    body = {"model": f"openai/rounds-{_ROUNDS}", "messages": MESSAGES, "tools": [STDIO_TOOL], "stream": False}
    return http_call(
        mode.service,
        "POST",
        "/api/v1/agent/run",
        body,
        headers=mode.headers,
        must_contain=f'"iterations":{_ROUNDS + 1}'.encode(),
    )


async def redis_reachable(url: str) -> str | None:
    """Why Redis cannot be used, or ``None``."""
    client = aioredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        await client.ping()
    except (OSError, aioredis.RedisError) as error:
        return f"Redis not reachable at {url}: {type(error).__name__}: {error}"
    finally:
        await client.aclose()
    return None


async def delete_keys(url: str, prefix: str) -> None:
    client = aioredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def run_limits(suite: Suite, plan: Rounds) -> Section:
    """The section ``make bench`` prints (``--only limits``), with the Redis target. The suite's own agent-service
    takes no part: three more are started, alike but for their run slots, and stopped at the end."""
    redis_url = os.environ.get(REDIS_URL_VARIABLE) or DEFAULT_REDIS_URL
    prefix = f"bench-{secrets.token_hex(4)}:"
    unstored = {"AGENT_DATABASE_URL": "", "AGENT_REDIS_URL": ""}
    modes = [
        _Mode("none", "no cap (AGENT_MAX_CONCURRENT_RUNS_PER_TENANT=0)", {**unstored, **_cap(0)}),
        _Mode("memory", "in-process slots (AGENT_REDIS_URL empty)", {**unstored, **_cap(16)}),
    ]
    skipped = await redis_reachable(redis_url)
    if skipped is None:
        redis_env = {**unstored, **_cap(16), "AGENT_REDIS_URL": redis_url, "AGENT_REDIS_KEY_PREFIX": prefix}
        modes.append(_Mode("redis", "Redis slots (loopback)", redis_env))
        callers = suite.logs / "bench-callers.toml"
        callers.write_text(TENANCY_CALLERS)
        modes.append(
            _Mode(
                "tenancy",
                "caller key + Redis slots + run token cap + tenant and user monthly budgets (Redis)",
                {**redis_env, "AGENT_CALLERS_FILE": str(callers)},
                headers={"Authorization": f"Bearer {BENCH_KEY}", "X-User-Id": "bench-user"},
            )
        )
        base = os.environ.get(BASE_VARIABLE)
        if base:
            modes.append(
                _Mode(
                    "tenancy-base",
                    f"the same tenancy on {base}'s agent-service (its PYTHONPATH)",
                    {**modes[-1].env, "PYTHONPATH": _pythonpath(Path(base))},
                    headers=modes[-1].headers,
                )
            )
    try:
        with ExitStack() as stack:
            for mode in modes:
                mode.service = start_agent(stack, suite, f"agent-service-limits-{mode.key}", mode.env)
            figures = await _measure(modes, plan, redis_url if skipped is None else None, prefix)
    finally:
        if skipped is None:
            await delete_keys(redis_url, prefix)
    return _section(modes, figures, plan, skipped)


def _pythonpath(checkout: Path) -> str:
    """The packages of the suite's checkout at ``checkout`` (as ``make``'s environment has them)."""
    sources = [checkout / "libs" / "suite_common" / "src", *sorted(checkout.glob("services/*/src"))]
    return os.pathsep.join(str(path) for path in [*sources, *sorted(checkout.glob("tools/*/src"))])


def _cap(cap: int) -> dict[str, str]:
    return {"AGENT_MAX_CONCURRENT_RUNS_PER_TENANT": str(cap)}


async def _redis_commands(url: str, prefix: str, probe: Probe, runs: int) -> Counter[str]:
    """The commands sent to Redis with keys under ``prefix`` while ``probe`` makes ``runs`` runs (and their writes
    off the answer's path settle), by name; a script's own commands are not counted (``MONITOR`` shows them apart)."""
    client = aioredis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=2)
    end = f"{prefix}counted"
    counts: Counter[str] = Counter()
    try:
        async with client.monitor() as monitor:

            async def listen() -> None:
                while True:
                    seen = await monitor.next_command()
                    command = str(seen["command"])
                    if end in command:
                        return
                    if seen["client_type"] != "lua" and prefix in command:
                        counts[command.split(" ", 1)[0].lower()] += 1

            listening = asyncio.create_task(listen())
            for _ in range(runs):
                await probe()
            await asyncio.sleep(_SETTLE_SECONDS)
            marker = aioredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
            try:
                await marker.get(end)
            finally:
                await marker.aclose()
            await asyncio.wait_for(listening, 10)
    finally:
        await client.aclose()
    return counts


async def _measure(modes: list[_Mode], plan: Rounds, redis_url: str | None, prefix: str) -> dict[str, Any]:
    services = {mode.key: mode.service for mode in modes if mode.service is not None}
    async with AsyncExitStack() as stack:
        arms = {
            mode.key: _run_call(mode).probe(
                await stack.enter_async_context(HttpConnection("127.0.0.1", mode.service.port))
            )
            for mode in modes
            if mode.service is not None
        }
        await interleave(arms, replace(plan, rounds=0))  # warm-up apart: Redis connected, scripts loaded
        figures: dict[str, Any] = await interleave(
            arms, replace(plan, warmup=0), cpu_pids={key: [service.pid] for key, service in services.items()}
        )
        if redis_url is not None:
            for key in [key for key in ("redis", "tenancy", "tenancy-base") if key in arms]:
                counts = await _redis_commands(redis_url, prefix, arms[key], _COUNTED_RUNS)
                figures[f"{key}:commands"] = {name: count / _COUNTED_RUNS for name, count in sorted(counts.items())}
        return figures


def _section(modes: list[_Mode], figures: dict[str, Any], plan: Rounds, skipped: str | None) -> Section:
    table = Table(
        f"7. agent-service's run limits: the same run ({_ROUNDS} round, one tool call, stream: false, not stored) "
        f"through agent-services alike but for their limits; {plan.rounds} interleaved rounds x "
        f"{plan.per_round} runs",
        [
            "",
            "runs/round",
            "p50 ms",
            "p99 ms",
            "agent CPU ms/run",
            "added ms/run",
            "added CPU ms/run",
            "p50 ratio",
            "Redis commands/run",
        ],
    )
    base = figures["none"]
    base_pid = _pid(modes, "none")
    base_cpu = base.cpu_per_request_of(base_pid)
    targets: list[Target] = []
    result: dict[str, Any] = {"modes": {}}
    for mode in modes:
        arm = figures[mode.key]
        cpu = arm.cpu_per_request_of(_pid(modes, mode.key))
        added, added_cpu = arm.p50 - base.p50, cpu - base_cpu
        is_base = mode.key == "none"
        commands: dict[str, float] = figures.get(f"{mode.key}:commands", {})
        table.add(
            mode.label,
            f"{arm.per_round:.0f}",
            ms(arm.p50),
            ms(arm.p99),
            ms(cpu),
            "" if is_base else ms(added),
            "" if is_base else ms(added_cpu),
            "1.00" if is_base else f"{arm.p50 / base.p50:.3f}",
            " + ".join(f"{count:.2f} {name}" for name, count in commands.items()) if commands else "",
        )
        result["modes"][mode.key] = {
            "p50_ms": arm.p50 * 1000,
            "p99_ms": arm.p99 * 1000,
            "agent_cpu_ms_per_run": cpu * 1000,
            "added_ms_per_run": added * 1000,
            "added_agent_cpu_ms_per_run": added_cpu * 1000,
            "p50_ratio": arm.p50 / base.p50,
            "redis_commands_per_run": commands,
        }
        if mode.key == "tenancy-base":
            tenancy = figures["tenancy"]
            cpu_head = tenancy.cpu_per_request_of(_pid(modes, "tenancy")) - base_cpu
            table.notes.append(
                f"tenancy against its base ({mode.label}): added p50 {ms(tenancy.p50 - base.p50)} against "
                f"{ms(added)} ms ({(tenancy.p50 - base.p50) / added:.2f}x), added CPU {ms(cpu_head)} against "
                f"{ms(added_cpu)} ms ({cpu_head / added_cpu:.2f}x)"
                if added > 0 and added_cpu > 0
                else f"tenancy against its base ({mode.label}): its base adds nothing measurable here"
            )
        if mode.key == "tenancy":
            targets.append(
                Target(
                    "limits: caller key, Redis slot and monthly budgets, added p50 per run",
                    f"<= {ADDED_PER_RUN_TARGET * 1000:g} ms",
                    f"{ms(added)} ms (agent CPU {ms(added_cpu)} ms/run; a run {arm.p50 / base.p50:.3f}x the run "
                    "without them)",
                    added <= ADDED_PER_RUN_TARGET,
                )
            )
        if mode.key == "redis":
            targets.append(
                Target(
                    "limits: Redis run slot, added p50 per run",
                    f"<= {ADDED_PER_RUN_TARGET * 1000:g} ms",
                    f"{ms(added)} ms (agent CPU {ms(added_cpu)} ms/run; a run {arm.p50 / base.p50:.3f}x the run "
                    "without a cap)",
                    added <= ADDED_PER_RUN_TARGET,
                )
            )
    if skipped is not None:
        table.notes.append(f"Redis left out: {skipped} (set {REDIS_URL_VARIABLE})")
        result["redis_skipped"] = skipped
    table.notes.append(
        "added = this mode - no cap, per run (p50 of runs, median of round p50s); CPU: agent-service's own, from "
        "/proc (Redis's own CPU not included); Redis commands: sent with keys of this run's prefix, per run, over "
        f"{_COUNTED_RUNS} runs apart from the timed rounds (MONITOR; each one round trip); tenancy adds the caller "
        "key's check, the month's budgets checked at admission and added to after each LLM call"
    )
    return Section("limits", tables=[table], targets=targets, figures=result)


def _pid(modes: list[_Mode], key: str) -> int:
    (service,) = [mode.service for mode in modes if mode.key == key]
    assert service is not None
    return service.pid
