"""The outbound policy's settings, read the same way by the gateway (MCP_CLIENT_*) and the web tool (WEB_SEARCH_*)."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from mcp_client_service.settings import MCPClientSettings
from mcp_web_search.settings import WebSearchSettings
from suite_common.egress_settings import EgressSettings
from suite_common.hosts_file import HostsFileResolver
from suite_common.ssrf import EgressPolicy

SERVICES = [(MCPClientSettings, "MCP_CLIENT_"), (WebSearchSettings, "WEB_SEARCH_")]


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_CLIENT_SERVICE_SECRET", "s3cret")


@pytest.mark.parametrize(("settings_type", "prefix"), SERVICES)
def test_by_default_every_kind_is_blocked_and_names_resolve_by_dns(
    settings_type: type[EgressSettings], prefix: str
) -> None:
    settings = settings_type()

    assert settings.egress_policy() == EgressPolicy()
    assert settings.egress_resolver() is None


@pytest.mark.parametrize(("settings_type", "prefix"), SERVICES)
def test_each_switch_and_both_network_lists_reach_the_policy(
    monkeypatch: pytest.MonkeyPatch, settings_type: type[EgressSettings], prefix: str
) -> None:
    for switch in ("LOOPBACK", "PRIVATE", "LINK_LOCAL", "MULTICAST", "CGNAT", "ULA"):
        monkeypatch.setenv(f"{prefix}SSRF_ALLOW_{switch}", "true")
    monkeypatch.setenv(f"{prefix}SSRF_BLOCKED_NETWORKS", "10.9.0.0/16, 2001:4860::/32")
    monkeypatch.setenv(f"{prefix}SSRF_ALLOWED_NETWORKS", '["169.254.169.254/32"]')

    policy = settings_type().egress_policy()

    assert policy == EgressPolicy.create(
        allow_loopback=True,
        allow_private=True,
        allow_link_local=True,
        allow_multicast=True,
        allow_cgnat=True,
        allow_ula=True,
        blocked_cidrs=["10.9.0.0/16", "2001:4860::/32"],
        allowed_cidrs=["169.254.169.254/32"],
    )


@pytest.mark.parametrize(("settings_type", "prefix"), SERVICES)
def test_a_hosts_file_gives_the_guard_a_resolver_that_reads_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings_type: type[EgressSettings], prefix: str
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.1.0.5 rag.internal\n", encoding="utf-8")
    monkeypatch.setenv(f"{prefix}HOSTS_FILE", str(hosts))

    resolver = settings_type().egress_resolver()

    assert isinstance(resolver, HostsFileResolver)
    assert resolver.lookup("rag.internal") == ["10.1.0.5"]


@pytest.mark.parametrize(("settings_type", "prefix"), SERVICES)
def test_a_hosts_file_that_is_not_a_file_is_refused_at_start_up_and_blank_means_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings_type: type[EgressSettings], prefix: str
) -> None:
    monkeypatch.setenv(f"{prefix}HOSTS_FILE", str(tmp_path / "absent"))
    with pytest.raises(pydantic.ValidationError, match="is not a file"):
        settings_type()

    monkeypatch.setenv(f"{prefix}HOSTS_FILE", " ")
    assert settings_type().hosts_file is None


@pytest.mark.parametrize(("settings_type", "prefix"), SERVICES)
def test_a_malformed_blocked_network_is_refused_at_start_up(
    monkeypatch: pytest.MonkeyPatch, settings_type: type[EgressSettings], prefix: str
) -> None:
    monkeypatch.setenv(f"{prefix}SSRF_BLOCKED_NETWORKS", "10.0.0.0/33")

    with pytest.raises(pydantic.ValidationError, match="not a network in CIDR notation"):
        settings_type()
