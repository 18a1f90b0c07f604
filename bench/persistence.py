"""6. agent-service's run store: what storing a run costs per round, in SQLite and PostgreSQL, against not storing.

Three agent-services, alike but for ``AGENT_DATABASE_URL``, run side by side on the system-under-test
core behind the suite's completion-service and mcp-client-service: ``""`` (runs not stored, the
in-memory path), SQLite in a file of a temporary folder, and PostgreSQL in a database created for this
benchmark on ``BENCH_POSTGRES_URL``'s server (default ``postgresql://postgres@127.0.0.1:5432/postgres``:
user postgres, trust authentication) and dropped at the end. Each gets the same run (``rounds-K``: K
rounds of one tool call each, then the answer; ``stream: false``), in rounds interleaved A, B, C then
C, B, A, so that the machine's drift hits every mode alike.

Per mode: the run's p50 and p99, agent-service's CPU per run (its SQLite thread included), what it adds
per round against the in-memory path (latency and CPU) and the ratios, and how much the database grew
per run: a database that did not grow means this agent-service stores no runs, and the three modes
measured the same code. For PostgreSQL, the CPU of the server's backends serving the benchmark's
database too (when the server runs on this machine). PostgreSQL out of reach: that mode is left out,
with a note saying why.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bench.agent import MESSAGES
from bench.httpload import HttpConnection
from bench.measure import ArmFigures, Rounds, interleave
from bench.probes import HttpCall, http_call
from bench.processes import Service
from bench.report import Section, Table, Target, ms
from bench.suite import STDIO_TOOL, Suite, start_agent

__all__ = [
    "ADDED_PER_ROUND_TARGETS",
    "POSTGRES_URL_VARIABLE",
    "ScratchDatabase",
    "run_persistence",
    "scratch_database",
]

POSTGRES_URL_VARIABLE = "BENCH_POSTGRES_URL"
"""A PostgreSQL URL whose user may create and drop databases; its own database is only connected to."""
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
ADDED_PER_ROUND_TARGETS = {"sqlite": 0.001, "postgres": 0.002}
"""What storing may add to a run, per round (seconds of p50 latency), against not storing."""
_CONNECT_TIMEOUT_SECONDS = 5.0

SizeReader = Callable[[], Awaitable[int]]


@dataclass
class _Mode:
    key: str
    label: str
    database_url: str
    size: SizeReader
    """Bytes the mode's database takes now (0 for none)."""
    service: Service | None = None
    server_pids: list[int] = field(default_factory=list)
    """PostgreSQL backends serving this mode's database, when they run on this machine."""


async def _no_database() -> int:
    return 0


def _sqlite_size(path: Path) -> SizeReader:
    async def size() -> int:
        # The write-ahead log holds what has not been checkpointed into the file yet.
        return sum(part.stat().st_size for part in (path, path.with_name(path.name + "-wal")) if part.exists())

    return size


@dataclass
class ScratchDatabase:
    url: str
    admin: asyncpg.Connection
    name: str

    async def size(self) -> int:
        value = await self.admin.fetchval("SELECT pg_database_size($1)", self.name)
        return int(value)

    async def local_backends(self) -> list[int]:
        """The server processes connected to this database, if they are on this machine (their CPU is readable)."""
        rows = await self.admin.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", self.name)
        return [int(row["pid"]) for row in rows if _is_local_postgres(int(row["pid"]))]


def _is_local_postgres(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().startswith("postgres")
    except OSError:
        return False


@asynccontextmanager
async def scratch_database(admin_url: str) -> AsyncIterator[ScratchDatabase | str]:
    """A new, empty database on ``admin_url``'s server, dropped on exit; or why there is none."""
    try:
        admin = await asyncpg.connect(admin_url, timeout=_CONNECT_TIMEOUT_SECONDS)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
        yield f"PostgreSQL not reachable at {_without_password(admin_url)}: {type(error).__name__}: {error}"
        return
    name = f"loopsuite_bench_{secrets.token_hex(4)}"
    try:
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        except asyncpg.PostgresError as error:
            yield f"cannot create a database on {_without_password(admin_url)}: {error}"
            return
        try:
            yield ScratchDatabase(urlsplit(admin_url)._replace(path=f"/{name}").geturl(), admin, name)
        finally:
            # The agent-service that used it has stopped; anything left connected is cut off first.
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        await admin.close()


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()


def _run_call(service: Service, rounds: int) -> HttpCall:
    body = {"model": f"openai/rounds-{rounds}", "messages": MESSAGES, "tools": [STDIO_TOOL], "stream": False}
    return http_call(service, "POST", "/api/v1/agent/run", body, must_contain=f'"iterations":{rounds + 1}'.encode())


async def run_persistence(suite: Suite, plan: Rounds, *, rounds: int) -> Section:
    """The section ``make bench`` prints (``--only persistence``), with a target per database. The suite's own
    agent-service takes no part: three more are started, alike but for their database, and stopped at the end."""
    admin_url = os.environ.get(POSTGRES_URL_VARIABLE) or DEFAULT_POSTGRES_URL
    with tempfile.TemporaryDirectory(prefix="loopsuite-bench-") as folder:
        sqlite_file = Path(folder) / "agent.db"
        async with scratch_database(admin_url) as database:
            modes = [
                _Mode("memory", 'not stored (AGENT_DATABASE_URL="")', "", _no_database),
                _Mode("sqlite", "SQLite (a temporary file)", f"sqlite:///{sqlite_file}", _sqlite_size(sqlite_file)),
            ]
            skipped = database if isinstance(database, str) else None
            if isinstance(database, ScratchDatabase):
                modes.append(_Mode("postgres", "PostgreSQL (a new database)", database.url, database.size))
            with ExitStack() as stack:
                for mode in modes:
                    # Each arm's keep-alive connection waits while the others warm up: on a busy machine longer than
                    # the default 10 s a connection may idle before its request's head arrives.
                    env = {"AGENT_DATABASE_URL": mode.database_url, "AGENT_REQUEST_HEAD_TIMEOUT_SECONDS": "300"}
                    mode.service = start_agent(stack, suite, f"agent-service-{mode.key}", env)
                figures, growth = await _measure(modes, plan, rounds, database)
    return _section(modes, figures, growth, plan, rounds, skipped)


async def _measure(
    modes: list[_Mode], plan: Rounds, rounds: int, database: ScratchDatabase | str
) -> tuple[dict[str, ArmFigures], dict[str, int]]:
    services = {mode.key: mode.service for mode in modes if mode.service is not None}
    async with (
        HttpConnection("127.0.0.1", services["memory"].port) as memory,
        HttpConnection("127.0.0.1", services["sqlite"].port) as sqlite,
    ):
        connections = {"memory": memory, "sqlite": sqlite}
        async with _optional_connection(services.get("postgres")) as postgres:
            if postgres is not None:
                connections["postgres"] = postgres
            arms = {key: _run_call(services[key], rounds).probe(connection) for key, connection in connections.items()}
            # Warm up apart, so that the schema is in place and the connection pools are open before the
            # sizes and the server's backends are read.
            await interleave(arms, replace(plan, rounds=0))
            for mode in modes:
                if mode.key == "postgres" and not isinstance(database, str):
                    mode.server_pids = await database.local_backends()
            before = {mode.key: await mode.size() for mode in modes}
            figures = await interleave(
                arms,
                replace(plan, warmup=0),
                cpu_pids={mode.key: [services[mode.key].pid, *mode.server_pids] for mode in modes},
            )
            growth = {mode.key: await mode.size() - before[mode.key] for mode in modes}
    return figures, growth


@asynccontextmanager
async def _optional_connection(service: Service | None) -> AsyncIterator[HttpConnection | None]:
    if service is None:
        yield None
        return
    async with HttpConnection("127.0.0.1", service.port) as connection:
        yield connection


def _section(
    modes: list[_Mode],
    figures: dict[str, ArmFigures],
    growth: dict[str, int],
    plan: Rounds,
    rounds: int,
    skipped: str | None,
) -> Section:
    table = Table(
        f"6. agent-service's run store: the same run ({rounds} rounds, one tool call each, stream: false) through "
        f"three agent-services alike but for AGENT_DATABASE_URL; {plan.rounds} interleaved rounds x "
        f"{plan.per_round} runs",
        [
            "",
            "runs/round",
            "p50 ms",
            "p99 ms",
            "agent CPU ms/run",
            "added ms/round",
            "added CPU ms/round",
            "p50 ratio",
            "CPU ratio",
            "DB KiB/run",
        ],
    )
    base = figures["memory"]
    memory_pid = _pid(modes, "memory")
    base_cpu = base.cpu_per_request_of(memory_pid)
    targets: list[Target] = []
    result: dict[str, Any] = {"rounds": rounds, "modes": {}}
    for mode in modes:
        arm = figures[mode.key]
        cpu = arm.cpu_per_request_of(_pid(modes, mode.key))
        added = (arm.p50 - base.p50) / rounds
        added_cpu = (cpu - base_cpu) / rounds
        per_run = growth[mode.key] / len(arm.samples)
        is_base = mode.key == "memory"
        table.add(
            mode.label,
            f"{arm.per_round:.0f}",
            ms(arm.p50),
            ms(arm.p99),
            ms(cpu),
            "" if is_base else ms(added),
            "" if is_base else ms(added_cpu),
            "1.00" if is_base else f"{arm.p50 / base.p50:.2f}",
            "1.00" if is_base else f"{cpu / base_cpu:.2f}" if base_cpu else "",
            "" if is_base else f"{per_run / 1024:.1f}",
        )
        server_cpu = sum(arm.cpu_by_pid.get(pid, 0.0) for pid in mode.server_pids) / len(arm.samples)
        result["modes"][mode.key] = {
            "p50_ms": arm.p50 * 1000,
            "p99_ms": arm.p99 * 1000,
            "agent_cpu_ms_per_run": cpu * 1000,
            "added_ms_per_round": added * 1000,
            "added_agent_cpu_ms_per_round": added_cpu * 1000,
            "database_bytes_per_run": per_run,
            **({"server_cpu_ms_per_run": server_cpu * 1000} if mode.server_pids else {}),
        }
        if is_base:
            continue
        if mode.server_pids:
            table.notes.append(
                f"{mode.label}: the server's {len(mode.server_pids)} backends for the benchmark's database spent "
                f"{ms(server_cpu / rounds)} ms of CPU per round besides agent-service's"
            )
        if growth[mode.key] <= 0:
            table.notes.append(
                f"{mode.label}: the database did not grow, so this agent-service stores no runs: the modes ran the "
                "same code and their differences are the machine's noise"
            )
        goal = ADDED_PER_ROUND_TARGETS[mode.key]
        targets.append(
            Target(
                f"persistence: {mode.label.split(' ')[0]}, added p50 per round",
                f"<= {goal * 1000:g} ms",
                f"{ms(added)} ms (agent CPU {ms(added_cpu)} ms/round; a run {arm.p50 / base.p50:.2f}x the run not "
                "stored)",
                added <= goal,
            )
        )
    if skipped is not None:
        table.notes.append(f"PostgreSQL left out: {skipped} (set {POSTGRES_URL_VARIABLE})")
        result["postgres_skipped"] = skipped
    table.notes.append(
        "added = this mode - not stored, per round (p50 of runs, median of round p50s); CPU: agent-service's own, "
        "from /proc (its SQLite thread included); targets: <= "
        + ", ".join(f"{key} {goal * 1000:g} ms" for key, goal in ADDED_PER_ROUND_TARGETS.items())
        + " added per round"
    )
    table.notes.append("DB KiB/run: how much the database (SQLite: file and write-ahead log) grew per measured run")
    return Section("persistence", tables=[table], targets=targets, figures=result)


def _pid(modes: list[_Mode], key: str) -> int:
    (service,) = [mode.service for mode in modes if mode.key == key]
    assert service is not None
    return service.pid
