"""The wire models of the contracts between the services (docs/agent-api.md, docs/gateway-api.md, docs/providers.md
and the OpenAPI each service serves). JSON is camelCase.

Models accept camelCase and snake_case on input and always write camelCase, leaving ``None``
fields out (``dump``). Unknown fields are ignored so that a newer peer can add fields without
breaking an older one.

Every model is imported from here (``from suite_common.wire import Message``); each contract has its module:
``base`` (``WireModel``, ``dump``, the deadline header), ``errors`` (the error body), ``conversation`` (messages,
tool calls, usage), ``completion`` (completion-service), ``gateway`` (mcp-client-service), ``oauth`` (OAuth to MCP
servers), ``tenant_servers`` (the servers tenants register), ``tenant_runtime`` (a tenant's runtime settings),
``agent_runs`` and ``agent_views`` (agent-service: its runs, and what it answers besides).
"""

from __future__ import annotations

from suite_common.wire import (
    agent_runs,
    agent_views,
    base,
    completion,
    conversation,
    errors,
    gateway,
    oauth,
    tenant_runtime,
    tenant_servers,
)
from suite_common.wire.agent_runs import *  # noqa: F403
from suite_common.wire.agent_views import *  # noqa: F403
from suite_common.wire.base import *  # noqa: F403
from suite_common.wire.completion import *  # noqa: F403
from suite_common.wire.conversation import *  # noqa: F403
from suite_common.wire.errors import *  # noqa: F403
from suite_common.wire.gateway import *  # noqa: F403
from suite_common.wire.oauth import *  # noqa: F403
from suite_common.wire.tenant_runtime import *  # noqa: F403
from suite_common.wire.tenant_servers import *  # noqa: F403

__all__ = [
    *base.__all__,
    *errors.__all__,
    *conversation.__all__,
    *completion.__all__,
    *gateway.__all__,
    *oauth.__all__,
    *tenant_servers.__all__,
    *tenant_runtime.__all__,
    *agent_runs.__all__,
    *agent_views.__all__,
]
