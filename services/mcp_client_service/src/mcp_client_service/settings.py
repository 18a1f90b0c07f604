"""mcp-client-service settings, read from ``MCP_CLIENT_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from mcp_client_service.config.options import (
    DEFAULT_INHERITED_ENV,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
)
from mcp_client_service.config.schemas import DEFAULT_MAX_TOOLS
from suite_common.egress_settings import EgressSettings
from suite_common.settings import StringList, renamed

__all__ = ["MCPClientSettings"]


class MCPClientSettings(EgressSettings):
    """The gateway's settings; its outbound policy (``MCP_CLIENT_SSRF_*``, ``MCP_CLIENT_HOSTS_FILE``) is the shared
    ``EgressSettings``': it applies to HTTP MCP servers. The servers file's own host names are trusted on top
    (``app.connection_options``); tenant servers get the plain policy (``egress_policy()``)."""

    model_config = SettingsConfigDict(env_prefix="MCP_CLIENT_", extra="ignore", populate_by_name=True)

    port: int = Field(default=8002, description="The port the service listens on.")
    servers_file: Path = Field(
        default=Path("mcp_servers.json"),
        validation_alias=renamed("MCP_CLIENT_SERVERS_FILE", "MCP_CLIENT_SERVERS_CONFIG"),
        description=(
            "The file of MCP servers to connect to, in the mcpServers format of Claude Desktop, Cursor and "
            "VS Code: JSON, or TOML when its name ends in .toml. Read at startup and on POST /mcp/v1/servers/reload. "
            "Formerly `MCP_CLIENT_SERVERS_CONFIG` (still read, deprecated)."
        ),
    )
    service_secret: SecretStr = Field(
        default=SecretStr(""),
        validate_default=True,
        description=(
            "The shared secret every /mcp/v1 request must carry in secret_header. Required: the service refuses "
            "to start without it. Never logged, never passed to MCP servers."
        ),
    )
    secret_header: str = Field(
        default="X-MCP-Service-Secret", min_length=1, description="The request header that carries the shared secret."
    )
    call_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Longest a tools/call may take, unless the server has its own callTimeoutSeconds. "
            "A caller's X-Deadline-Ms can only shorten it."
        ),
    )
    connect_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Longest connecting to one server may take, spawn and handshake included (stdio servers that load "
            "ML models at startup need a while)."
        ),
    )
    list_timeout_seconds: float = Field(
        default=15.0, gt=0, description="Longest listing one server's tools may take, all pages together."
    )
    health_check_interval_seconds: float = Field(
        default=30.0,
        gt=0,
        description=(
            "How often an open session is probed (ping, or server/discover at protocol 2026): a server that does "
            "not answer within list_timeout_seconds, while no call is in flight on it and none of its messages "
            "arrives, is reconnected."
        ),
    )
    catalog_cache_seconds: float = Field(
        default=600.0,
        gt=0,
        validation_alias=renamed("MCP_CLIENT_CATALOG_CACHE_SECONDS", "MCP_CLIENT_CATALOG_TTL_SECONDS"),
        description=(
            "How long a server's tool list is served from memory before it is listed again. A server that sends "
            "notifications/tools/list_changed is listed again at once. "
            "Formerly `MCP_CLIENT_CATALOG_TTL_SECONDS` (still read, deprecated)."
        ),
    )
    list_changed_debounce_seconds: float = Field(
        default=2.0,
        ge=0,
        description=(
            "Least time between two listings of a server's tools asked for by notifications/tools/list_changed: "
            "the notifications that come in between are answered by one listing."
        ),
    )
    max_tools_per_server: int = Field(
        default=DEFAULT_MAX_TOOLS,
        ge=1,
        description="Most tools listed per server; the rest of a longer list are left out, and logged.",
    )
    tool_name_collision: Literal["first_wins", "prefix"] = Field(
        default="first_wins",
        description=(
            "When two servers offer a tool of the same name: first_wins lists only the first server's (config "
            "order), prefix lists the later servers' as <server>__<tool>."
        ),
    )
    max_result_chars: int = Field(
        default=200_000,
        ge=100,
        description="Text of a tool result beyond this many characters is cut, with a visible marker saying so.",
    )
    restart_backoff_initial_seconds: float = Field(
        default=0.5, gt=0, description="First pause before a failed server is connected (or restarted) again."
    )
    restart_backoff_max_seconds: float = Field(
        default=30.0, gt=0, description="Longest pause between attempts; the pause doubles up to it."
    )
    breaker_failure_threshold: int = Field(
        default=5,
        ge=1,
        description=(
            "Failures of a server (a crash, a failed connect, a dropped connection, a call past the server's own "
            "time limit) within breaker_window_seconds that open its circuit: calls then fail fast and reconnecting "
            "pauses. A caller's shorter deadline and a JSON-RPC error answer are not failures of the server."
        ),
    )
    breaker_window_seconds: float = Field(
        default=60.0, gt=0, description="The window in which breaker_failure_threshold failures open a circuit."
    )
    breaker_open_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long a circuit stays open before the server is tried again (half-open).",
    )
    stdio_inherit_env: StringList = Field(
        default_factory=lambda: list(DEFAULT_INHERITED_ENV),
        description=(
            "Names of the gateway's environment variables a stdio server inherits (comma-separated); anything "
            "else it gets only through its env in the config. MCP_CLIENT_* variables are never passed."
        ),
    )
    stdio_max_line_bytes: int = Field(
        default=DEFAULT_MAX_LINE_BYTES,
        ge=64 * 1024,
        description=(
            "Most a stdio server may write without a newline (one JSON-RPC message). Beyond it the server is "
            "stopped and restarted: a broken or hostile server cannot exhaust the gateway's memory."
        ),
    )
    http_max_connections: int = Field(
        default=DEFAULT_MAX_CONNECTIONS,
        ge=1,
        description=(
            "Most connections to one HTTP MCP server at once: a call in flight may hold one, and the health probe "
            "needs one too."
        ),
    )
    http_max_response_bytes: int = Field(
        default=DEFAULT_MAX_RESPONSE_BYTES,
        ge=64 * 1024,
        description=(
            "Most an HTTP MCP server's answer may hold (a JSON body, or one server-sent event); a larger one fails "
            "its call only, with an error saying so."
        ),
    )

    database_url: str = Field(
        default="sqlite:///.data/mcp_client.db",
        description=(
            "Where tenant servers (the MCP servers tenants register at runtime) are kept: sqlite:///path (one "
            "replica; the folder is created) or postgresql://user:password@host:port/database (any number of "
            "replicas, which see each other's changes within MCP_CLIENT_TENANT_SYNC_SECONDS). The servers file's "
            "servers are not stored: they stay the file's."
        ),
    )
    database_migrate: bool = Field(
        default=True,
        description=(
            "Bring the store's schema to the newest revision at start (replicas take turns). Off: run "
            "python -m mcp_client_service.store migrate before starting (a release job)."
        ),
    )
    secrets_key: SecretStr = Field(
        default=SecretStr(""),
        description=(
            "Fernet keys that encrypt tenant servers' header values at rest, comma-separated: the first encrypts, "
            "every one decrypts (add a new key first, run python -m mcp_client_service.store rotate-key, then drop "
            "the old one; docs/gateway.md). Make one with python -m mcp_client_service.store generate-key. Unset: "
            "servers with headers cannot be registered (400 secrets_key_missing), servers without work. Never "
            "logged."
        ),
    )
    secrets_key_file: Path | None = Field(
        default=None,
        description=(
            "A file holding MCP_CLIENT_SECRETS_KEY's value instead (keys separated by commas or lines), such as a "
            "mounted Kubernetes Secret; read at start."
        ),
    )

    tenant_sync_seconds: float = Field(
        default=1.0,
        gt=0,
        description=(
            "How often the store's revision is read to notice tenant servers changed on another replica (one cheap "
            "query): a change reaches every replica within about this long."
        ),
    )
    tenant_idle_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A tenant server's session closes after this long without a call; its next call opens one.",
    )
    tenant_max_sessions: int = Field(
        default=256,
        ge=1,
        description=(
            "Most sessions to tenant servers open at once, all tenants together. At the bound the least recently "
            "used idle one closes; when none is idle, a call that needs another answers 503 tool_unavailable."
        ),
    )
    tenant_max_sessions_per_tenant: int = Field(
        default=8,
        ge=1,
        description="Most sessions to one tenant's servers open at once (the same rule at the bound).",
    )

    oauth_redirect_url: str = Field(
        default="http://127.0.0.1:8000/api/v1/agent/oauth/callback",
        description=(
            "The redirect URI the gateway registers and sends people back to after an OAuth consent (servers with an "
            "auth block): agent-service's public callback, which passes the code to POST /mcp/v1/oauth/callback."
        ),
    )
    oauth_client_name: str = Field(
        default="loop-suite gateway",
        description="The client_name the gateway registers with authorization servers (dynamic registration).",
    )
    oauth_client_metadata_url: str = Field(
        default="",
        description=(
            "The gateway's client ID metadata document (an https URL with a path; CIMD): used as its client_id by "
            "authorization servers that support it, instead of registering. Empty: dynamic registration, or a "
            "server's pre-registered clientId."
        ),
    )
    oauth_consent_seconds: float = Field(
        default=600.0,
        gt=0,
        description="How long an authorization URL stays usable: a callback after that answers invalid_oauth_state.",
    )
    oauth_step_up_limit: int = Field(
        default=3,
        ge=1,
        description=(
            "Consents asked in a row for one server and principal while it keeps refusing the token (403 "
            "insufficient_scope), the first included: then the gateway stops asking and reports the refusal."
        ),
    )

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        url = url.strip()
        if not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError("must be sqlite:///path or postgresql://user:password@host:port/database")
        return url

    @model_validator(mode="after")
    def _one_source_of_keys(self) -> MCPClientSettings:
        if self.secrets_key.get_secret_value().strip() and self.secrets_key_file is not None:
            raise ValueError("set MCP_CLIENT_SECRETS_KEY or MCP_CLIENT_SECRETS_KEY_FILE, not both")
        return self

    @field_validator("service_secret")
    @classmethod
    def _require_secret(cls, secret: SecretStr) -> SecretStr:
        if not secret.get_secret_value().strip():
            raise ValueError("MCP_CLIENT_SERVICE_SECRET must be set to a non-empty shared secret")
        return secret

    @field_validator("stdio_inherit_env")
    @classmethod
    def _never_the_gateways_own(cls, names: list[str]) -> list[str]:
        own = [name for name in names if name.upper().startswith("MCP_CLIENT_")]
        if own:
            raise ValueError(f"the gateway's own settings are never passed to MCP servers: {', '.join(own)}")
        return names
