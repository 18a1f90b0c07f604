"""What the deploy checks know about the suite: its components, their settings, and the files that deploy them.

Everything else (ports, setting names, secrets, health routes) is read from the code, so that the
Dockerfiles, compose file and manifests are checked against what the services really do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import get_args
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr

from agent_service.settings import AgentSettings
from completion_service.settings import CompletionSettings
from mcp_client_service.app import connection_options
from mcp_client_service.config.servers_file import HttpServerConfig, parse_servers_config
from mcp_client_service.settings import MCPClientSettings
from mcp_rag_tool.settings import RagSettings
from mcp_web_search.settings import WebSearchSettings
from suite_common.health import health_routes
from suite_common.settings import ServiceSettings
from suite_common.ssrf import blocked_reason

__all__ = [
    "COMPONENTS",
    "DEPLOY",
    "ENV_EXAMPLE",
    "HEALTH_PATHS",
    "ROOT",
    "Component",
    "component",
    "interpolate",
    "parse_env_file",
    "shared_servers_policy_check",
]

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
ENV_EXAMPLE = ROOT / ".env.example"

HEALTH_PATHS = {route.path for route in health_routes()}
"""``/healthz`` (alive) and ``/readyz`` (ready), as every service and tool serves them."""


@dataclass(frozen=True)
class Component:
    """A service or tool; its compose service, Deployment, Service, image and Dockerfile are all called ``name``."""

    name: str
    settings: type[ServiceSettings]
    package: str
    """Its folder, holding pyproject.toml and src/."""

    @property
    def prefix(self) -> str:
        return str(self.settings.model_config.get("env_prefix", ""))

    @property
    def port(self) -> int:
        port = self.settings.model_fields["port"].default
        assert isinstance(port, int)
        return port

    @property
    def dockerfile(self) -> Path:
        return DEPLOY / "docker" / f"{self.name}.Dockerfile"

    @property
    def image(self) -> str:
        return f"loopsuite/{self.name}"

    def env(self, field: str) -> str:
        return f"{self.prefix}{field.upper()}"

    @property
    def settings_env(self) -> list[str]:
        """Every environment variable the component reads."""
        return [self.env(field) for field in self.settings.model_fields]

    @property
    def secret_env(self) -> list[str]:
        """The variables that hold secrets (``SecretStr`` fields): never in a ConfigMap or a checked-in value."""
        return [
            self.env(field) for field, info in self.settings.model_fields.items() if _mentions_secret(info.annotation)
        ]

    @property
    def plain_env(self) -> list[str]:
        return [name for name in self.settings_env if name not in self.secret_env]

    def load(self, environment: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> ServiceSettings:
        """The settings the component would read from exactly ``environment`` (nothing else of this process)."""
        for name in list(os.environ):
            if name.startswith(self.prefix):
                monkeypatch.delenv(name)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        return self.settings()


COMPONENTS = (
    Component("agent-service", AgentSettings, "services/agent_service"),
    Component("completion-service", CompletionSettings, "services/completion_service"),
    Component("mcp-client-service", MCPClientSettings, "services/mcp_client_service"),
    Component("mcp-rag-tool", RagSettings, "tools/mcp_rag_tool"),
    Component("mcp-web-search", WebSearchSettings, "tools/mcp_web_search"),
)


def component(name: str) -> Component:
    return next(item for item in COMPONENTS if item.name == name)


def _mentions_secret(annotation: object) -> bool:
    return annotation is SecretStr or any(_mentions_secret(arg) for arg in get_args(annotation))


_ENV_LINE = re.compile(r"^(?P<comment>#\s*)?(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")


def parse_env_file(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(set, commented_out)``: ``NAME=value`` lines, and ``# NAME=value`` lines that document a variable."""
    active: dict[str, str] = {}
    commented: dict[str, str] = {}
    for line in text.splitlines():
        match = _ENV_LINE.match(line.strip())
        if match:
            target = commented if match["comment"] else active
            target[match["name"]] = match["value"]
    return active, commented


_INTERPOLATION = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: str, environment: Mapping[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}`` and ``$$``, as ``docker compose`` reads them."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match["name"], match["op"], match["arg"] or ""
        current = environment.get(name)
        missing = not current if op in (":-", ":?") else current is None
        if missing and op and op.endswith("?"):
            raise ValueError(f"${{{name}}} is required: {arg}")
        if missing and op:
            return arg
        return current or ""

    return _INTERPOLATION.sub(replace, value)


def shared_servers_policy_check(settings: ServiceSettings, servers_file: Path, private_address: str) -> None:
    """The gateway's SSRF guard, as ``settings`` build it, reaches each server of ``servers_file`` by its name
    (which resolves to ``private_address`` inside the deployment) without opening private networks: a tenant's
    server at that address stays refused, and the cloud metadata endpoint stays out of reach for both."""
    assert isinstance(settings, MCPClientSettings)
    options = connection_options(settings, environ={})
    servers = parse_servers_config(servers_file.read_text(encoding="utf-8"), source=str(servers_file)).servers
    assert servers
    for server in servers.values():
        assert isinstance(server, HttpServerConfig)
        shared = options.egress_for(server.url)
        assert shared.trusts_host(str(urlsplit(server.url).hostname)), server.url
        assert blocked_reason("169.254.169.254", shared) is not None
    tenant = options.for_tenant_servers().egress_for("http://tenant-server.example/mcp")
    assert blocked_reason(private_address, tenant) is not None, "a tenant could reach the deployment's network"
    assert not tenant.allowed_hosts
