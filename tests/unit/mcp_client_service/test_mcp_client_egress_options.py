"""The gateway's outbound policy per server: the servers file's own host names trusted, tenants' servers never."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from mcp_client_service.app import connection_options
from mcp_client_service.settings import MCPClientSettings
from suite_common.hosts_file import HostsFileResolver
from suite_common.ssrf import EgressBlocked, EgressPolicy, resolve_allowed

pytestmark = pytest.mark.anyio


def _settings(**values: object) -> MCPClientSettings:
    return MCPClientSettings(service_secret=SecretStr("s3cret"), **values)  # type: ignore[arg-type]


async def _compose_dns(host: str, port: int) -> list[str]:
    return ["172.18.0.5"]  # every name on the compose network: a private address


async def test_a_shared_server_is_reached_at_its_own_host_whatever_it_resolves_to() -> None:
    options = connection_options(_settings(), environ={})
    policy = options.egress_for("http://mcp-rag-tool:8101/mcp")

    assert await resolve_allowed("mcp-rag-tool", 8101, policy, resolver=_compose_dns) == ["172.18.0.5"]
    with pytest.raises(EgressBlocked, match="a private address"):  # a redirect elsewhere is still checked
        await resolve_allowed("elsewhere", 80, policy, resolver=_compose_dns)


async def test_a_tenant_server_gets_the_plain_policy_even_at_a_shared_servers_host() -> None:
    options = connection_options(_settings(), environ={}).for_tenant_servers()
    policy = options.egress_for("http://mcp-rag-tool:8101/mcp")

    assert policy == _settings().egress_policy() == EgressPolicy()
    with pytest.raises(EgressBlocked, match="mcp-rag-tool resolves to a private address"):
        await resolve_allowed("mcp-rag-tool", 8101, policy, resolver=_compose_dns)


def test_an_ip_literal_in_the_servers_file_stays_judged_by_the_address_rules() -> None:
    options = connection_options(_settings(), environ={})

    assert options.egress_for("http://169.254.169.254/mcp") == options.egress
    assert options.egress_for("http://[fd00::1]:80/mcp") == options.egress


def test_the_hosts_file_is_the_resolver_of_every_connection(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.1.0.5 rag.internal\n", encoding="utf-8")

    options = connection_options(_settings(hosts_file=hosts), environ={})

    assert isinstance(options.resolver, HostsFileResolver)
    assert options.for_tenant_servers().resolver is options.resolver
