"""What the tenant servers need of the gateway's store (``mcp_client_service.store.tenant_servers``), as types.

The store's ``TenantServerStore`` and ``StoredServer`` are these; the tests' doubles are too.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

__all__ = ["ServerRow", "TenantStore"]


class ServerRow(Protocol):
    """One stored tenant server (``store.tenant_servers.StoredServer``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def transport(self) -> Literal["streamable-http", "sse"]: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def allowed_tools(self) -> tuple[str, ...] | None: ...
    @property
    def tools(self) -> list[dict[str, Any]] | None: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...
    @property
    def auth(self) -> Mapping[str, Any] | None:
        """Its ``auth`` block (``wire.ServerAuth`` JSON, the client secret in it); ``None``: not behind OAuth."""
        ...

    @property
    def headers_problem(self) -> str | None:
        """Why its header values could not be decrypted (the server then cannot be connected to); ``None``: fine."""
        ...


class TenantStore(Protocol):
    """``store.tenant_servers.TenantServerStore``, as the tenant servers use it."""

    async def revision(self) -> int: ...
    async def load_all(self) -> tuple[int, Sequence[ServerRow]]: ...
    async def changes_since(self, revision: int) -> tuple[int, Sequence[ServerRow], Sequence[tuple[str, str]]]:
        """The revision now, the servers written after ``revision`` and the (tenant, name) of those deleted."""
        ...

    async def list(self, tenant: str) -> Sequence[ServerRow]: ...
    async def get(self, tenant: str, name: str) -> ServerRow | None: ...
    async def create(
        self,
        tenant: str,
        name: str,
        url: str,
        transport: Literal["streamable-http", "sse"],
        headers: Mapping[str, str],
        enabled: bool,
        allowed_tools: Sequence[str] | None,
        *,
        max_servers: int | None,
        auth: Mapping[str, Any] | None = None,
    ) -> ServerRow: ...
    async def update(
        self,
        tenant: str,
        name: str,
        *,
        url: Any = ...,
        transport: Any = ...,
        headers: Any = ...,
        enabled: Any = ...,
        allowed_tools: Any = ...,
        auth: Any = ...,
    ) -> ServerRow | None:
        """Each field left out (or ``store.UNCHANGED``) keeps its value."""
        ...

    async def delete(self, tenant: str, name: str) -> bool: ...
    async def record_listing(
        self, tenant: str, name: str, tools: builtins.list[dict[str, Any]] | None, last_error: str | None
    ) -> None: ...
