"""8. What users run: agent-service as production runs it against the bare loop, and optionally against LangGraph.

Two agent-services, started for this benchmark behind the suite's completion-service and mcp-client-service on the
system-under-test core, alike but for what production switches on:

- **bare**: runs not stored (``AGENT_DATABASE_URL=""``), no Redis, no callers file, no tool cache (the laptop's
  loop, what the agent benchmark measures);
- **production**: runs stored in PostgreSQL (a database of this run's own on ``BENCH_POSTGRES_URL``'s server, as
  ``bench/persistence.py`` makes and drops it), Redis tenancy (the run slot in Redis on ``BENCH_REDIS_URL``, keys
  under a prefix of this run's own, deleted at the end; the callers file of ``bench/limits.py``: a caller key whose
  tenant has a run token cap and tenant and user monthly budgets, none reached; each run sent with its key and an
  end user), and the tool-result cache on, in Redis (``AGENT_TOOL_CACHE_TTLS`` naming the echo server, a pepper).

Both get the same run: ``rounds-K-fresh`` (K rounds of one tool call each, then the answer; ``stream: false``),
each run's user message new, so that its tool calls are new too and the cache pays its lookup and its store
every call and never answers one (a cache that answered would skip the tool call: another run). Beside them, a
floor: the same LLM and tool calls made directly by this process (``bench/agent.py``'s direct arm), so that each
arm's latency can be given as added to the calls it makes. With ``--only peers``, one more arm: LangGraph's
prebuilt ReAct agent with the official PostgreSQL checkpointer (sync) in a process of its own on the
system-under-test core, on a database of its own, calling the same echo server over stdio with the same MCP SDK
(``bench/peers.py``, ``bench/peer_langgraph.py``). The arms run in interleaved rounds (A, B, C, D then D, C, B, A).

CPU per run: each arm's own processes from /proc, and the PostgreSQL backends serving its database (read from
``pg_stat_activity`` once the warm-up has opened its connections). Not counted: the fake LLM and the echo servers
(upstreams of every arm), this process, PostgreSQL's shared background processes and Redis (one server that others
may use too; its CPU during the production arm, less during the bare arm, is given as a note).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from bench.agent import MESSAGES, direct_probe
from bench.httpload import HttpConnection
from bench.limits import BENCH_KEY, DEFAULT_REDIS_URL, REDIS_URL_VARIABLE, TENANCY_CALLERS, delete_keys, redis_reachable
from bench.measure import ArmFigures, Probe, Rounds, interleave
from bench.peers import PeerProcess, missing_peers_venv, running_peer
from bench.persistence import DEFAULT_POSTGRES_URL, POSTGRES_URL_VARIABLE, ScratchDatabase, scratch_database
from bench.probes import http_call
from bench.processes import Service, cpu_seconds
from bench.profiling import profiling
from bench.report import Section, Table, Target, ms
from bench.suite import STDIO_TOOL, Suite, start_agent, stdio_echo

__all__ = [
    "PEER_CPU_TARGET",
    "PRODUCTION_CPU_TARGET",
    "ArmCost",
    "production_env",
    "production_targets",
    "run_production",
]

PRODUCTION_CPU_TARGET = 1.3
"""The production arm's CPU per run (the suite's, with PostgreSQL's) at most this many times the bare arm's."""
PEER_CPU_TARGET = 2.0
"""LangGraph with its checkpointer's CPU per run at least this many times the production arm's."""
PEER_LABEL = "LangGraph prebuilt agent + PostgresSaver (sync)"
TOOL_CACHE_TTLS = {"echo-stdio:*": 60}
"""The echo tool is not annotated read-only: the cache is on for it by name, as an operator names their tools."""
USER_HEADERS = {"Authorization": f"Bearer {BENCH_KEY}", "X-User-Id": "bench-user"}


def production_env(
    *, database_url: str, redis_url: str, key_prefix: str, callers_file: Path, pepper: str
) -> dict[str, str]:
    """agent-service's settings for the production arm, over the suite's own (``Suite.agent_env``)."""
    return {
        "AGENT_DATABASE_URL": database_url,
        "AGENT_REDIS_URL": redis_url,
        "AGENT_REDIS_KEY_PREFIX": key_prefix,
        "AGENT_MAX_CONCURRENT_RUNS_PER_TENANT": "16",
        "AGENT_CALLERS_FILE": str(callers_file),
        "AGENT_TOOL_CACHE_TTLS": json.dumps(TOOL_CACHE_TTLS),
        "AGENT_TOOL_CACHE_PEPPER": pepper,
    }


@dataclass(frozen=True)
class ArmCost:
    """What a run of an arm costs: its p50 (seconds) and its CPU per run, PostgreSQL's backends included."""

    p50: float
    cpu: float


def production_targets(bare: ArmCost, production: ArmCost, peer: ArmCost | None) -> list[Target]:
    """The issue's targets for the production arm, as the summary prints them; the peer's only when it ran."""
    ratio = production.cpu / bare.cpu
    targets = [
        Target(
            "production (PostgreSQL, Redis tenancy, tool cache): CPU per run incl. PostgreSQL, against bare",
            f"<= {PRODUCTION_CPU_TARGET:g}x",
            f"{ratio:.2f}x ({ms(production.cpu)} / {ms(bare.cpu)} ms; p50 {production.p50 / bare.p50:.2f}x)",
            ratio <= PRODUCTION_CPU_TARGET,
        )
    ]
    if peer is None:
        return targets
    cheaper = peer.cpu / production.cpu
    targets += [
        Target(
            f"production against {PEER_LABEL}: CPU per run incl. PostgreSQL",
            f">= {PEER_CPU_TARGET:g}x cheaper",
            f"{cheaper:.2f}x cheaper ({ms(production.cpu)} / {ms(peer.cpu)} ms)",
            cheaper >= PEER_CPU_TARGET,
        ),
        Target(
            f"production against {PEER_LABEL}: p50 of a run",
            "lower",
            f"{ms(production.p50)} / {ms(peer.p50)} ms ({production.p50 / peer.p50:.2f}x)",
            production.p50 < peer.p50,
        ),
    ]
    return targets


def fresh_user_texts() -> Callable[[], str]:
    """The bench's user message with a run number of its own each call: every run's tool calls are new."""
    numbers: Iterator[int] = itertools.count(1)
    text = MESSAGES[-1]["content"]
    return lambda: f"{text} (run {next(numbers)})"


def _fresh_runs(service: Service, connection: HttpConnection, rounds: int, headers: dict[str, str]) -> Probe:
    user_text = fresh_user_texts()
    must = f'"iterations":{rounds + 1}'.encode()

    async def probe() -> float | None:
        messages = [*MESSAGES[:-1], {"role": "user", "content": user_text()}]
        body = {"model": f"openai/rounds-{rounds}-fresh", "messages": messages, "tools": [STDIO_TOOL], "stream": False}
        call = http_call(service, "POST", "/api/v1/agent/run", body, headers=headers, must_contain=must)
        return await call.probe(connection)()

    return probe


@dataclass
class _Arm:
    key: str
    label: str
    own: list[int]
    """The arm's processes: agent-service (and the suite's two other services), or the peer's process."""
    database: ScratchDatabase | None = None
    """Where it stores its runs (or checkpoints), if anywhere."""
    backends: list[int] = field(default_factory=list)
    probe: Probe | None = None

    @property
    def pids(self) -> list[int]:
        return [*self.own, *self.backends]


async def _redis_server_pid(url: str) -> int | None:
    """The Redis server's pid if it runs on this machine (its CPU is readable), else None."""
    client = aioredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        pid = int((await client.info("server"))["process_id"])
    finally:
        await client.aclose()
    return pid if _process_name(pid).startswith("redis") else None


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return ""


def _tool_cache_counts(service: Service) -> dict[str, float]:
    """agent-service's ``agent_tool_cache_total`` by outcome, from its /metrics."""
    text = httpx.get(f"{service.url}/metrics", timeout=5).text
    pattern = re.compile(r'^agent_tool_cache_total\{[^}]*outcome="(\w+)"[^}]*\} ([0-9.e+]+)$', re.MULTILINE)
    return {outcome: float(value) for outcome, value in pattern.findall(text)}


async def run_production(
    suite: Suite, plan: Rounds, *, rounds: int, with_peer: bool, profiles: Path | None = None
) -> Section:
    """The section ``make bench`` prints (``--only production``; ``--only peers`` adds the LangGraph arm).
    ``profiles``: record the production arm's agent-service with py-spy into that folder (``--profile``)."""
    admin_url = os.environ.get(POSTGRES_URL_VARIABLE) or DEFAULT_POSTGRES_URL
    redis_url = os.environ.get(REDIS_URL_VARIABLE) or DEFAULT_REDIS_URL
    peer_missing = missing_peers_venv() if with_peer else None
    unreachable = await redis_reachable(redis_url)
    if unreachable is not None:
        return _skipped(f"{unreachable} (set {REDIS_URL_VARIABLE})")
    prefix = f"bench-{secrets.token_hex(4)}:"
    callers = suite.logs / "bench-production-callers.toml"
    callers.write_text(TENANCY_CALLERS)
    try:
        async with AsyncExitStack() as stack:
            database = await stack.enter_async_context(scratch_database(admin_url))
            if isinstance(database, str):
                return _skipped(f"{database} (set {POSTGRES_URL_VARIABLE})")
            env = production_env(
                database_url=database.url,
                redis_url=redis_url,
                key_prefix=prefix,
                callers_file=callers,
                pepper=secrets.token_hex(32),
            )
            services = ExitStack()
            stack.callback(services.close)
            bare = start_agent(services, suite, "agent-service-bare", {"AGENT_DATABASE_URL": "", "AGENT_REDIS_URL": ""})
            production = start_agent(services, suite, "agent-service-production", env)
            peer: PeerProcess | None = None
            peer_database: ScratchDatabase | None = None
            if with_peer and peer_missing is None:
                echo = stdio_echo()
                made = await stack.enter_async_context(scratch_database(admin_url))
                assert not isinstance(made, str)  # the same server has just answered
                peer_database = made
                peer = await stack.enter_async_context(
                    running_peer(
                        cores=suite.cores,
                        logs=suite.logs,
                        llm_url=f"{suite.llm.url}/v1",
                        model=f"rounds-{rounds}-fresh",
                        rounds=rounds,
                        database_url=peer_database.url,
                        system=MESSAGES[0]["content"],
                        tool=STDIO_TOOL,
                        server=[echo.command, *echo.args],  # as the suite's mcp-client-service starts it
                    )
                )
            # Connections opened once every process is up: one left idle while another starts would time out
            # (AGENT_REQUEST_HEAD_TIMEOUT_SECONDS) on a busy machine.
            connect = stack.enter_async_context
            upstream_services = [suite.completion.pid, suite.mcp.pid]
            arms = [
                _Arm(
                    "direct",
                    "direct: the run's LLM and tool calls made by this process",
                    [],
                    probe=direct_probe(
                        suite.llm,
                        await connect(HttpConnection("127.0.0.1", suite.llm.port)),
                        suite.direct_stdio,
                        rounds,
                    ),
                ),
                _Arm(
                    "bare",
                    "bare: not stored, no tenancy, no tool cache",
                    [bare.pid, *upstream_services],
                    probe=_fresh_runs(bare, await connect(HttpConnection("127.0.0.1", bare.port)), rounds, {}),
                ),
                _Arm(
                    "production",
                    "production: PostgreSQL, Redis tenancy and budgets, tool cache",
                    [production.pid, *upstream_services],
                    database=database,
                    probe=_fresh_runs(
                        production, await connect(HttpConnection("127.0.0.1", production.port)), rounds, USER_HEADERS
                    ),
                ),
            ]
            if peer is not None:
                arms.append(
                    _Arm("peer", PEER_LABEL, [peer.pid], database=peer_database, probe=peer.probe(fresh_user_texts()))
                )
            with profiling([production], profiles or suite.logs, "production", enabled=profiles is not None):
                figures, checks = await _measure(arms, plan, redis_url, production)
    finally:
        await delete_keys(redis_url, prefix)
    return _section(arms, figures, checks, plan, rounds, peer_missing, peer.versions if peer else {})


@dataclass
class _Checks:
    """What shows that each arm did what it says: its database grew, the cache missed and stored, and so on."""

    growth: dict[str, int]
    connections: dict[str, int]
    """Connections the arm opened to its database during the rounds (``pg_stat_database.sessions``), each a backend's
    start; the CPU of those still open at the end is counted (``late_backends``), of the others not."""
    late_backends: dict[str, int]
    """Backends that connected during the rounds and were still there at their end (their CPU counted)."""
    cache: dict[str, float]
    redis_pid: int | None


async def _measure(
    arms: list[_Arm], plan: Rounds, redis_url: str, production: Service
) -> tuple[dict[str, ArmFigures], _Checks]:
    probes = {arm.key: arm.probe for arm in arms if arm.probe is not None}
    # Warm up apart: schemas in place, pools open, scripts loaded, before the backends and the sizes are read.
    await interleave(probes, replace(plan, rounds=0))
    stored = {arm.key: arm.database for arm in arms if arm.database is not None}
    for arm in arms:
        if arm.database is not None:
            arm.backends = await arm.database.local_backends()
    sizes = {key: await database.size() for key, database in stored.items()}
    sessions = {key: await _sessions(database) for key, database in stored.items()}
    cache_before = _tool_cache_counts(production)
    redis_pid = await _redis_server_pid(redis_url)
    redis = [redis_pid] if redis_pid is not None else []
    figures = await interleave(
        probes,
        replace(plan, warmup=0),
        cpu_pids={arm.key: [*arm.pids, *(redis if arm.key in ("bare", "production") else [])] for arm in arms},
    )
    cache_after = _tool_cache_counts(production)
    late: dict[str, int] = {}
    for arm in arms:
        if arm.database is None:
            continue
        # A backend that connected during the rounds served this arm's database only, and only then: all its CPU
        # so far is the arm's. One that came and went in the rounds cannot be read any more (counted below).
        new = [pid for pid in await arm.database.local_backends() if pid not in arm.backends]
        for pid in new:
            figures[arm.key].cpu_by_pid[pid] = cpu_seconds([pid])
        arm.backends += new
        late[arm.key] = len(new)
    checks = _Checks(
        growth={key: await database.size() - sizes[key] for key, database in stored.items()},
        connections={key: await _sessions(database) - sessions[key] for key, database in stored.items()},
        late_backends=late,
        cache={outcome: cache_after.get(outcome, 0.0) - cache_before.get(outcome, 0.0) for outcome in cache_after},
        redis_pid=redis_pid,
    )
    return figures, checks


async def _sessions(database: ScratchDatabase) -> int:
    """Connections ever opened to ``database`` (PostgreSQL's statistics, flushed within seconds)."""
    value = await database.admin.fetchval("SELECT sessions FROM pg_stat_database WHERE datname = $1", database.name)
    return int(value or 0)


def _skipped(why: str) -> Section:
    table = Table("8. What users run: the production arm against bare", ["", "p50 ms"])
    table.notes.append(f"left out: {why}")
    return Section("production", tables=[table], figures={"skipped": why})


def _per_run(arm: ArmFigures, pids: Sequence[int]) -> float:
    return sum(arm.cpu_by_pid.get(pid, 0.0) for pid in pids) / len(arm.samples)


def _section(
    arms: list[_Arm],
    figures: dict[str, ArmFigures],
    checks: _Checks,
    plan: Rounds,
    rounds: int,
    peer_missing: str | None,
    versions: dict[str, str],
) -> Section:
    table = Table(
        f"8. What users run: the same run ({rounds} rounds, one tool call each, stream: false, every run's calls "
        f"new) through agent-service bare and as production runs it{', and LangGraph' if 'peer' in figures else ''}; "
        f"{plan.rounds} interleaved rounds x {plan.per_round} runs",
        [
            "",
            "runs/round",
            "p50 ms",
            "p99 ms",
            "added p50 ms",
            "own CPU ms/run",
            "PostgreSQL CPU ms/run",
            "CPU ms/run",
            "p50 ratio",
            "CPU ratio",
        ],
    )
    direct = figures["direct"]
    costs: dict[str, ArmCost] = {}
    result: dict[str, Any] = {"rounds": rounds, "arms": {}}
    for arm in arms:
        measured = figures[arm.key]
        if arm.key == "direct":
            table.add(arm.label, f"{measured.per_round:.0f}", ms(measured.p50), ms(measured.p99), *[""] * 6)
            result["arms"]["direct"] = {"p50_ms": measured.p50 * 1000, "p99_ms": measured.p99 * 1000}
            continue
        own = _per_run(measured, arm.own)
        database = _per_run(measured, arm.backends)
        costs[arm.key] = ArmCost(measured.p50, own + database)
        base = costs.get("bare")
        assert base is not None  # bare comes before the arms compared with it
        table.add(
            arm.label,
            f"{measured.per_round:.0f}",
            ms(measured.p50),
            ms(measured.p99),
            ms(measured.p50 - direct.p50),
            ms(own),
            ms(database) if arm.backends else "",
            ms(own + database),
            f"{measured.p50 / base.p50:.2f}",
            f"{(own + database) / base.cpu:.2f}",
        )
        result["arms"][arm.key] = {
            "p50_ms": measured.p50 * 1000,
            "p99_ms": measured.p99 * 1000,
            "added_p50_ms": (measured.p50 - direct.p50) * 1000,
            "cpu_ms_per_run": (own + database) * 1000,
            "own_cpu_ms_per_run": own * 1000,
            "postgres_cpu_ms_per_run": database * 1000,
            "cpu_ms_per_run_by_pid": {str(pid): _per_run(measured, [pid]) * 1000 for pid in arm.pids},
        }
    targets = production_targets(costs["bare"], costs["production"], costs.get("peer"))
    _notes(table, arms, figures, checks, rounds, peer_missing, versions)
    result["checks"] = {
        "database_bytes_per_run": {},
        "tool_cache": checks.cache,
        "connections": checks.connections,
        "late_backends": checks.late_backends,
    }
    for key, grown in checks.growth.items():
        result["checks"]["database_bytes_per_run"][key] = grown / len(figures[key].samples)
    if peer_missing is not None:
        result["peer_skipped"] = peer_missing
    if versions:
        result["peer_versions"] = versions
    return Section("production", tables=[table], targets=targets, figures=result)


def _notes(
    table: Table,
    arms: list[_Arm],
    figures: dict[str, ArmFigures],
    checks: _Checks,
    rounds: int,
    peer_missing: str | None,
    versions: dict[str, str],
) -> None:
    by_key = {arm.key: arm for arm in arms}
    for key in ("bare", "production"):
        agent, completion, mcp = by_key[key].own
        measured = figures[key]
        table.notes.append(
            f"{key}, CPU per run: agent-service {ms(_per_run(measured, [agent]))}, completion-service "
            f"{ms(_per_run(measured, [completion]))}, mcp-client-service {ms(_per_run(measured, [mcp]))} ms"
        )
    if checks.redis_pid is not None:
        during = {key: _per_run(figures[key], [checks.redis_pid]) for key in ("bare", "production")}
        table.notes.append(
            f"Redis server's CPU per run, not counted above (others may use it): {ms(during['production'])} ms "
            f"during the production arm, {ms(during['bare'])} ms during the bare arm (which uses none)"
        )
    for key, grown in checks.growth.items():
        samples = len(figures[key].samples)
        opened, still = checks.connections.get(key, 0), checks.late_backends.get(key, 0)
        gone = max(0, opened - still)
        table.notes.append(
            f"{key}: its database grew {grown / samples / 1024:.1f} KiB per run; {len(by_key[key].backends)} "
            f"PostgreSQL backends counted; {opened} connections opened during the rounds"
            + (f", {gone} of them closed before their end (their backends' CPU not counted)" if gone else "")
        )
        if grown <= 0:
            table.notes.append(f"{key}: its database did not grow, so it stored nothing: not a durable run")
    cache = ", ".join(f"{outcome} {count:.0f}" for outcome, count in sorted(checks.cache.items()) if count)
    table.notes.append(
        f"tool cache of the production arm during the rounds: {cache or 'no lookups'} (each of the "
        f"{rounds} calls of a run new: a lookup that misses and a store)"
    )
    if "peer" in figures:
        table.notes.append(
            "peer: "
            + ", ".join(f"{package} {version}" for package, version in versions.items())
            + "; its CPU: its process (ChatOpenAI's client, the graph, the checkpointer, the MCP client) and its "
            "PostgreSQL backend; its p50 includes a line each way over a pipe to this process (about 0.05 ms)"
        )
    elif peer_missing is not None:
        table.notes.append(f"peer left out: {peer_missing}")
    table.notes.append(
        "added = p50 - the direct floor's p50; CPU ms/run: the arm's own processes (agent-service + completion-service "
        "+ mcp-client-service, or the peer's process) + its PostgreSQL backends, from /proc; ratios against bare"
    )
