"""The run store's tables, as SQLAlchemy Core metadata: one schema for SQLite and PostgreSQL.

The Alembic migrations in ``agent_service.store.migrations`` build exactly this schema (a test compares them);
a change here needs a new revision there.
"""

from __future__ import annotations

import sqlalchemy as sa

from suite_common.sql import UtcDateTime, store_metadata

__all__ = [
    "UtcDateTime",
    "approvals",
    "caller_keys",
    "conversation_summaries",
    "conversations",
    "images",
    "inputs",
    "metadata",
    "run_events",
    "run_messages",
    "runs",
    "tenant_runtime",
    "tool_calls",
    "usage_log",
]


metadata = store_metadata()
"""Constraint names are fixed (``store_metadata``): the migrations and the metadata name them alike."""

conversations = sa.Table(
    "conversations",
    metadata,
    sa.Column("conversation_id", sa.Text, nullable=False),
    sa.Column("caller", sa.Text, nullable=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    # The end user a trusted caller named (X-User-Id) when the conversation started.
    sa.Column("user_id", sa.Text, nullable=True),
    # The wire JSON of ``suite_common.wire.ConversationSettings``: what its newest run asked for, and the system
    # prompt it started with (NULL: stored before conversations kept their settings).
    sa.Column("settings", sa.JSON, nullable=True),
    # Each tenant names its conversations: the same id of two tenants is two conversations (one namespace for all
    # would let a tenant learn that an id is used, and take an id another tenant will use).
    sa.PrimaryKeyConstraint("tenant", "conversation_id"),
)

runs = sa.Table(
    "runs",
    metadata,
    # The order runs were created in: a conversation's runs are read back in this order.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Text, nullable=False, unique=True),
    sa.Column("conversation_id", sa.Text, nullable=True),
    sa.Column("caller", sa.Text, nullable=True),
    # NULL: the default tenant's (a run stored without one); never NULL for a run of a conversation.
    sa.Column("tenant", sa.Text, nullable=True),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("iterations", sa.Integer, nullable=False),
    sa.Column("input_tokens", sa.Integer, nullable=False),
    sa.Column("output_tokens", sa.Integer, nullable=False),
    sa.Column("finish_reason", sa.Text, nullable=True),
    sa.Column("error_code", sa.Text, nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("plan", sa.JSON, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("lease_owner", sa.Text, nullable=True),
    sa.Column("lease_expires_at", UtcDateTime, nullable=True),
    sa.Column("resumes", sa.Integer, nullable=False),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    sa.Column("last_seq", sa.Integer, nullable=False),
    # The end user a trusted caller named (X-User-Id), if any.
    sa.Column("user_id", sa.Text, nullable=True),
    # That user's role (X-User-Role: guest, user, admin, owner): its monthly budget when another replica takes the
    # run over. NULL: a run stored before roles (a "user").
    sa.Column("user_role", sa.Text, nullable=True),
    # The run's cost in US dollars, from the catalog's prices; NULL while no call of it had a price.
    sa.Column("cost_usd", sa.Float, nullable=True),
    # Which budget ended the run (finish reason "budget").
    sa.Column("budget", sa.Text, nullable=True),
    # Set while the run waits for approvals (status "waiting"): since when, and the wall-clock seconds its deadline
    # had left then (time spent waiting is not the run's: it resumes with these). A waiting run has no lease owner;
    # its lease_expires_at is when the wait's limit passes (the sweep then takes it and denies what is undecided).
    sa.Column("waiting_since", UtcDateTime, nullable=True),
    sa.Column("deadline_left_seconds", sa.Float, nullable=True),
    # With responseFormat: the final answer parsed, as JSON.
    sa.Column("output", sa.JSON, nullable=True),
    # The sweeper's question: which active runs have an expired lease, oldest first.
    sa.Index(None, "status", "lease_expires_at"),
    # A conversation's runs in order.
    sa.Index(None, "tenant", "conversation_id", "id"),
    sa.ForeignKeyConstraint(
        ["tenant", "conversation_id"], ["conversations.tenant", "conversations.conversation_id"], ondelete="CASCADE"
    ),
)

run_messages = sa.Table(
    "run_messages",
    metadata,
    # No foreign key to the run (nor on ``run_events``): every write of these rows is guarded by the run's own row
    # (updated or inserted in the same statement or transaction), and a key's check cost PostgreSQL a query per row
    # on every step (migration 0009).
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    # The wire JSON of ``suite_common.wire.Message`` (camelCase, no ``None`` fields).
    sa.Column("message", sa.JSON, nullable=False),
)

run_events = sa.Table(
    "run_events",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("type", sa.Text, nullable=False),
    # The SSE event's JSON text, byte for byte as sent.
    sa.Column("data", sa.Text, nullable=False),
)

usage_log = sa.Table(
    "usage_log",
    metadata,
    # One row per LLM call: what ``GET /api/v1/agent/usage`` sums, and where monthly budgets start from.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("user_id", sa.Text, nullable=True),
    sa.Column("caller", sa.Text, nullable=True),
    # No foreign key: the usage of a run outlives the run's deletion.
    sa.Column("run_id", sa.Text, nullable=True),
    # With the run, the call's identity: the loop's round it answered, and the run's ``resumes`` when it was made
    # (a run taken over after a crash makes its interrupted round's call again: a second call, a second row).
    # NULL for a call outside any run.
    sa.Column("iteration", sa.Integer, nullable=True),
    sa.Column("attempt", sa.Integer, nullable=True),
    # The model the run asked for (a catalog name or <provider>/<model>), and who answered it.
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("provider", sa.Text, nullable=True),
    sa.Column("input_tokens", sa.Integer, nullable=False),
    sa.Column("output_tokens", sa.Integer, nullable=False),
    # US dollars; NULL when the model has no price in completion-service's catalog.
    sa.Column("cost_usd", sa.Float, nullable=True),
    # True: the call was cut off before the provider reported its usage (its client gone, its run cancelled or out
    # of time); its tokens are an estimate of its prompt and of what it streamed (``agent_service.engine.metering``).
    sa.Column("estimated", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", UtcDateTime, nullable=False),
    # The model that actually answered (a fallback's, not the one asked for), as completion-service reported it;
    # NULL for rows written before it was kept, and for a call cut off before it answered.
    sa.Column("answered_model", sa.Text, nullable=True),
    # The call's latency, from sending it to its last byte, in milliseconds (NULL: rows written before it was kept).
    sa.Column("latency_ms", sa.Float, nullable=True),
    # A tenant's usage over a time range, and a user's within it.
    sa.Index(None, "tenant", "created_at"),
    sa.Index(None, "tenant", "user_id", "created_at"),
    # A run's call is logged once, however often its step's write is retried (inserts skip a row already there).
    # Rows without a run (run_id NULL) never conflict: NULLs are distinct under UNIQUE on both backends.
    sa.UniqueConstraint("run_id", "iteration", "attempt"),
)

caller_keys = sa.Table(
    "caller_keys",
    metadata,
    # Caller keys kept in the store (``python -m agent_service.keys``), beside those of the callers file.
    # The hex sha256 of the key; the key itself is never stored.
    sa.Column("digest", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False, unique=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("trusted", sa.Boolean, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("revoked_at", UtcDateTime, nullable=True),
    # What the key may do besides running: NULL (run only), "admin" (its tenant's admin API), "operator" (the admin
    # API of any tenant, with ?tenant=).
    sa.Column("role", sa.Text, nullable=True),
)

tool_calls = sa.Table(
    "tool_calls",
    metadata,
    # The audit log: one row per tool call a run dispatched (or refused, or answered from the cache), written in the
    # transaction of the run's step that records its result. What ``GET /api/v1/agent/audit`` pages through.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("user_id", sa.Text, nullable=True),
    # No foreign key: the audit of a run outlives the run's deletion.
    sa.Column("run_id", sa.Text, nullable=False),
    # The loop's round, the call's index in the round's tool calls, and the run's ``resumes`` when it was made (a
    # run taken over after a crash makes its interrupted round's calls again: new rows).
    sa.Column("iteration", sa.Integer, nullable=False),
    sa.Column("call_index", sa.Integer, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("tool_call_id", sa.Text, nullable=False),
    # The MCP server that served it (NULL: refused before a server was chosen) and the tool's name as listed.
    sa.Column("server", sa.Text, nullable=True),
    sa.Column("tool", sa.Text, nullable=False),
    # ok | error | refused | cancelled | cached
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("latency_ms", sa.Float, nullable=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    # A tenant's calls over a time range (the endpoint's filters narrow it further).
    sa.Index(None, "tenant", "created_at"),
    # Written once, however often its step's write is retried.
    sa.UniqueConstraint("run_id", "iteration", "call_index", "attempt"),
)

tenant_runtime = sa.Table(
    "tenant_runtime",
    metadata,
    # What a tenant's admin set through ``PATCH /api/v1/admin/runtime``, within the operator's caps (the callers
    # file): the wire JSON of the fields it set (``maxIterations``, ``toolCacheSeconds``, ``streamMode``,
    # ``agentEnabled``); a field it never set is absent (the operator's default applies).
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("settings", sa.JSON, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    # The key that made the last change (its name, never the key).
    sa.Column("updated_by", sa.Text, nullable=True),
)

approvals = sa.Table(
    "approvals",
    metadata,
    # One row per tool call that needed a person's approval; decided once (pending -> approved | denied).
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    sa.Column("tool_call_id", sa.Text, nullable=False),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("iteration", sa.Integer, nullable=False),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("server", sa.Text, nullable=True),
    sa.Column("arguments", sa.JSON, nullable=False),
    # pending | approved | denied
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=True),
    # The caller key's name and end user who decided ("<key>/<user>"); NULL: undecided, or denied by the wait's limit.
    sa.Column("decided_by", sa.Text, nullable=True),
    sa.Column("requested_at", UtcDateTime, nullable=False),
    sa.Column("decided_at", UtcDateTime, nullable=True),
    sa.Column("expires_at", UtcDateTime, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "tool_call_id"),
)

inputs = sa.Table(
    "inputs",
    metadata,
    # One row per question a tool's server asked during a run (MCP ``elicitation/create``, relayed by the gateway);
    # answered once (pending -> accepted | declined | cancelled). ``input_id`` is the gateway's ``elicitationId``.
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    sa.Column("input_id", sa.Text, nullable=False),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("tool_call_id", sa.Text, nullable=False),
    sa.Column("iteration", sa.Integer, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("server", sa.Text, nullable=True),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("requested_schema", sa.JSON, nullable=False),
    # pending | accepted | declined | cancelled
    sa.Column("status", sa.Text, nullable=False),
    # The answer's content (accepted only, defaults filled), kept to be forwarded to the gateway when the run resumes;
    # never shown in a view.
    sa.Column("answer", sa.JSON, nullable=True),
    # As ``approvals.decided_by``; NULL: unanswered, or declined by the wait's limit.
    sa.Column("decided_by", sa.Text, nullable=True),
    sa.Column("requested_at", UtcDateTime, nullable=False),
    sa.Column("decided_at", UtcDateTime, nullable=True),
    sa.Column("expires_at", UtcDateTime, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "input_id"),
)

conversation_summaries = sa.Table(
    "conversation_summaries",
    metadata,
    # The summary of a conversation's oldest messages, made when they no longer fit the model's context window:
    # made once per growth step and reused by later runs (the messages themselves stay stored in full).
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("conversation_id", sa.Text, nullable=False),
    # How many of the conversation's messages (from its first) the summary covers.
    sa.Column("covers", sa.Integer, nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    # The summary's own size in tokens, as counted when it was made.
    sa.Column("tokens", sa.Integer, nullable=False),
    # The model that made it.
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant", "conversation_id"),
    sa.ForeignKeyConstraint(
        ["tenant", "conversation_id"], ["conversations.tenant", "conversations.conversation_id"], ondelete="CASCADE"
    ),
)

images = sa.Table(
    "images",
    metadata,
    # Images of stored runs, kept once by content (a message stores /api/v1/agent/images/<sha256>, not the bytes).
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("media_type", sa.Text, nullable=False),
    sa.Column("size_bytes", sa.Integer, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant", "sha256"),
)
