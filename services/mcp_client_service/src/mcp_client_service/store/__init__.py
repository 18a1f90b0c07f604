"""The gateway's own store: the MCP servers tenants register at runtime (``tenant_servers``), SQLite or PostgreSQL,
their header values encrypted at rest (``secrets``). ``python -m mcp_client_service.store`` migrates it and rotates
its key."""

from mcp_client_service.store.secrets import SecretsBox
from mcp_client_service.store.tenant_servers import (
    UNCHANGED,
    SecretsKeyMissing,
    SecretsUnreadable,
    ServerExists,
    StoredServer,
    TenantServerStore,
    TooManyServers,
    Transport,
    open_tenant_store,
)
from suite_common.sql import StoreError

__all__ = [
    "UNCHANGED",
    "SecretsBox",
    "SecretsKeyMissing",
    "SecretsUnreadable",
    "ServerExists",
    "StoreError",
    "StoredServer",
    "TenantServerStore",
    "TooManyServers",
    "Transport",
    "open_tenant_store",
]
