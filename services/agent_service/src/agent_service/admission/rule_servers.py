"""At start: a tenant's tool rule that names an MCP server the gateway does not have is said in the log.

``tools = ["serach:*"]`` (a typo) allows nothing and ``deny_tools = ["serach:*"]`` denies nothing, silently; so
once the gateway answers, each ``<server>:<tool>`` or ``<server>:*`` of the callers file is checked against the
servers it is configured with (``GET /mcp/v1/servers``: serving, failed or disabled alike) and each unknown one
is logged as a warning (``tool_rule_unknown_server``). Never a failure: the gateway may be down at the start,
or its servers file reloaded later; the check is given up after a while (``tool_rules_unchecked``).
"""

from __future__ import annotations

from collections.abc import Mapping

import anyio

from agent_service.core.errors import UpstreamError
from agent_service.core.tenancy import TenantRules
from agent_service.infra.peers import ToolsClient
from suite_common.deadline import Deadline
from suite_common.logging import get_logger

__all__ = ["CHECK_SECONDS", "check_rule_servers"]

_log = get_logger("agent_service.rule_servers")

CHECK_SECONDS = 60.0
"""How long the gateway is asked for its servers (it may start after agent-service) before the check is given up."""

_RETRY_SECONDS = 2.0


async def check_rule_servers(
    rules: Mapping[str, TenantRules], tools: ToolsClient, *, within: float = CHECK_SECONDS
) -> None:
    """Log each server that a tenant's rules name and the gateway does not have (run it in the background)."""
    named = {tenant: tenant_rules.servers_named() for tenant, tenant_rules in rules.items()}
    if not any(named.values()):
        return
    deadline = Deadline.after(within)
    while True:
        try:
            servers = await tools.list_servers(deadline)
            break
        except UpstreamError as error:
            if deadline.remaining() <= _RETRY_SECONDS:
                _log.warning(
                    "tool_rules_unchecked", reason=error.message, servers_named=sorted(set().union(*named.values()))
                )
                return
            await anyio.sleep(_RETRY_SECONDS)
    for tenant, names in sorted(named.items()):
        for server in sorted(names - servers):
            _log.warning(
                "tool_rule_unknown_server",
                tenant=tenant,
                server=server,
                servers=sorted(servers),
                detail=f'a rule of the tenant "{tenant}" names the MCP server "{server}", which the gateway does not '
                "have: it matches no tool (a typo? a server not configured yet?)",
            )
