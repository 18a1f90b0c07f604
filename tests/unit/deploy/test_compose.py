"""deploy/docker-compose.yml: a valid Compose file that starts the suite in order and configures every service."""

from __future__ import annotations

import json
import re
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from mcp_client_service.config.servers_file import HttpServerConfig, parse_servers_config
from suite_common.mcp_tool import MCP_PATH
from suite_common.ssrf import EgressPolicy, blocked_reason
from unit.deploy.components import (
    COMPONENTS,
    DEPLOY,
    ENV_EXAMPLE,
    ROOT,
    Component,
    component,
    interpolate,
    parse_env_file,
)

COMPOSE_FILE = DEPLOY / "docker-compose.yml"
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
SERVICES: dict[str, Any] = COMPOSE["services"]

# Who must be healthy before whom: the order in which a request travels, backwards.
STARTUP_ORDER = {
    "agent-service": {"completion-service", "mcp-client-service", "postgres", "redis"},
    "mcp-client-service": {"mcp-rag-tool", "mcp-web-search", "postgres"},
    "mcp-rag-tool": {"qdrant"},
}


def _compose_spec_schema() -> dict[str, Any]:
    # The Compose specification's JSON schema (compose-spec/compose-spec, Apache-2.0), as check-jsonschema
    # vendors it: validated offline, no docker needed.
    text = (files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _environment(item: Component, shell: dict[str, str] | None = None) -> dict[str, str]:
    """What the container gets: the env_file(s) that exist, then `environment:`, interpolated from ``shell``."""
    service = SERVICES[item.name]
    result: dict[str, str] = {}
    for entry in service.get("env_file", []):
        path = (COMPOSE_FILE.parent / (entry["path"] if isinstance(entry, dict) else entry)).resolve()
        if path == (ROOT / ".env").resolve():
            continue  # a developer's own overrides, not part of the checked-in configuration
        result.update(parse_env_file(path.read_text(encoding="utf-8"))[0])
    environment = service.get("environment", {})
    assert isinstance(environment, dict), f"{item.name}: write environment as a mapping"
    result.update({name: interpolate(str(value), shell or {}) for name, value in environment.items()})
    return result


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert duration, "an empty duration"
    assert match, f"not a duration: {duration!r}"
    return int(match[1] or 0) * 60 + int(match[2] or 0)


def test_the_compose_file_follows_the_compose_specification() -> None:
    errors = sorted(jsonschema.Draft202012Validator(_compose_spec_schema()).iter_errors(COMPOSE), key=str)
    assert [f"{'/'.join(map(str, error.path))}: {error.message}" for error in errors] == []


def test_the_schema_check_would_catch_a_misspelt_key() -> None:
    broken = json.loads(json.dumps(COMPOSE))
    broken["services"]["agent-service"]["helthcheck"] = broken["services"]["agent-service"].pop("healthcheck")
    assert not jsonschema.Draft202012Validator(_compose_spec_schema()).is_valid(broken)


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_every_service_and_tool_is_built_from_its_own_dockerfile_at_the_repository_root(item: Component) -> None:
    service = SERVICES[item.name]
    assert (COMPOSE_FILE.parent / service["build"]["context"]).resolve() == ROOT
    assert (ROOT / service["build"]["dockerfile"]) == item.dockerfile
    assert item.dockerfile.is_file()
    assert service["image"].split(":")[0] == item.image


def test_redis_postgres_and_qdrant_run_beside_the_suite_with_their_data_in_named_volumes() -> None:
    declared = set(COMPOSE["volumes"])
    for name, data_dir in [("qdrant", "/qdrant/storage"), ("redis", "/data"), ("postgres", "/var/lib/postgresql/data")]:
        mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in SERVICES[name]["volumes"]}
        assert mounts.get(data_dir) in declared, f"{name} keeps {data_dir} in a named volume"


def test_only_agent_service_and_grafana_are_published_and_only_on_loopback() -> None:
    published = {name: service["ports"] for name, service in SERVICES.items() if service.get("ports")}
    assert published == {"agent-service": ["127.0.0.1:8000:8000"], "grafana": ["127.0.0.1:3000:3000"]}
    assert SERVICES["grafana"]["profiles"] == ["observability"]  # not started unless asked for


def test_each_service_starts_once_what_it_calls_is_healthy() -> None:
    for name, needs in STARTUP_ORDER.items():
        depends_on = SERVICES[name]["depends_on"]
        assert set(depends_on) == needs
        assert {dependency["condition"] for dependency in depends_on.values()} == {"service_healthy"}
        for dependency in needs:
            assert SERVICES[dependency]["healthcheck"]["test"], f"{dependency} needs a healthcheck to be waited for"


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_the_healthcheck_asks_readiness_on_the_port_the_service_listens_on(item: Component) -> None:
    port = _environment(item)[item.env("port")]
    command = " ".join(SERVICES[item.name]["healthcheck"]["test"])
    assert SERVICES[item.name]["healthcheck"]["test"][0] == "CMD"
    assert f"http://127.0.0.1:{port}/readyz" in command


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_each_container_gets_every_setting_of_its_service_and_the_service_accepts_them(
    item: Component, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = _environment(item)
    missing = [name for name in item.settings_env if name not in environment and name not in _documented_unset()]
    assert missing == [], f"neither {ENV_EXAMPLE.name} nor the compose file gives {item.name}: {missing}"
    settings = item.load(
        {name: value for name, value in environment.items() if name.startswith(item.prefix)}, monkeypatch
    )
    assert settings.host == "0.0.0.0"


def _documented_unset() -> set[str]:
    """Settings .env.example names but leaves unset (optional ones without a default value, and secrets)."""
    return set(parse_env_file(ENV_EXAMPLE.read_text(encoding="utf-8"))[1])


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_secrets_come_from_the_shell_and_only_to_the_container_that_reads_them(item: Component) -> None:
    for name in item.secret_env:
        value = SERVICES[item.name]["environment"].get(name)
        assert str(value).startswith("${"), f"{name}: pass it from the shell, as ${{...}}"
        others = [
            other
            for other, service in SERVICES.items()
            if other != item.name and name in service.get("environment", {})
        ]
        assert others == []
    assert not [name for name in item.secret_env if name in parse_env_file(ENV_EXAMPLE.read_text(encoding="utf-8"))[0]]


def test_agent_service_and_mcp_client_service_share_one_secret_which_a_shell_variable_replaces() -> None:
    shell = {"LOOPSUITE_MCP_SERVICE_SECRET": "from-the-shell"}
    agent = _environment(component("agent-service"), shell)["AGENT_MCP_SERVICE_SECRET"]
    gateway = _environment(component("mcp-client-service"), shell)["MCP_CLIENT_SERVICE_SECRET"]
    assert agent == gateway == "from-the-shell"
    assert _environment(component("agent-service"))["AGENT_MCP_SERVICE_SECRET"] != ""


def test_agent_service_calls_the_other_services_by_their_compose_names_and_ports() -> None:
    environment = _environment(component("agent-service"))
    for setting, target in [
        ("AGENT_COMPLETION_URL", "completion-service"),
        ("AGENT_MCP_CLIENT_URL", "mcp-client-service"),
    ]:
        url = urlsplit(environment[setting])
        target_port = _environment(component(target))[component(target).env("port")]
        assert (url.hostname, str(url.port)) == (target, target_port)


def test_agent_service_stores_its_runs_in_the_postgres_container_with_the_credentials_it_was_created_with() -> None:
    for shell in ({}, {"POSTGRES_USER": "runs", "POSTGRES_PASSWORD": "from-the-shell", "POSTGRES_DB": "agent"}):
        url = urlsplit(_environment(component("agent-service"), shell)["AGENT_DATABASE_URL"])
        postgres = {name: interpolate(str(value), shell) for name, value in SERVICES["postgres"]["environment"].items()}
        assert url.scheme == "postgresql"
        assert (url.hostname, url.port) == ("postgres", 5432)
        assert (url.username, url.password, url.path) == (
            postgres["POSTGRES_USER"],
            postgres["POSTGRES_PASSWORD"],
            f"/{postgres['POSTGRES_DB']}",
        )
        assert url.password, "a password, from the shell or the laptop default"
    assert SERVICES["postgres"]["image"].startswith("postgres:")


def test_agent_service_counts_its_runs_per_tenant_in_the_redis_container() -> None:
    url = urlsplit(_environment(component("agent-service"))["AGENT_REDIS_URL"])
    assert url.scheme == "redis"
    assert (url.hostname, url.port) == ("redis", 6379)
    assert SERVICES["redis"]["image"].startswith("redis:7")
    assert "redis-cli ping" in SERVICES["redis"]["healthcheck"]["test"][1]


def test_postgres_counts_as_healthy_only_once_it_accepts_connections_over_tcp() -> None:
    # The image's first start runs a temporary server on the Unix socket only; over TCP pg_isready waits for
    # the real one. $$ leaves the variables to the container's shell.
    command = SERVICES["postgres"]["healthcheck"]["test"]
    assert command[0] == "CMD-SHELL"
    assert "pg_isready" in command[1]
    assert "--host=127.0.0.1" in command[1]
    assert "$$POSTGRES_USER" in command[1]


def test_mcp_client_service_reaches_both_tool_servers_over_streamable_http_by_compose_name() -> None:
    environment = _environment(component("mcp-client-service"))
    mounted = {
        volume.split(":")[1]: COMPOSE_FILE.parent / volume.split(":")[0]
        for volume in SERVICES["mcp-client-service"]["volumes"]
    }
    servers_file: Path = mounted[environment["MCP_CLIENT_SERVERS_FILE"]]
    servers = parse_servers_config(servers_file.read_text(encoding="utf-8"), source=str(servers_file)).servers
    targets = set()
    for server in servers.values():
        assert isinstance(server, HttpServerConfig)
        url = urlsplit(server.url)
        tool = component(str(url.hostname))
        assert (url.port, url.path) == (int(_environment(tool)[tool.env("port")]), MCP_PATH)
        targets.add(tool.name)
    assert targets == {"mcp-rag-tool", "mcp-web-search"}


def test_the_ssrf_guard_of_mcp_client_service_lets_it_reach_the_compose_network() -> None:
    environment = _environment(component("mcp-client-service"))
    policy = EgressPolicy.create(
        allow_loopback=environment["MCP_CLIENT_SSRF_ALLOW_LOOPBACK"] == "true",
        allow_private=environment["MCP_CLIENT_SSRF_ALLOW_PRIVATE"] == "true",
        allowed_cidrs=[cidr for cidr in environment["MCP_CLIENT_SSRF_ALLOWED_NETWORKS"].split(",") if cidr],
    )
    assert blocked_reason("172.18.0.5", policy) is None  # a container on docker's default address pool
    assert blocked_reason("169.254.169.254", policy) is not None  # cloud metadata stays out of reach


def test_the_rag_tool_keeps_its_index_in_the_qdrant_container() -> None:
    url = urlsplit(_environment(component("mcp-rag-tool"))["RAG_QDRANT_URL"])
    assert (url.hostname, url.port) == ("qdrant", 6333)


LONGEST_REQUEST = {
    "agent-service": "AGENT_RUN_DEADLINE_SECONDS",
    "completion-service": "COMPLETION_REQUEST_TIMEOUT_SECONDS",
    "mcp-client-service": "MCP_CLIENT_CALL_TIMEOUT_SECONDS",
}


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_a_stopping_container_drains_its_longest_request_before_docker_kills_it(item: Component) -> None:
    environment = _environment(item)
    drain = float(environment[item.env("shutdown_grace_seconds")])
    if item.name in LONGEST_REQUEST:
        assert drain >= float(environment[LONGEST_REQUEST[item.name]])
    # After the drain, interrupted work sends its last event (suite_common.serve allows 2 s).
    assert _seconds(SERVICES[item.name]["stop_grace_period"]) >= drain + 5
