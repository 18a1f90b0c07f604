"""deploy/observability: the Prometheus config, alert rules and Grafana dashboard name only metrics the services
really expose, and compose wires them to the services. (``make test`` also runs ``promtool check config``,
``promtool check rules`` and ``promtool test rules`` on them.)"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from starlette.applications import Starlette

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from mcp_client_service.app import create_app as create_gateway_app
from mcp_client_service.config.servers_file import ServersFile
from mcp_client_service.settings import MCPClientSettings
from unit.deploy.components import COMPONENTS, DEPLOY

pytestmark = pytest.mark.anyio

OBSERVABILITY = DEPLOY / "observability"
DASHBOARD: dict[str, Any] = json.loads((OBSERVABILITY / "grafana" / "dashboards" / "loopsuite.json").read_text())
RULES: dict[str, Any] = yaml.safe_load((OBSERVABILITY / "alerts.yml").read_text())
PROMETHEUS: dict[str, Any] = yaml.safe_load((OBSERVABILITY / "prometheus.yml").read_text())
COMPOSE: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",), "info": ("_info",)}
_NOT_METRICS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_SCRAPE_METRICS = {"up"}
"""What Prometheus adds to every target itself."""


async def _exposed_names(app: Starlette) -> set[str]:
    """Every sample name the app's /metrics can carry, labelled series included (their families are listed
    before any series exists)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://service") as http:
        page = (await http.get("/metrics")).text
    names: set[str] = set()
    for family in text_string_to_metric_families(page):
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture(scope="module")
async def exposed() -> set[str]:
    secret = SecretStr("test-secret")
    apps = [
        create_agent_app(AgentSettings(mcp_service_secret=secret)),
        create_completion_app(CompletionSettings(demo_enabled=True)),
        create_gateway_app(MCPClientSettings(service_secret=secret), servers=ServersFile(mcpServers={})),
    ]
    names = set(_SCRAPE_METRICS)
    for app in apps:
        names |= await _exposed_names(app)
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: label matchers, grouping clauses, ranges and functions
    removed, what remains of the identifiers."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr))
    return {name for name in names if name not in _NOT_METRICS and not re.fullmatch(r"[0-9.e+-]+", name)}


def _dashboard_exprs() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in DASHBOARD["panels"] for target in panel.get("targets", [])]


def _rule_exprs() -> list[tuple[str, str]]:
    return [(rule["alert"], rule["expr"]) for group in RULES["groups"] for rule in group["rules"]]


def test_the_name_finder_sees_through_matchers_groupings_and_functions() -> None:
    expr = 'histogram_quantile(0.95, sum by (model, le) (rate(llm_call_duration_seconds_bucket{outcome="ok"}[5m])))'
    assert metric_names(expr) == {"llm_call_duration_seconds_bucket"}
    assert metric_names('sum(rate(a_total[5m])) / sum(rate(b_total{x=~"y|z"}[5m])) > 0.05') == {"a_total", "b_total"}


async def test_every_dashboard_query_names_only_metrics_the_services_expose(exposed: set[str]) -> None:
    assert _dashboard_exprs()
    unknown = {(title, name) for title, expr in _dashboard_exprs() for name in metric_names(expr) - exposed}
    assert unknown == set()


async def test_every_alert_rule_names_only_metrics_the_services_expose(exposed: set[str]) -> None:
    assert len(_rule_exprs()) >= 4
    unknown = {(alert, name) for alert, expr in _rule_exprs() for name in metric_names(expr) - exposed}
    assert unknown == set()


async def test_the_check_catches_a_misspelt_metric(exposed: set[str]) -> None:
    assert metric_names("sum(rate(agent_run_total[5m]))") - exposed == {"agent_run_total"}


def test_the_dashboard_shows_what_an_operator_looks_at_first() -> None:
    queried = {name for _, expr in _dashboard_exprs() for name in metric_names(expr)}
    assert {
        "agent_runs_total",  # runs by outcome
        "agent_run_rounds_bucket",  # rounds per run
        "llm_call_duration_seconds_bucket",  # LLM latency by model
        "llm_tokens_total",  # tokens by model
        "mcp_tool_call_duration_seconds_bucket",  # tool latency by server
        "mcp_tool_calls_total",  # tool errors by server
        "mcp_server_circuit_state",  # circuit states
    } <= queried
    assert {panel["datasource"]["uid"] for panel in DASHBOARD["panels"] if "datasource" in panel} == {"${datasource}"}


def test_the_alert_rules_cover_errors_breakers_latency_and_budgets() -> None:
    alerts = {alert for alert, _ in _rule_exprs()}
    assert {
        "LoopsuiteRunErrorRateHigh",
        "LoopsuiteToolServerCircuitOpen",
        "LoopsuiteRunLatencyP99High",
        "LoopsuiteRunBudgetExhaustion",
    } <= alerts


def test_prometheus_scrapes_each_service_on_the_port_compose_gives_it() -> None:
    [job] = PROMETHEUS["scrape_configs"]
    targets = {target for group in job["static_configs"] for target in group["targets"]}
    services = {item.name for item in COMPONENTS} - {"mcp-rag-tool", "mcp-web-search"}  # the tools serve no /metrics
    expected = set()
    for name in services:
        environment = COMPOSE["services"][name]["environment"]
        [port] = [value for key, value in environment.items() if key.endswith("_PORT")]
        expected.add(f"{name}:{port}")
    assert targets == expected


def test_compose_mounts_the_config_rules_and_dashboards_it_provisions() -> None:
    for service in ("prometheus", "grafana"):
        for volume in COMPOSE["services"][service]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), volume
    provider = yaml.safe_load((OBSERVABILITY / "grafana/provisioning/dashboards/loopsuite.yml").read_text())
    mounted = {volume.split(":")[1] for volume in COMPOSE["services"]["grafana"]["volumes"]}
    assert provider["providers"][0]["options"]["path"] in mounted
