"""Each tenant's catalog: the shared servers' tools, then the tenant's own enabled servers' tools.

Names are settled by ``MCP_CLIENT_TOOL_NAME_COLLISION`` within the tenant: the shared servers first (in the servers
file's order), then the tenant's servers in the order they were created. A tenant's server without an open session
is listed from its last listing kept in the store, callable (the call opens its session). A catalog is built on
first use and rebuilt only when the shared catalog, the tenant's servers or one of their sessions changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_types import Tool
from pydantic import ValidationError

from mcp_client_service.registry.catalog import NameCollision, ServerTools, ToolCatalog
from suite_common.logging import get_logger

__all__ = ["TenantCatalogs", "parse_tools"]

_log = get_logger("mcp_client_service.tenants.catalogs")


def parse_tools(tools: Sequence[dict[str, Any]] | None) -> tuple[Tool, ...]:
    """A stored listing (MCP ``Tool`` JSON) as ``Tool``s; an entry that is not one is left out."""
    parsed = []
    for tool in tools or ():
        try:
            parsed.append(Tool.model_validate(tool))
        except ValidationError:
            _log.warning("mcp_tenant_stored_tool_invalid", tool=str(tool.get("name", "?"))[:64])
    return tuple(parsed)


@dataclass
class _Built:
    catalog: ToolCatalog
    shared_version: object
    version: int


class TenantCatalogs:
    """The catalogs of the tenants that have servers of their own, built on demand.

    ``shared`` gives the shared servers' ``ServerTools`` and the shared catalog's version (its listing's identity);
    ``own`` gives a tenant's servers' ``ServerTools``, in creation order.
    """

    def __init__(
        self,
        *,
        collision: NameCollision,
        shared: Callable[[], tuple[object, Sequence[ServerTools]]],
        own: Callable[[str], Sequence[ServerTools]],
    ) -> None:
        self._collision: NameCollision = collision
        self._shared = shared
        self._own = own
        self._built: dict[str, _Built] = {}
        self._versions: dict[str, int] = {}

    def changed(self, tenant: str) -> None:
        """The tenant's servers or sessions changed: its catalog is rebuilt on its next use."""
        self._versions[tenant] = self._versions.get(tenant, 0) + 1

    def forget(self, tenant: str) -> None:
        """The tenant has no servers of its own any more: drop its catalog."""
        self._built.pop(tenant, None)
        self._versions.pop(tenant, None)

    def catalog(self, tenant: str) -> ToolCatalog:
        shared_version, shared = self._shared()
        version = self._versions.get(tenant, 0)
        built = self._built.get(tenant)
        if built is None or built.shared_version is not shared_version or built.version != version:
            catalog = built.catalog if built is not None else ToolCatalog(collision=self._collision)
            shared_names = {entry.server for entry in shared}
            own = [entry for entry in self._own(tenant) if entry.server not in shared_names]
            catalog.rebuild([*shared, *own])
            self._built[tenant] = _Built(catalog=catalog, shared_version=shared_version, version=version)
        return self._built[tenant].catalog
