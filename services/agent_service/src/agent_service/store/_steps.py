"""A step's write, the store's hottest path, in each driver's own terms.

Every assistant turn and every tool result of every run is one step. Through SQLAlchemy a step cost five
statements and about 0.4 ms of CPU on SQLite, and on PostgreSQL five round trips and about 0.8 ms of CPU
(``python -m bench.run_store``; the statements' building, caching and the asyncio adaptation, not the
database, took most of it). Here a step is, on PostgreSQL, one statement (its parts are CTEs, so it is
one round trip and atomic without BEGIN and COMMIT), prepared once per connection by asyncpg; on SQLite,
three statements (one more each with usage log rows and with audit rows) on the standard driver in one
``BEGIN IMMEDIATE`` transaction.
A new run without a conversation is, on PostgreSQL, one statement too (``postgres_new_run``: the run's row and its
input messages): through SQLAlchemy it was a transaction of four round trips and about 0.8 ms of CPU.
Everything else the store does goes through SQLAlchemy Core (``RunStore``): this module holds only what the
benchmark justified.

A step's LLM calls (``Step.calls``) become rows of the usage log, and its tool calls (``Step.tool_calls``) rows of the
audit log (``tool_calls``), in the same statement or transaction, each with the tenant and end user (and, for the usage
log, the caller) read from the run's own row (so a run taken over after a crash logs its calls as the same tenant's
and user's, with nothing to carry over).

An event already stored (the same run and sequence number: a write retried after it committed unseen) is left as
it is, and so is a call already logged (the same run, round and attempt: ``schema.usage_log``'s unique key; for a tool
call, the same run, round, call index and attempt: ``schema.tool_calls``'). The
values are written as SQLAlchemy's types write them (``schema``): JSON text for messages, UTC times (naive ISO text
on SQLite), so that the rest of the store reads them as its own.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store.records import NewRun, Step
from suite_common.sql import compact_json, sqlite_time

__all__ = ["audit_rows", "postgres_new_run", "postgres_step", "sqlite_step", "step_rows", "usage_rows"]

UsageRow = tuple[int | None, int, str, str | None, int, int, float | None, bool, str | None, float | None]
AuditRow = tuple[int, int, int, str, str | None, str, str, float, datetime]


def usage_rows(step: Step) -> list[UsageRow]:
    """The step's LLM calls as ``(iteration, attempt, model, provider, input tokens, output tokens, cost,
    estimated, answered model, latency ms)``; a call cut off before it was answered has no provider."""
    return [
        (
            call.iteration,
            call.attempt,
            call.model,
            call.provider or None,
            call.usage.input_tokens,
            call.usage.output_tokens,
            call.usage.cost_usd,
            call.estimated,
            call.answered_model,
            call.latency_ms,
        )
        for call in step.calls
    ]


def audit_rows(step: Step) -> list[AuditRow]:
    """The step's tool calls as ``(iteration, call index, attempt, tool call id, server, tool, status, latency ms,
    started at)``."""
    return [
        (
            call.iteration,
            call.call_index,
            call.attempt,
            call.tool_call_id,
            call.server,
            call.tool,
            call.status,
            call.latency_ms,
            call.started_at,
        )
        for call in step.tool_calls
    ]


def step_rows(step: Step) -> tuple[list[tuple[int, str]], list[tuple[int, str, str]]]:
    """The step's messages as ``(position, JSON text)`` and its events as ``(seq, type, data)``."""
    messages = [
        (position, message.model_dump_json(by_alias=True, exclude_none=True)) for position, message in step.messages
    ]
    events = [(event.seq, event.type, event.data) for event in step.events]
    return messages, events


def _counters(step: Step) -> list[Any]:
    usage, error = step.usage, step.error
    return [
        step.status,
        step.iterations,
        usage.input_tokens if usage is not None else None,
        usage.output_tokens if usage is not None else None,
        step.finish_reason,
        error.code if error is not None else None,
        error.message if error is not None else None,
        max(event.seq for event in step.events) if step.events else None,
        usage.cost_usd if usage is not None else None,
        step.budget,
    ]


def _output_json(step: Step) -> str | None:
    """``runs.output`` as JSON text; ``None``: left as it is."""
    return None if step.output is None else json.dumps(step.output)


_SET_COUNTERS = (
    "status = COALESCE({0}, status), iterations = COALESCE({1}, iterations), "
    "input_tokens = COALESCE({2}, input_tokens), output_tokens = COALESCE({3}, output_tokens), "
    "finish_reason = COALESCE({4}, finish_reason), error_code = COALESCE({5}, error_code), "
    "error_message = COALESCE({6}, error_message), "
    "last_seq = CASE WHEN {7} > last_seq THEN {7} ELSE last_seq END, "
    "cost_usd = COALESCE({8}, cost_usd), budget = COALESCE({9}, budget)"
)
_ACTIVE = "status IN ('processing', 'tool_loop')"
_RELEASE = ", lease_owner = NULL, lease_expires_at = NULL"
# A call already logged is skipped, by its key alone: without a target every unique index of the table is checked
# first, its serial primary key too (which never conflicts), one index probe more per row.
_USAGE_LOGGED = "ON CONFLICT (run_id, iteration, attempt) DO NOTHING"
_AUDITED = "ON CONFLICT (run_id, iteration, call_index, attempt) DO NOTHING"


# --- PostgreSQL (asyncpg) --------------------------------------------------------------------------------------


def _postgres_sql(*, owned: bool, release: bool, logged: bool, audited: bool) -> str:
    counters = _SET_COUNTERS.format(
        "$3::text",
        "$4::int",
        "$5::int",
        "$6::int",
        "$7::text",
        "$8::text",
        "$9::text",
        "$10::int",
        "$11::float8",
        "$12::text",
    )
    # $13-$17: the messages' and events' arrays; then the usage log's, the audit log's, and the owner, each when used.
    parameters = iter(range(18, 100))

    def arrays(*types: str) -> str:
        return ", ".join(f"${next(parameters)}::{kind}[]" for kind in types)

    # A step without LLM calls (a tool result, the run's end after a tool round) has no usage part at all, and one
    # without tool calls (an assistant turn) no audit part.
    usage = (
        ", usage AS (INSERT INTO usage_log (tenant, user_id, caller, run_id, iteration, attempt, model, provider, "
        "input_tokens, output_tokens, cost_usd, estimated, answered_model, latency_ms, created_at) "
        f"SELECT COALESCE(guard.tenant, '{DEFAULT_TENANT}'), guard.user_id, guard.caller, guard.run_id, u.iteration, "
        "u.attempt, u.model, u.provider, u.input_tokens, u.output_tokens, u.cost_usd, u.estimated, u.answered_model, "
        "u.latency_ms, $2 FROM guard, "
        f"unnest({arrays('int', 'int', 'text', 'text', 'int', 'int', 'float8', 'bool', 'text', 'float8')}) "
        "AS u(iteration, attempt, model, provider, input_tokens, output_tokens, cost_usd, estimated, answered_model, "
        f"latency_ms) {_USAGE_LOGGED})"
        if logged
        else ""
    )
    audit = (
        ", audit AS (INSERT INTO tool_calls (tenant, user_id, run_id, iteration, call_index, attempt, tool_call_id, "
        f"server, tool, status, latency_ms, created_at) SELECT COALESCE(guard.tenant, '{DEFAULT_TENANT}'), "
        "guard.user_id, guard.run_id, a.iteration, a.call_index, a.attempt, a.tool_call_id, a.server, a.tool, "
        "a.status, a.latency_ms, a.created_at FROM guard, "
        f"unnest({arrays('int', 'int', 'int', 'text', 'text', 'text', 'text', 'float8', 'timestamptz')}) "
        "AS a(iteration, call_index, attempt, tool_call_id, server, tool, status, latency_ms, created_at) "
        f"{_AUDITED})"
        if audited
        else ""
    )
    output = f"${next(parameters)}"
    owner = f"${next(parameters)}"
    guard = (
        f"UPDATE runs SET updated_at = $2, {counters}, output = COALESCE({output}::json, output)"
        f"{_RELEASE if release else ''} "
        f"WHERE run_id = $1 AND {_ACTIVE}{f' AND lease_owner = {owner}' if owned else ''} "
        f"RETURNING run_id, conversation_id, tenant{', user_id, caller' if logged or audited else ''}"
    )
    # A conversation is (tenant, conversation_id): another tenant's conversation of the same id is left alone.
    conversation = (
        ", conversation AS (UPDATE conversations SET updated_at = $2 FROM guard "
        "WHERE conversations.conversation_id = guard.conversation_id AND conversations.tenant = guard.tenant)"
        if release
        else ""
    )
    return (
        f"WITH guard AS ({guard}), "
        "messages AS (INSERT INTO run_messages (run_id, position, message) "
        "SELECT guard.run_id, m.position, m.message::json "
        "FROM guard, unnest($13::int[], $14::text[]) AS m(position, message) "
        "ON CONFLICT (run_id, position) DO UPDATE SET message = excluded.message), "
        "events AS (INSERT INTO run_events (run_id, seq, type, data) "
        "SELECT guard.run_id, e.seq, e.type, e.data FROM guard, "
        "unnest($15::int[], $16::text[], $17::text[]) AS e(seq, type, data) ON CONFLICT DO NOTHING)"
        f"{usage}{audit}{conversation} "
        "SELECT count(*) FROM guard"
    )


_POSTGRES_SQL = {
    (owned, release, logged, audited): _postgres_sql(owned=owned, release=release, logged=logged, audited=audited)
    for owned in (True, False)
    for release in (True, False)
    for logged in (True, False)
    for audited in (True, False)
}


async def postgres_step(connection: Any, run_id: str, step: Step, *, owner: str | None, release: bool) -> bool:
    """Write ``step`` on an asyncpg connection; ``False`` (nothing written) when the guard refused it."""
    messages, events = step_rows(step)
    arguments: list[Any] = [run_id, datetime.now(UTC), *_counters(step)]
    arguments += [[position for position, _ in messages], [text for _, text in messages]]
    arguments += [[seq for seq, _, _ in events], [kind for _, kind, _ in events], [data for _, _, data in events]]
    usage, audit = usage_rows(step), audit_rows(step)
    arguments += [list(column) for column in zip(*usage, strict=True)]
    arguments += [list(column) for column in zip(*audit, strict=True)]
    arguments.append(_output_json(step))
    if owner is not None:
        arguments.append(owner)
    sql = _POSTGRES_SQL[owner is not None, release, bool(usage), bool(audit)]
    written: int = await connection.fetchval(sql, *arguments)
    return written == 1


_POSTGRES_NEW_RUN = (
    "WITH run AS (INSERT INTO runs (run_id, conversation_id, caller, tenant, user_id, user_role, model, status, "
    "iterations, input_tokens, output_tokens, plan, created_at, updated_at, lease_owner, lease_expires_at, resumes, "
    "cancel_requested, last_seq) VALUES ($1, NULL, $2, $3, $4, $5, $6, 'processing', 0, 0, 0, $7::json, $8, $8, $9, "
    "$10, 0, false, 0) RETURNING run_id) "
    "INSERT INTO run_messages (run_id, position, message) "
    "SELECT run.run_id, m.position, m.message::json FROM run, unnest($11::int[], $12::text[]) AS m(position, message)"
)


async def postgres_new_run(connection: Any, run: NewRun, *, owner: str, lease_seconds: float) -> None:
    """Store ``run`` (without a conversation: that takes, checks and reads its conversation, through SQLAlchemy) on
    an asyncpg connection, with its input messages: one statement, so one round trip and atomic. A run id stored
    already fails it (the table's unique key), as SQLAlchemy's insert does."""
    assert run.conversation_id is None
    now = datetime.now(UTC)
    messages = [message.model_dump_json(by_alias=True, exclude_none=True) for message in run.input_messages]
    await connection.execute(
        _POSTGRES_NEW_RUN,
        run.run_id,
        run.caller,
        run.tenant,
        run.user,
        run.user_role,
        run.model,
        compact_json(run.plan),
        now,
        owner,
        now + timedelta(seconds=lease_seconds),
        list(range(len(messages))),
        messages,
    )


# --- SQLite (the standard library's driver) -------------------------------------------------------------------


def _sqlite_sql(*, owned: bool, release: bool) -> str:
    counters = _SET_COUNTERS.format(*(f":c{index}" for index in range(10)))
    return (
        f"UPDATE runs SET updated_at = :now, {counters}, output = COALESCE(:output, output)"
        f"{_RELEASE if release else ''} "
        f"WHERE run_id = :run_id AND {_ACTIVE}{' AND lease_owner = :owner' if owned else ''}"
    )


_SQLITE_SQL = {
    (owned, release): _sqlite_sql(owned=owned, release=release) for owned in (True, False) for release in (True, False)
}
_SQLITE_MESSAGES = (
    "INSERT INTO run_messages (run_id, position, message) VALUES (?, ?, ?) "
    "ON CONFLICT (run_id, position) DO UPDATE SET message = excluded.message"
)
_SQLITE_EVENTS = "INSERT INTO run_events (run_id, seq, type, data) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
_SQLITE_USAGE = (
    "INSERT INTO usage_log (tenant, user_id, caller, run_id, iteration, attempt, model, provider, input_tokens, "
    "output_tokens, cost_usd, estimated, answered_model, latency_ms, created_at) "
    f"SELECT COALESCE(tenant, '{DEFAULT_TENANT}'), user_id, caller, run_id, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
    f"FROM runs WHERE run_id = ? {_USAGE_LOGGED}"
)
_SQLITE_AUDIT = (
    "INSERT INTO tool_calls (tenant, user_id, run_id, iteration, call_index, attempt, tool_call_id, server, tool, "
    f"status, latency_ms, created_at) SELECT COALESCE(tenant, '{DEFAULT_TENANT}'), user_id, run_id, ?, ?, ?, ?, ?, ?, "
    f"?, ?, ? FROM runs WHERE run_id = ? {_AUDITED}"
)
_SQLITE_CONVERSATION = (
    "UPDATE conversations SET updated_at = ? "
    "WHERE (tenant, conversation_id) = (SELECT tenant, conversation_id FROM runs WHERE run_id = ?)"
)


def sqlite_step(connection: sqlite3.Connection, run_id: str, step: Step, *, owner: str | None, release: bool) -> bool:
    """Write ``step`` in one write transaction on a sqlite3 connection in autocommit mode (the store's); ``False``
    (nothing written) when the guard refused it."""
    messages, events = step_rows(step)
    now = sqlite_time(datetime.now(UTC))
    parameters: dict[str, Any] = {f"c{index}": value for index, value in enumerate(_counters(step))}
    parameters.update(run_id=run_id, now=now, output=_output_json(step))
    if owner is not None:
        parameters["owner"] = owner
    cursor = connection.cursor()
    cursor.execute("BEGIN IMMEDIATE")
    try:
        if cursor.execute(_SQLITE_SQL[owner is not None, release], parameters).rowcount != 1:
            cursor.execute("ROLLBACK")
            return False
        if messages:
            cursor.executemany(_SQLITE_MESSAGES, [(run_id, position, text) for position, text in messages])
        if events:
            cursor.executemany(_SQLITE_EVENTS, [(run_id, seq, kind, data) for seq, kind, data in events])
        if step.calls:
            cursor.executemany(_SQLITE_USAGE, [(*row, now, run_id) for row in usage_rows(step)])
        if step.tool_calls:
            cursor.executemany(_SQLITE_AUDIT, [(*row[:-1], sqlite_time(row[-1]), run_id) for row in audit_rows(step)])
        if release:
            cursor.execute(_SQLITE_CONVERSATION, (now, run_id))
        cursor.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            cursor.execute("ROLLBACK")
        raise
    finally:
        cursor.close()
    return True
