"""The SSRF guard's core: which addresses an outbound request may reach, decided after DNS.

Outbound HTTP to a URL a user or a model chose (``fetch_url``, a configured tool server) must
not reach the machine's own services, the private network, or a cloud metadata endpoint. The
decision is taken on the *resolved* addresses, never on the host name: a name can point
anywhere. ``blocked_reason`` is the pure rule; ``resolve_allowed`` and ``check_url`` apply it
to every address a name resolves to. Nothing here depends on an HTTP client: the guard that pins
the checked address for the connection is ``suite_common.egress`` (one network backend for httpcore
and httpcore2), put under httpx by ``suite_common.ssrf_httpx`` and under httpx2 by mcp-client-service.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import urlsplit

import anyio

__all__ = [
    "ALLOWED_SCHEMES",
    "EgressBlocked",
    "EgressError",
    "EgressPolicy",
    "HostNotResolved",
    "IPAddress",
    "IPNetwork",
    "Resolver",
    "blocked_reason",
    "check_url",
    "normalize_host",
    "parse_http_url",
    "resolve_allowed",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# host, port -> the addresses (as strings) the host name resolves to.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

ALLOWED_SCHEMES = frozenset({"http", "https"})

_Category = Literal[
    "loopback", "private", "cgnat", "ula", "metadata", "link-local", "unspecified", "multicast", "reserved"
]


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class EgressError(Exception):
    """An outbound request refused before any byte was sent; ``message`` is safe to show to a caller."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host
        self.message = message


class EgressBlocked(EgressError):
    """The destination is not allowed by the policy: a blocked address, scheme or URL shape.

    ``address`` (the resolved address that was refused, or ``None``) is for logs: the message
    names an address only when the caller gave it as a literal, so the answer never maps the
    inside of the network for whoever asked. ``code`` is a stable machine code.
    """

    code = "egress_blocked"

    def __init__(self, host: str, reason: str, *, address: str | None = None, message: str | None = None) -> None:
        shown = f"{host} resolves to {reason}" if _literal(host) is None else f"{host} is {reason}"
        super().__init__(host, message or f"Refused to connect: {shown}, which this server may not reach.")
        self.reason = reason
        self.address = address


class HostNotResolved(EgressError):
    """The host name has no address (unknown name, or DNS failed)."""

    code = "host_not_resolved"

    def __init__(self, host: str) -> None:
        super().__init__(host, f"The host name {host} could not be resolved: check the spelling of the URL.")


def _networks(cidrs: Iterable[str | IPNetwork]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) if isinstance(cidr, str) else cidr for cidr in cidrs)


def normalize_host(host: str) -> str:
    """A host name as compared: lower case, without the trailing dot or IPv6 brackets."""
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


@dataclass(frozen=True)
class EgressPolicy:
    """What outbound requests may reach besides the public internet.

    One switch per kind of address, each closed by default:

    - ``allow_loopback``: 127.0.0.0/8 and ::1 (local mode, tests).
    - ``allow_private``: the RFC 1918 networks (10/8, 172.16/12, 192.168/16).
    - ``allow_link_local``: 169.254.0.0/16 and fe80::/10.
    - ``allow_multicast``: 224.0.0.0/4 and ff00::/8.
    - ``allow_cgnat``: shared carrier-grade NAT space, 100.64.0.0/10.
    - ``allow_ula``: IPv6 unique local addresses, fc00::/7.

    ``blocked_networks`` are refused on top of those (CIDRs of the operator's own that look public).
    ``allowed_networks`` are allowed whatever their kind: they override every block, the switches'
    and ``blocked_networks``. Cloud metadata endpoints (169.254.169.254, 100.100.100.200,
    fd00:ec2::254...) stay blocked whatever the switches say, unless an allowed network holds them;
    unspecified and reserved addresses likewise. ``allowed_hosts``: host names trusted whatever they
    resolve to (the operator's own services). Use ``EgressPolicy.create`` to build one from strings.
    """

    allow_loopback: bool = False
    allow_private: bool = False
    allow_link_local: bool = False
    allow_multicast: bool = False
    allow_cgnat: bool = False
    allow_ula: bool = False
    blocked_networks: tuple[IPNetwork, ...] = ()
    allowed_networks: tuple[IPNetwork, ...] = ()
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def create(
        cls,
        *,
        allow_loopback: bool = False,
        allow_private: bool = False,
        allow_link_local: bool = False,
        allow_multicast: bool = False,
        allow_cgnat: bool = False,
        allow_ula: bool = False,
        blocked_cidrs: Iterable[str | IPNetwork] = (),
        allowed_cidrs: Iterable[str | IPNetwork] = (),
        allowed_hosts: Iterable[str] = (),
    ) -> EgressPolicy:
        """A policy from settings-shaped values; a malformed CIDR raises ``ValueError``."""
        return cls(
            allow_loopback=allow_loopback,
            allow_private=allow_private,
            allow_link_local=allow_link_local,
            allow_multicast=allow_multicast,
            allow_cgnat=allow_cgnat,
            allow_ula=allow_ula,
            blocked_networks=_networks(blocked_cidrs),
            allowed_networks=_networks(allowed_cidrs),
            allowed_hosts=frozenset(normalize_host(host) for host in allowed_hosts),
        )

    def trusting_hosts(self, hosts: Iterable[str]) -> EgressPolicy:
        """This policy, with the host names among ``hosts`` trusted too (the hosts of URLs the operator wrote).

        An IP literal is no name whose answer someone vouches for: it stays judged by the address
        rules (open it with ``allowed_networks``), so a URL naming a metadata address is refused.
        """
        names = {normalize_host(host) for host in hosts}
        return replace(self, allowed_hosts=self.allowed_hosts | {name for name in names if _literal(name) is None})

    def trusts_host(self, host: str) -> bool:
        return normalize_host(host) in self.allowed_hosts


def _ranges(rows: Iterable[tuple[str, _Category, str]]) -> tuple[tuple[IPNetwork, _Category, str], ...]:
    return tuple((ipaddress.ip_network(cidr), category, description) for cidr, category, description in rows)


_V4_RANGES = _ranges(
    (
        ("0.0.0.0/8", "unspecified", "an unspecified address (0.0.0.0/8)"),
        ("127.0.0.0/8", "loopback", "a loopback address"),
        ("10.0.0.0/8", "private", "a private address (RFC 1918)"),
        ("172.16.0.0/12", "private", "a private address (RFC 1918)"),
        ("192.168.0.0/16", "private", "a private address (RFC 1918)"),
        ("100.64.0.0/10", "cgnat", "a shared carrier-grade NAT address (100.64.0.0/10)"),
        ("169.254.0.0/16", "link-local", "a link-local address (169.254.0.0/16)"),
        ("192.0.0.0/24", "reserved", "a reserved address (IETF protocol assignments)"),
        ("192.0.2.0/24", "reserved", "a reserved address (documentation)"),
        ("198.51.100.0/24", "reserved", "a reserved address (documentation)"),
        ("203.0.113.0/24", "reserved", "a reserved address (documentation)"),
        ("192.88.99.0/24", "reserved", "a reserved address (6to4 relay anycast)"),
        ("198.18.0.0/15", "reserved", "a reserved address (benchmarking)"),
        ("224.0.0.0/4", "multicast", "a multicast address"),
        ("240.0.0.0/4", "reserved", "a reserved address (240.0.0.0/4, broadcast included)"),
    )
)

_V6_RANGES = _ranges(
    (
        ("::/128", "unspecified", "an unspecified address (::)"),
        ("::1/128", "loopback", "a loopback address"),
        ("fc00::/7", "ula", "a private address (unique local, fc00::/7)"),
        ("fe80::/10", "link-local", "a link-local address (fe80::/10)"),
        ("fec0::/10", "reserved", "a reserved address (deprecated site-local)"),
        ("ff00::/8", "multicast", "a multicast address"),
        ("64:ff9b:1::/48", "reserved", "a reserved address (local-use NAT64)"),
        ("100::/64", "reserved", "a reserved address (discard-only)"),
        ("2001::/23", "reserved", "a reserved address (IETF protocol assignments)"),
        ("2001:db8::/32", "reserved", "a reserved address (documentation)"),
        ("3fff::/20", "reserved", "a reserved address (documentation)"),
        ("5f00::/16", "reserved", "a reserved address (segment routing)"),
    )
)

# Where cloud providers serve instance metadata and credentials: never reachable through a
# switch (allow_link_local, allow_cgnat, allow_ula), only through an explicit allowed network.
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        "169.254.170.2",  # AWS ECS task credentials
        "169.254.169.123",  # AWS time sync
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS DNS over IPv6
    )
)

_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 form carries, and the form's name: packets to it may reach the IPv4 host."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "an IPv4-mapped IPv6 form of"
    if address.sixtofour is not None:
        return address.sixtofour, "a 6to4 IPv6 form of"
    if address.teredo is not None:
        return address.teredo[1], "a Teredo IPv6 form of"
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _NAT64:
        return low32, "a NAT64 IPv6 form of"
    if address in _IPV4_TRANSLATED:
        return low32, "an IPv4-translated IPv6 form of"
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # :: and ::1 are themselves, not IPv4
        return low32, "an IPv4-compatible IPv6 form of"
    return None


def _classify(address: IPAddress) -> tuple[_Category, str] | None:
    if address in _METADATA_ADDRESSES:
        return "metadata", "a cloud metadata endpoint"
    ranges = _V4_RANGES if address.version == 4 else _V6_RANGES
    for network, category, description in ranges:
        if address in network:
            return category, description
    if address.version == 6 and address not in _GLOBAL_UNICAST_V6:
        return "reserved", "a reserved address (outside the IPv6 global unicast range)"
    return None


def _allowed_by_switch(category: _Category, policy: EgressPolicy) -> bool:
    switches: dict[_Category, bool] = {
        "loopback": policy.allow_loopback,
        "private": policy.allow_private,
        "link-local": policy.allow_link_local,
        "multicast": policy.allow_multicast,
        "cgnat": policy.allow_cgnat,
        "ula": policy.allow_ula,
    }
    return switches.get(category, False)


def _in_any(ip: IPAddress, networks: Iterable[IPNetwork]) -> IPNetwork | None:
    return next((network for network in networks if network.version == ip.version and ip in network), None)


def blocked_reason(address: str | IPAddress, policy: EgressPolicy) -> str | None:
    """Why ``policy`` forbids connecting to ``address`` (e.g. "a loopback address"), or ``None`` when allowed.

    IPv6 forms that carry an IPv4 address (mapped, compatible, translated, 6to4, NAT64, Teredo)
    are judged by that IPv4 address too. A string that is not an IP address raises ``ValueError``.
    """
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
        ip = ipaddress.IPv6Address(int(ip))  # a zone (fe80::1%eth0) does not change what the address is
    if _in_any(ip, policy.allowed_networks) is not None:
        return None
    blocked = _in_any(ip, policy.blocked_networks)
    if blocked is not None:
        return f"an address of a blocked network ({blocked})"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            inner, form = embedded
            inner_reason = blocked_reason(inner, policy)
            return None if inner_reason is None else f"{form} {inner_reason}"
    classified = _classify(ip)
    if classified is None:
        return None
    category, description = classified
    return None if _allowed_by_switch(category, policy) else description


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host`` (a thread; cancellable by the caller's deadline)."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def resolve_allowed(host: str, port: int, policy: EgressPolicy, *, resolver: Resolver | None = None) -> list[str]:
    """The addresses to connect to for ``host``, every one checked against ``policy``.

    Refuses (``EgressBlocked``) when ANY address is blocked, not only the first: a name that
    resolves to both a public and a private address would otherwise reach the private one on
    the next lookup. Raises ``HostNotResolved`` when the name has no address. Bound the call
    with a deadline (``anyio.fail_after``): resolution may be slow.
    """
    name = normalize_host(host)
    if not name:
        raise EgressBlocked(host, "an empty host name")
    literal = _literal(name)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            resolved = await (resolver or system_resolver)(name, port)
        except (OSError, UnicodeError) as exc:
            raise HostNotResolved(name) from exc
        addresses = list(dict.fromkeys(str(ipaddress.ip_address(address)) for address in resolved))
        if not addresses:
            raise HostNotResolved(name)
    if policy.trusts_host(name):
        return addresses
    for address in addresses:
        reason = blocked_reason(address, policy)
        if reason is not None:
            raise EgressBlocked(name, reason, address=address)
    return addresses


def parse_http_url(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an ``http(s)://`` URL; other schemes and malformed URLs raise ``EgressBlocked``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise EgressBlocked(url, "malformed", message=f"Refused: {url!r} is not a valid URL.") from exc
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        message = f"Refused: {url!r} is not an http:// or https:// URL; only those can be fetched."
        raise EgressBlocked(url, "unsupported scheme", message=message)
    host = parts.hostname
    if not host:
        raise EgressBlocked(url, "no host", message=f"Refused: {url!r} has no host name.")
    return scheme, host, port or (443 if scheme == "https" else 80)


async def check_url(url: str, policy: EgressPolicy, *, resolver: Resolver | None = None) -> list[str]:
    """The checked addresses of an ``http(s)://`` URL's host (``parse_http_url``, then ``resolve_allowed``)."""
    _, host, port = parse_http_url(url)
    return await resolve_allowed(host, port, policy, resolver=resolver)
