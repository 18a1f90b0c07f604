"""What mcp-client-service reports: tool calls by server, tool and outcome, and each server's state.

Call counts are counted as calls end; server states (circuit breaker, connection, tools) are read
from the registry when Prometheus scrapes, so they are never stale. Each call's outcome also goes on
its ``mcp_tool_call`` span (``tool.outcome``; ERROR unless ``ok``), where timeouts, invalid arguments
and an unavailable server can be told apart.
"""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry import trace
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mcp_client_service.calls.call import CallRecord
from mcp_client_service.registry.server_registry import ServerRegistry
from mcp_client_service.tenants.servers import TenantServers
from suite_common.metrics import TENANT_SERVERS_LABEL, CallMetrics
from suite_common.tracing import mark_span_failed

__all__ = ["GatewayTelemetry"]

_CIRCUIT_STATES = ("closed", "half_open", "open")


class _ServerStates(Collector):
    def __init__(self, registry: ServerRegistry, tenants: TenantServers | None) -> None:
        self._registry = registry
        self._tenants = tenants

    def collect(self) -> Iterator[GaugeMetricFamily]:
        circuit = GaugeMetricFamily(
            "mcp_server_circuit_state", "1 for the circuit breaker state each server is in.", labels=["server", "state"]
        )
        tools = GaugeMetricFamily("mcp_server_tools", "Tools each server lists (valid ones).", labels=["server"])
        serving = GaugeMetricFamily("mcp_server_serving", "1 while a server has a working session.", labels=["server"])
        for name, connection in list(self._registry.connections.items()):
            state = connection.breaker.state
            for candidate in _CIRCUIT_STATES:
                circuit.add_metric([name, candidate], 1.0 if state == candidate else 0.0)
            tools.add_metric([name], float(len(connection.listing.tools)))
            serving.add_metric([name], 1.0 if connection.serving else 0.0)
        yield from (circuit, tools, serving)
        if self._tenants is not None:
            # Totals only: a label per tenant or tenant server would swamp Prometheus.
            yield GaugeMetricFamily(
                "mcp_tenant_sessions_open",
                "Sessions open to tenants' own servers (bounded by MCP_CLIENT_TENANT_MAX_SESSIONS).",
                value=float(len(self._tenants.sessions)),
            )
            yield GaugeMetricFamily(
                "mcp_tenant_servers", "Tenants' own servers this replica knows of.", value=float(self._tenants.count())
            )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # collected at scrape time only; nothing to check when registering


class GatewayTelemetry:
    def __init__(
        self, metrics: CollectorRegistry, servers: ServerRegistry, tenants: TenantServers | None = None
    ) -> None:
        self._calls = CallMetrics(
            metrics,
            "mcp_tool_call",
            labels=["server", "tool", "outcome"],
            counted="Tool calls by server, tool and outcome "
            "(ok, tool_error, invalid_arguments, timeout, cancelled, ...).",
            timed="Time of one tool call through the gateway, by server, tool and outcome.",
        )
        metrics.register(_ServerStates(servers, tenants))

    def call(self, record: CallRecord) -> None:
        """Counted, timed, and noted on the call's span (the current one: calls end inside it).

        Calls of tenants' own servers are counted together (``TENANT_SERVERS_LABEL``): thousands of tenants' servers and
        tools as label values would swamp Prometheus. Their span says which.
        """
        server, tool = (
            (record.server, record.tool) if record.tenant is None else (TENANT_SERVERS_LABEL, TENANT_SERVERS_LABEL)
        )
        self._calls.observe(server, tool, record.outcome, seconds=record.duration_ms / 1000)
        span = trace.get_current_span()
        span.set_attributes({"tool.server": record.server, "tool.outcome": record.outcome})
        if record.tenant is not None:
            span.set_attribute("tool.tenant", record.tenant)
        if record.outcome != "ok":
            mark_span_failed(span, record.outcome)
