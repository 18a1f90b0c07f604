"""What every HTTP handler reaches of the service: one typed container, built by the lifespan (``agent_service.app``)
and read with ``services_of(request)``.

The lifespan's state is ``{"services": Services(...)}``; Starlette hands it to each request as
``request.state.services``, which only ``services_of`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from agent_service.admission.planning import ModelCheck, ToolCatalog
from agent_service.engine.loop import AgentLoop
from agent_service.runs import AgentRuns
from agent_service.settings import AgentSettings
from suite_common.lifecycle import Lifecycle
from suite_common.peer_client import PeerClient

__all__ = ["Services", "services_of"]


@dataclass(frozen=True)
class Services:
    """The service's parts that outlive a request: its settings, the peers' pooled client, the loop, the tool and
    model catalogs, its lifecycle (draining or not) and its runs."""

    settings: AgentSettings
    http: PeerClient
    loop: AgentLoop
    catalog: ToolCatalog
    models: ModelCheck
    lifecycle: Lifecycle
    runs: AgentRuns


def services_of(request: Request) -> Services:
    """The service's ``Services``, as its lifespan made them."""
    services = request.state.services
    if not isinstance(services, Services):
        raise RuntimeError("no services on the request: the app's lifespan has not started")
    return services
