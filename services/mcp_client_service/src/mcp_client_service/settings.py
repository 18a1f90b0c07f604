"""mcp-client-service settings, read from ``MCP_CLIENT_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from suite_common.settings import ServiceSettings

__all__ = ["MCPClientSettings"]


class MCPClientSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="MCP_CLIENT_", extra="ignore")

    port: int = 8002
    servers_config: Path = Path("mcp_servers.json")
    """The JSON file of MCP servers to connect to, in the ``mcpServers`` format of Claude Desktop,
    Cursor and VS Code (``MCP_CLIENT_SERVERS_CONFIG``). Read once at startup."""
    service_secret: SecretStr = Field(default=SecretStr(""), validate_default=True)
    """The shared secret every ``/mcp/v1`` request must carry in ``secret_header``
    (``MCP_CLIENT_SERVICE_SECRET``). Required: the service refuses to start without it.
    Never logged, never passed to MCP servers."""
    secret_header: str = Field(default="X-MCP-Service-Secret", min_length=1)
    """The request header that carries the shared secret."""
    call_timeout_seconds: float = Field(default=60.0, gt=0)
    """Longest a ``tools/call`` may take. A caller's ``X-Deadline-Ms`` can only shorten it."""
    connect_timeout_seconds: float = Field(default=60.0, gt=0)
    """Longest connecting to one server may take, spawn and handshake included (stdio servers
    that load ML models at startup need a while)."""
    list_timeout_seconds: float = Field(default=15.0, gt=0)
    """Longest listing one server's tools may take, all pages together."""
    health_check_interval_seconds: float = Field(default=30.0, gt=0)
    """How often an open session is checked by listing its tools again: a server that does not
    answer within ``list_timeout_seconds`` is reconnected, and a changed tool list is picked up."""
    max_result_chars: int = Field(default=200_000, ge=100)
    """Text of a tool result beyond this many characters is cut, with a visible marker saying so."""

    @field_validator("service_secret")
    @classmethod
    def _require_secret(cls, secret: SecretStr) -> SecretStr:
        if not secret.get_secret_value().strip():
            raise ValueError("MCP_CLIENT_SERVICE_SECRET must be set to a non-empty shared secret")
        return secret
