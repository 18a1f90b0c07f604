"""What one server's connection and its session loop share: the server, its parts, its session state.

``server_connection.ServerConnection`` (what the rest of the service holds for a server) and
``supervisor.SessionLoop`` (connect, list, probe, reconnect) each hold the same
``ConnectionState``, so neither module imports the other. The loop keeps the session fields up to
date (``client``, ``connecting``, ``first_attempt_done``, ``attempts``, ``last_error``,
``retry_at``) and tells of each change through ``changed``; the connection reads them and makes
the calls. The parts (breaker, listing, call accounting, child output, task calls) are the
connection's, shared by reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mcp import Client

from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.servers_file import ServerConfig
from mcp_client_service.connection.breaker import CircuitBreaker
from mcp_client_service.connection.call_accounting import CallAccounting
from mcp_client_service.connection.child_output import ChildOutputLog
from mcp_client_service.connection.tasks import TaskCalls
from mcp_client_service.connection.tool_listing import ToolListing
from mcp_client_service.oauth import AuthorizationRequired, GatewayAuth, SessionOAuth
from mcp_client_service.redaction import redact, secret_forms
from mcp_client_service.transport.session_transport import literal_secrets

__all__ = ["ConnectionState"]


@dataclass(eq=False)
class ConnectionState:
    """One server's connection: what it is, its parts, and the state its session loop keeps."""

    name: str
    config: ServerConfig
    options: ConnectionOptions
    base_dir: Path
    breaker: CircuitBreaker
    listing: ToolListing
    calls: CallAccounting
    output: ChildOutputLog
    tasks: TaskCalls
    changed: Callable[[], None]
    """Called (synchronously) whenever the state or the listed tools change."""
    client: Client | None = None
    """The open session while the server serves (its tools listed); ``None`` otherwise."""
    connecting: bool = True
    first_attempt_done: bool = False
    """Whether its first connection attempt has ended, serving or failed (readiness waits for that)."""
    attempts: int = 0
    last_error: str | None = None
    retry_at: float | None = None
    """While it waits to reconnect: when (``time.monotonic``) the next attempt starts."""
    egress_refusal: str | None = None
    """Set while its last connection attempt was refused by the outbound policy: why (safe to show)."""
    oauth: SessionOAuth | None = None
    """How its sessions authorize themselves (a server with an ``auth`` block); ``None``: no OAuth."""
    auth: GatewayAuth | None = None
    """The OAuth provider of its current (or last) session."""
    consent: AuthorizationRequired | None = None
    """Set while it waits for a person's consent (no session, no reconnecting until one completes)."""
    _secrets: list[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._secrets = secret_forms([*literal_secrets(self.config), *self.options.forbidden_values])

    def redact(self, text: str) -> str:
        """``text`` without this server's secrets (configured or resolved) or any URL's credentials."""
        return redact(text, self._secrets)

    def remember_secrets(self, values: Sequence[str]) -> None:
        """Secrets resolved from references (``${env:...}``, ``${file:...}``): redacted from now on."""
        if values:
            self._secrets = secret_forms([*literal_secrets(self.config), *self.options.forbidden_values, *values])
