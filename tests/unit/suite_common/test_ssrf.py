"""The SSRF guard's core: which addresses are blocked, in every IPv4 and IPv6 form, and name resolution."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from suite_common.ssrf import (
    EgressBlocked,
    EgressPolicy,
    HostNotResolved,
    Resolver,
    blocked_reason,
    check_url,
    parse_http_url,
    resolve_allowed,
)

_STRICT = EgressPolicy()


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("0.0.0.0", "an unspecified address (0.0.0.0/8)"),
        ("0.1.2.3", "an unspecified address (0.0.0.0/8)"),
        ("127.0.0.1", "a loopback address"),
        ("127.255.255.254", "a loopback address"),
        ("10.0.0.1", "a private address (RFC 1918)"),
        ("10.255.255.255", "a private address (RFC 1918)"),
        ("172.16.0.1", "a private address (RFC 1918)"),
        ("172.31.255.255", "a private address (RFC 1918)"),
        ("192.168.1.1", "a private address (RFC 1918)"),
        ("100.64.0.1", "a shared carrier-grade NAT address (100.64.0.0/10)"),
        ("100.127.255.255", "a shared carrier-grade NAT address (100.64.0.0/10)"),
        ("169.254.0.1", "a link-local address (169.254.0.0/16)"),
        ("169.254.169.254", "a cloud metadata endpoint"),
        ("169.254.170.2", "a cloud metadata endpoint"),
        ("100.100.100.200", "a cloud metadata endpoint"),
        ("192.0.0.8", "a reserved address (IETF protocol assignments)"),
        ("192.0.2.10", "a reserved address (documentation)"),
        ("198.51.100.7", "a reserved address (documentation)"),
        ("203.0.113.99", "a reserved address (documentation)"),
        ("198.18.0.1", "a reserved address (benchmarking)"),
        ("192.88.99.1", "a reserved address (6to4 relay anycast)"),
        ("224.0.0.1", "a multicast address"),
        ("239.255.255.250", "a multicast address"),
        ("240.0.0.1", "a reserved address (240.0.0.0/4, broadcast included)"),
        ("255.255.255.255", "a reserved address (240.0.0.0/4, broadcast included)"),
    ],
)
def test_every_special_ipv4_range_is_blocked_with_its_reason(address: str, reason: str) -> None:
    assert blocked_reason(address, _STRICT) == reason


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::", "an unspecified address (::)"),
        ("::1", "a loopback address"),
        ("fc00::1", "a private address (unique local, fc00::/7)"),
        ("fd12:3456:789a::1", "a private address (unique local, fc00::/7)"),
        ("fd00:ec2::254", "a cloud metadata endpoint"),
        ("fe80::1", "a link-local address (fe80::/10)"),
        ("fe80::1%eth0", "a link-local address (fe80::/10)"),
        ("febf:ffff::1", "a link-local address (fe80::/10)"),
        ("fec0::1", "a reserved address (deprecated site-local)"),
        ("ff02::1", "a multicast address"),
        ("ff0e::1", "a multicast address"),
        ("100::1", "a reserved address (discard-only)"),
        ("2001:db8::1", "a reserved address (documentation)"),
        ("2001:10::1", "a reserved address (IETF protocol assignments)"),
        ("3fff::1", "a reserved address (documentation)"),
        ("64:ff9b:1::1", "a reserved address (local-use NAT64)"),
        ("4000::1", "a reserved address (outside the IPv6 global unicast range)"),
    ],
)
def test_every_special_ipv6_range_is_blocked_with_its_reason(address: str, reason: str) -> None:
    assert blocked_reason(address, _STRICT) == reason


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::ffff:127.0.0.1", "an IPv4-mapped IPv6 form of a loopback address"),
        ("::ffff:7f00:1", "an IPv4-mapped IPv6 form of a loopback address"),
        ("::ffff:169.254.169.254", "an IPv4-mapped IPv6 form of a cloud metadata endpoint"),
        ("::ffff:10.1.2.3", "an IPv4-mapped IPv6 form of a private address (RFC 1918)"),
        ("::127.0.0.1", "an IPv4-compatible IPv6 form of a loopback address"),
        ("::192.168.0.1", "an IPv4-compatible IPv6 form of a private address (RFC 1918)"),
        ("::ffff:0:10.0.0.1", "an IPv4-translated IPv6 form of a private address (RFC 1918)"),
        ("2002:7f00:1::", "a 6to4 IPv6 form of a loopback address"),
        ("2002:a9fe:a9fe::1", "a 6to4 IPv6 form of a cloud metadata endpoint"),
        ("64:ff9b::7f00:1", "a NAT64 IPv6 form of a loopback address"),
        ("64:ff9b::169.254.169.254", "a NAT64 IPv6 form of a cloud metadata endpoint"),
        # Teredo stores the client's IPv4 address inverted: 0x3fff:fdd2 is ~192.0.2.45.
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "a Teredo IPv6 form of a reserved address (documentation)"),
    ],
)
def test_ipv6_forms_carrying_a_blocked_ipv4_address_are_blocked(address: str, reason: str) -> None:
    assert blocked_reason(address, _STRICT) == reason


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.215.14",
        "172.32.0.1",  # just past 172.16.0.0/12
        "100.128.0.1",  # just past 100.64.0.0/10
        "169.255.0.1",
        "2606:4700:4700::1111",
        "2a00:1450:4001:80b::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_public_addresses_in_every_form_are_allowed(address: str) -> None:
    assert blocked_reason(address, _STRICT) is None
    assert blocked_reason(ipaddress.ip_address(address.split("%")[0]), _STRICT) is None


def test_allow_loopback_opens_loopback_in_every_form_and_nothing_else() -> None:
    policy = EgressPolicy(allow_loopback=True)

    for address in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1"):
        assert blocked_reason(address, policy) is None, address
    assert blocked_reason("10.0.0.1", policy) == "a private address (RFC 1918)"
    assert blocked_reason("169.254.169.254", policy) == "a cloud metadata endpoint"


# Each switch: addresses it opens (in IPv4 and IPv6 forms where the kind has them), and its neighbours it must not.
_SWITCHES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "allow_loopback": (
        ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1"),
        ("10.0.0.1", "169.254.1.1", "100.64.0.1", "fd00::5"),
    ),
    "allow_private": (
        ("10.0.0.1", "172.16.5.4", "192.168.0.10", "::ffff:192.168.0.10", "64:ff9b::a00:1", "2002:c0a8:1::"),
        ("127.0.0.1", "100.64.1.1", "fd00::5", "169.254.1.1"),
    ),
    "allow_link_local": (
        ("169.254.1.1", "169.254.169.253", "fe80::1", "fe80::1%eth0", "::ffff:169.254.1.1", "64:ff9b::a9fe:101"),
        ("10.0.0.1", "224.0.0.1"),
    ),
    "allow_multicast": (
        ("224.0.0.1", "239.255.255.250", "ff02::1", "::ffff:224.0.0.1"),
        ("240.0.0.1", "169.254.1.1"),
    ),
    "allow_cgnat": (
        ("100.64.0.1", "100.127.255.255", "::ffff:100.64.0.1", "64:ff9b::6440:1"),
        ("10.0.0.1", "fd00::5"),
    ),
    "allow_ula": (
        ("fc00::1", "fd12:3456:789a::1"),
        ("10.0.0.1", "100.64.0.1", "fe80::1"),
    ),
}


def _opened(*switches: str) -> EgressPolicy:
    """The strict policy with these switches on."""
    return EgressPolicy(
        allow_loopback="allow_loopback" in switches,
        allow_private="allow_private" in switches,
        allow_link_local="allow_link_local" in switches,
        allow_multicast="allow_multicast" in switches,
        allow_cgnat="allow_cgnat" in switches,
        allow_ula="allow_ula" in switches,
    )


_METADATA = ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "::ffff:169.254.169.254")


@pytest.mark.parametrize("switch", sorted(_SWITCHES))
def test_each_kind_of_address_is_blocked_by_default_and_opened_by_its_own_switch_only(switch: str) -> None:
    opened, neighbours = _SWITCHES[switch]
    policy = _opened(switch)

    for address in opened:
        assert blocked_reason(address, _STRICT) is not None, address
        assert blocked_reason(address, policy) is None, address
    for address in neighbours:
        assert blocked_reason(address, policy) == blocked_reason(address, _STRICT) is not None, address


def test_no_switch_opens_a_metadata_endpoint_or_a_reserved_address() -> None:
    every_switch = _opened(*_SWITCHES)

    for address in _METADATA:
        assert blocked_reason(address, every_switch) is not None, address
        assert "a cloud metadata endpoint" in str(blocked_reason(address, every_switch))
    for address in ("0.0.0.0", "::", "192.0.2.1", "240.0.0.1", "2001:db8::1"):
        assert blocked_reason(address, every_switch) is not None, address


def test_a_blocked_network_is_refused_in_every_form_unless_an_allowed_network_holds_it() -> None:
    policy = EgressPolicy.create(blocked_cidrs=["93.184.0.0/16", "2606:4700::/32"], allowed_cidrs=["93.184.7.0/24"])

    assert blocked_reason("93.184.215.14", policy) == "an address of a blocked network (93.184.0.0/16)"
    assert blocked_reason("::ffff:93.184.215.14", policy) == (
        "an IPv4-mapped IPv6 form of an address of a blocked network (93.184.0.0/16)"
    )
    assert blocked_reason("64:ff9b::5db8:d70e", policy) == (
        "a NAT64 IPv6 form of an address of a blocked network (93.184.0.0/16)"
    )
    assert blocked_reason("2606:4700:4700::1111", policy) == "an address of a blocked network (2606:4700::/32)"
    assert blocked_reason("93.184.7.1", policy) is None
    assert blocked_reason("8.8.8.8", policy) is None


def test_a_blocked_network_narrows_an_opened_switch() -> None:
    policy = EgressPolicy.create(allow_private=True, blocked_cidrs=["10.9.0.0/16"])

    assert blocked_reason("10.1.0.1", policy) is None
    assert blocked_reason("10.9.0.1", policy) == "an address of a blocked network (10.9.0.0/16)"


def test_trusting_hosts_adds_to_the_trusted_hosts_and_keeps_the_rest_of_the_policy() -> None:
    base = EgressPolicy.create(allow_cgnat=True, allowed_hosts=["a.internal"], blocked_cidrs=["10.9.0.0/16"])

    trusting = base.trusting_hosts(["MCP-RAG-Tool.", "b.internal"])

    assert trusting.allowed_hosts == {"a.internal", "mcp-rag-tool", "b.internal"}
    assert (trusting.allow_cgnat, trusting.blocked_networks) == (True, base.blocked_networks)
    assert not base.trusts_host("mcp-rag-tool")


def test_an_ip_literal_is_never_trusted_as_a_host_name() -> None:
    policy = EgressPolicy().trusting_hosts(["169.254.169.254", "[fd00::1]", "rag.internal"])

    assert policy.allowed_hosts == {"rag.internal"}


def test_an_allowed_network_opens_exactly_that_network() -> None:
    policy = EgressPolicy.create(allowed_cidrs=["127.0.0.1/32", "10.1.0.0/16", "fd00:1::/64"])

    assert blocked_reason("127.0.0.1", policy) is None
    assert blocked_reason("::ffff:127.0.0.1", policy) is None
    assert blocked_reason("127.0.0.2", policy) == "a loopback address"
    assert blocked_reason("10.1.200.3", policy) is None
    assert blocked_reason("10.2.0.1", policy) == "a private address (RFC 1918)"
    assert blocked_reason("fd00:1::9", policy) is None
    assert blocked_reason("fd00:2::9", policy) == "a private address (unique local, fc00::/7)"


def test_the_metadata_endpoint_opens_only_through_an_explicit_network() -> None:
    policy = EgressPolicy.create(allow_loopback=True, allow_private=True, allowed_cidrs=["169.254.169.254/32"])

    assert blocked_reason("169.254.169.254", policy) is None
    assert blocked_reason("169.254.169.253", policy) == "a link-local address (169.254.0.0/16)"


def test_a_malformed_cidr_or_address_raises_value_error() -> None:
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 network"):
        EgressPolicy.create(allowed_cidrs=["10.0.0.0/33"])
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        blocked_reason("example.com", _STRICT)


def test_allowed_hosts_are_normalised() -> None:
    policy = EgressPolicy.create(allowed_hosts=["SearXNG.Internal."])

    assert policy.trusts_host("searxng.internal")
    assert policy.trusts_host("SEARXNG.internal.")
    assert not policy.trusts_host("other.internal")


def _resolver(table: dict[str, list[str]]) -> tuple[list[tuple[str, int]], Resolver]:
    calls: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        calls.append((host, port))
        if host not in table:
            raise OSError(-2, "Name or service not known")
        return table[host]

    return calls, resolve


@pytest.mark.anyio
async def test_a_name_resolving_to_public_addresses_is_allowed_and_deduplicated() -> None:
    calls, resolve = _resolver(
        {"example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "93.184.215.14"]}
    )

    addresses = await resolve_allowed("Example.COM.", 443, _STRICT, resolver=resolve)

    assert addresses == ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]
    assert calls == [("example.com", 443)]


@pytest.mark.anyio
async def test_a_name_with_any_blocked_address_is_refused_without_naming_the_address() -> None:
    _, resolve = _resolver({"mixed.example": ["93.184.215.14", "10.0.0.7"]})

    with pytest.raises(EgressBlocked) as caught:
        await resolve_allowed("mixed.example", 80, _STRICT, resolver=resolve)

    assert caught.value.message == (
        "Refused to connect: mixed.example resolves to a private address (RFC 1918), which this server may not reach."
    )
    assert "10.0.0.7" not in caught.value.message
    assert caught.value.address == "10.0.0.7"
    assert caught.value.reason == "a private address (RFC 1918)"


@pytest.mark.anyio
async def test_an_ip_literal_is_checked_without_dns_and_named_in_the_message() -> None:
    calls, resolve = _resolver({})

    with pytest.raises(EgressBlocked) as caught:
        await resolve_allowed("[::ffff:169.254.169.254]", 80, _STRICT, resolver=resolve)

    assert calls == []
    assert caught.value.message == (
        "Refused to connect: ::ffff:169.254.169.254 is an IPv4-mapped IPv6 form of a cloud metadata endpoint, "
        "which this server may not reach."
    )


@pytest.mark.anyio
async def test_a_trusted_host_may_resolve_to_a_private_address() -> None:
    _, resolve = _resolver({"searxng.internal": ["10.0.0.9"]})
    policy = EgressPolicy.create(allowed_hosts=["searxng.internal"])

    assert await resolve_allowed("searxng.internal", 8080, policy, resolver=resolve) == ["10.0.0.9"]


@pytest.mark.anyio
async def test_an_unknown_name_is_reported_as_not_resolved() -> None:
    _, resolve = _resolver({"nothing.example": []})

    with pytest.raises(HostNotResolved, match=r"The host name nowhere\.example could not be resolved"):
        await resolve_allowed("nowhere.example", 80, _STRICT, resolver=resolve)
    with pytest.raises(HostNotResolved):
        await resolve_allowed("nothing.example", 80, _STRICT, resolver=resolve)


@pytest.mark.anyio
async def test_the_system_resolver_is_used_by_default() -> None:
    assert await resolve_allowed("localhost", 80, EgressPolicy(allow_loopback=True)) != []
    with pytest.raises(EgressBlocked, match="localhost resolves to a loopback address"):
        await resolve_allowed("localhost", 80, _STRICT)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/a?b=c", ("https", "example.com", 443)),
        ("HTTP://Example.com:8080", ("http", "example.com", 8080)),
        ("http://[::1]/", ("http", "::1", 80)),
    ],
)
def test_http_urls_are_split_into_scheme_host_and_port(url: str, expected: tuple[str, str, int]) -> None:
    assert parse_http_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "is not an http:// or https:// URL"),
        ("gopher://example.com/", "is not an http:// or https:// URL"),
        ("example.com/page", "is not an http:// or https:// URL"),
        ("http:///path", "has no host name"),
        ("http://example.com:99999/", "is not a valid URL"),
    ],
)
def test_other_schemes_and_malformed_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(EgressBlocked, match=message):
        parse_http_url(url)


@pytest.mark.anyio
async def test_check_url_resolves_the_host_of_the_url() -> None:
    calls, resolve = _resolver({"example.com": ["93.184.215.14"]})

    assert await check_url("https://example.com/x", _STRICT, resolver=resolve) == ["93.184.215.14"]
    assert calls == [("example.com", 443)]
    with pytest.raises(EgressBlocked, match=r"169\.254\.169\.254 is a cloud metadata endpoint"):
        await check_url("http://169.254.169.254/latest/meta-data/", _STRICT)
