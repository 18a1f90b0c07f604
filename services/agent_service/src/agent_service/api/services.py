"""What every HTTP handler reaches of the service: one typed container, built by the lifespan (``agent_service.app``)
and read with ``services_of(request)``.

The lifespan's state is ``{"services": Services(...)}``; Starlette hands it to each request as
``request.state.services``, which only ``services_of`` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from agent_service.admission.planning import ModelCheck, ToolCatalog
from agent_service.admission.tenant_runtime import TenantRuntimes
from agent_service.core.tenancy import TenantRules
from agent_service.engine.loop import AgentLoop
from agent_service.infra.gateway_oauth import GatewayOAuth
from agent_service.runs import AgentRuns
from agent_service.settings import AgentSettings
from suite_common.lifecycle import Lifecycle
from suite_common.peer_client import PeerClient

__all__ = ["Services", "services_of"]


@dataclass(frozen=True)
class Services:
    """The service's parts that outlive a request: its settings, the peers' pooled client, the loop, the tool and
    model catalogs, its lifecycle (draining or not), its runs, the tenants' runtimes and rules, the gateway's OAuth
    endpoints, and whether the API is open (no caller keys)."""

    settings: AgentSettings
    http: PeerClient
    loop: AgentLoop
    catalog: ToolCatalog
    models: ModelCheck
    lifecycle: Lifecycle
    runs: AgentRuns
    runtimes: TenantRuntimes
    rules_of: Callable[[str], TenantRules]
    """Any tenant's rules (its ``[tenants.<name>]`` of the callers file), for an operator acting for it."""
    oauth: GatewayOAuth
    """The gateway's OAuth endpoints: consent callbacks, connections (``api.connections``, ``api.admin_oauth``)."""
    open_api: bool = False
    """No caller keys at all: every request is the caller ``anonymous`` of the tenant ``default``."""


def services_of(request: Request) -> Services:
    """The service's ``Services``, as its lifespan made them."""
    services = request.state.services
    if not isinstance(services, Services):
        raise RuntimeError("no services on the request: the app's lifespan has not started")
    return services
