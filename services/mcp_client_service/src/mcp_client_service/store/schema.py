"""The tenant server store's tables, as SQLAlchemy Core metadata: one schema for SQLite and PostgreSQL.

The Alembic migrations in ``mcp_client_service.store.migrations`` build exactly this schema (a test compares them);
a change here needs a new revision there.
"""

from __future__ import annotations

import sqlalchemy as sa

from suite_common.sql import UtcDateTime, store_metadata

__all__ = [
    "REVISION_ROW",
    "metadata",
    "oauth_clients",
    "oauth_consents",
    "oauth_tokens",
    "registry_revision",
    "tenant_server_deletions",
    "tenant_servers",
]

metadata = store_metadata()
"""Constraint names are fixed (``store_metadata``): the migrations and the metadata name them alike."""

tenant_servers = sa.Table(
    "tenant_servers",
    metadata,
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    # "streamable-http" or "sse": tenant servers are remote only, never a command the gateway would run.
    sa.Column("transport", sa.Text, nullable=False),
    # The header values (credentials) as one Fernet token of their JSON (store.secrets); NULL: no headers.
    sa.Column("headers_encrypted", sa.Text, nullable=True),
    # Its ``auth`` block (OAuth: a client id and secret among its settings) as one Fernet token of its JSON; NULL: the
    # server is not behind OAuth.
    sa.Column("auth_encrypted", sa.Text, nullable=True),
    sa.Column("enabled", sa.Boolean, nullable=False),
    # The server's tools a tenant's runs may use (a JSON list of names); NULL: all of them.
    sa.Column("allowed_tools", sa.JSON(none_as_null=True), nullable=True),
    # Its last tools/list (a JSON list of MCP Tool objects), so that a server without an open session is still in
    # its tenant's catalog; NULL: never listed.
    sa.Column("tools", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    # The registry's revision of the row's last change (set in the same transaction that bumped it), so that a
    # replica reads only the rows changed since the revision it last saw.
    sa.Column("revision", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("tenant", "name"),
    sa.CheckConstraint("transport IN ('streamable-http', 'sse')", name="transport"),
    sa.Index(None, "revision"),
)

tenant_server_deletions = sa.Table(
    "tenant_server_deletions",
    metadata,
    # One row per deleted (tenant, name), its revision the deletion's: how a replica syncing from a revision learns
    # of servers gone since. At most one per name a tenant ever used (a later deletion overwrites it).
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("revision", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("tenant", "name"),
    sa.Index(None, "revision"),
)

registry_revision = sa.Table(
    "registry_revision",
    metadata,
    # One row (id 1), made by the migration: a counter every write of tenant_servers bumps in its own transaction,
    # so that a replica notices any change with one cheap read (and writers take turns on the row's lock).
    sa.Column("id", sa.Integer, nullable=False),
    sa.Column("revision", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("id"),
)

REVISION_ROW = 1
"""The id of ``registry_revision``'s one row."""

# The OAuth vault (mcp_client_service.oauth.vault). Tenant "" is the deployment's servers file, user "" a machine
# server's one token. Every secret is one Fernet token (store.secrets) of its JSON.

oauth_clients = sa.Table(
    "oauth_clients",
    metadata,
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("server", sa.Text, nullable=False),
    # The client registration the authorization server answered (or the CIMD / pre-registered one), sealed: it
    # may hold a client secret.
    sa.Column("client_encrypted", sa.Text, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant", "server"),
)

oauth_tokens = sa.Table(
    "oauth_tokens",
    metadata,
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("server", sa.Text, nullable=False),
    sa.Column("user", sa.Text, nullable=False),
    # The token response (access and refresh token), sealed.
    sa.Column("token_encrypted", sa.Text, nullable=False),
    # What was granted (space-separated) and until when: shown in the connections list, never the token.
    sa.Column("scopes", sa.Text, nullable=True),
    sa.Column("expires_at", UtcDateTime, nullable=True),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant", "server", "user"),
)

oauth_consents = sa.Table(
    "oauth_consents",
    metadata,
    # The authorization request's random state: the callback names the consent by it.
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("server", sa.Text, nullable=False),
    sa.Column("user", sa.Text, nullable=False),
    # {code_verifier, scope, redirect_uri, token_endpoint, ...}, sealed.
    sa.Column("pending_encrypted", sa.Text, nullable=False),
    # The authorization code once the callback came (sealed); set: the consent is used.
    sa.Column("code_encrypted", sa.Text, nullable=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False),
    sa.PrimaryKeyConstraint("state"),
    sa.Index(None, "tenant", "server", "user"),
    sa.Index(None, "expires_at"),
)
