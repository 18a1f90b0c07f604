"""The outbound policy's settings, the same for every service that connects where others choose.

mcp-client-service (``MCP_CLIENT_SSRF_*``: HTTP MCP servers) and the web tool (``WEB_SEARCH_SSRF_*``:
``fetch_url``) subclass ``EgressSettings`` instead of ``ServiceSettings``: one switch per kind of
address (each closed by default), extra blocked networks, allowed networks that override every
block, and an optional hosts file consulted before DNS. ``egress_policy()`` and ``egress_resolver()``
turn them into what the guard takes (``suite_common.ssrf``, ``suite_common.hosts_file``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from suite_common.hosts_file import HostsFileResolver
from suite_common.settings import CidrList, ServiceSettings, blank_as_none
from suite_common.ssrf import EgressPolicy, Resolver

__all__ = ["EgressSettings"]


def _readable_file(path: Path | None) -> Path | None:
    if path is not None and not path.is_file():
        raise ValueError(f"{path} is not a file (a hosts-format file: `<address> <name>...` per line)")
    return path


class EgressSettings(ServiceSettings):
    """``ServiceSettings`` plus what the service's outbound connections may reach (its SSRF guard)."""

    ssrf_allow_loopback: bool = False
    """Let outbound connections reach loopback addresses (127.0.0.0/8, ::1): local mode and tests."""
    ssrf_allow_private: bool = False
    """Let outbound connections reach private networks (RFC 1918: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16).
    CGNAT and IPv6 unique local addresses have switches of their own."""
    ssrf_allow_link_local: bool = False
    """Let outbound connections reach link-local addresses (169.254.0.0/16, fe80::/10). Cloud metadata endpoints
    (169.254.169.254 and the like) stay blocked: only ssrf_allowed_networks opens them."""
    ssrf_allow_multicast: bool = False
    """Let outbound connections reach multicast addresses (224.0.0.0/4, ff00::/8)."""
    ssrf_allow_cgnat: bool = False
    """Let outbound connections reach shared carrier-grade NAT addresses (100.64.0.0/10; Alibaba Cloud's
    metadata endpoint 100.100.100.200 stays blocked)."""
    ssrf_allow_ula: bool = False
    """Let outbound connections reach IPv6 unique local addresses (fc00::/7, the usual IPv6 cluster networks;
    AWS's metadata endpoint fd00:ec2::254 stays blocked)."""
    ssrf_blocked_networks: CidrList = Field(default_factory=list)
    """CIDRs outbound connections may never reach, on top of the kinds above (comma-separated or JSON), e.g.
    public addresses of your own infrastructure."""
    ssrf_allowed_networks: CidrList = Field(default_factory=list)
    """CIDRs outbound connections may reach whatever their kind (comma-separated or JSON), such as the one
    subnet of a cluster's services: they override every block, blocked networks and metadata endpoints
    included, so keep them narrow."""
    hosts_file: Annotated[Path | None, BeforeValidator(blank_as_none), AfterValidator(_readable_file)] = None
    """A hosts-format file (`<address> <name>...` per line) the SSRF guard consults before DNS, read again when it
    changes: pins names for a deployment, like curl's --resolve. Its addresses are still checked by the policy."""

    def egress_policy(self, *, trusted_hosts: Iterable[str] = ()) -> EgressPolicy:
        """The policy these settings describe; ``trusted_hosts`` are names allowed whatever they resolve to."""
        return EgressPolicy.create(
            allow_loopback=self.ssrf_allow_loopback,
            allow_private=self.ssrf_allow_private,
            allow_link_local=self.ssrf_allow_link_local,
            allow_multicast=self.ssrf_allow_multicast,
            allow_cgnat=self.ssrf_allow_cgnat,
            allow_ula=self.ssrf_allow_ula,
            blocked_cidrs=self.ssrf_blocked_networks,
            allowed_cidrs=self.ssrf_allowed_networks,
            allowed_hosts=trusted_hosts,
        )

    def egress_resolver(self) -> Resolver | None:
        """The guard's resolver: the hosts file, then DNS; ``None`` (DNS only) without a hosts file."""
        return None if self.hosts_file is None else HostsFileResolver(self.hosts_file)
