"""The one SSRF guard in the connection, through both httpcore flavours (httpcore under httpx, httpcore2 under
httpx2 and the mcp SDK): each test runs the flavour's own connection pool against a real loopback server."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import anyio
import httpcore
import httpcore2
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from suite_common.egress import MAX_ADDRESSES_TRIED, GuardedNetworkBackend, guarded_pool
from suite_common.ssrf import EgressBlocked, EgressPolicy, HostNotResolved, Resolver
from support.servers import serve_app

pytestmark = pytest.mark.anyio

FLAVOURS = [pytest.param(httpcore, id="httpcore"), pytest.param(httpcore2, id="httpcore2")]
_LOOPBACK = EgressPolicy(allow_loopback=True)


def _resolver(answers: dict[str, list[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in answers:
            raise OSError(-2, "Name or service not known")
        return answers[host]

    return resolve


def _pool(core: ModuleType, policy: EgressPolicy, resolver: Resolver) -> Any:
    return guarded_pool(
        core,
        policy,
        resolver=resolver,
        ssl_context=ssl.create_default_context(),
        limits=httpx.Limits(max_connections=4, max_keepalive_connections=4, keepalive_expiry=5.0),
    )


def _app(hosts: list[str]) -> Starlette:
    async def echo(request: Request) -> Response:
        hosts.append(request.headers["host"])
        return JSONResponse({"host": request.headers["host"]})

    return Starlette(routes=[Route("/", echo)])


class _RecordingBackend:
    """The flavour's real backend, recording the addresses it is asked to connect to."""

    def __init__(self, core: ModuleType) -> None:
        self._real = core.AnyIOBackend()
        self.addresses: list[str] = []

    async def connect_tcp(self, host: str, port: int, **options: Any) -> Any:
        self.addresses.append(host)
        return await self._real.connect_tcp(host, port, **options)

    async def sleep(self, seconds: float) -> None:
        await self._real.sleep(seconds)


@pytest.mark.parametrize("core", FLAVOURS)
async def test_a_name_is_connected_at_its_checked_address_and_keeps_its_host_header(core: ModuleType) -> None:
    hosts: list[str] = []
    with anyio.fail_after(10):
        async with serve_app(_app(hosts)) as base_url:
            port = int(base_url.rsplit(":", 1)[1])
            async with _pool(core, _LOOPBACK, _resolver({"pages.test": ["127.0.0.1"]})) as pool:
                response = await pool.request(
                    "GET", f"http://pages.test:{port}/", headers={"Host": f"pages.test:{port}"}
                )

    assert response.status == 200
    assert hosts == [f"pages.test:{port}"]


@pytest.mark.parametrize("core", FLAVOURS)
@pytest.mark.parametrize(
    ("addresses", "reason"),
    [
        (["169.254.169.254"], "a cloud metadata endpoint"),
        (["10.1.2.3"], "a private address (RFC 1918)"),
        (["93.184.216.34", "192.168.1.1"], "a private address (RFC 1918)"),
        (["::ffff:127.0.0.1"], "an IPv4-mapped IPv6 form of a loopback address"),
    ],
)
async def test_a_blocked_address_is_refused_before_any_connection_is_attempted(
    core: ModuleType, addresses: list[str], reason: str
) -> None:
    inner = _RecordingBackend(core)
    backend = GuardedNetworkBackend(core, EgressPolicy(), resolver=_resolver({"inside.test": addresses}), inner=inner)

    with anyio.fail_after(10), pytest.raises(EgressBlocked) as refused:
        await backend.connect_tcp("inside.test", 80, timeout=5)

    assert refused.value.reason == reason
    assert inner.addresses == []


@pytest.mark.parametrize("core", FLAVOURS)
async def test_a_refused_request_through_the_pool_raises_egress_blocked(core: ModuleType) -> None:
    hosts: list[str] = []
    with anyio.fail_after(10):
        async with serve_app(_app(hosts)) as base_url, _pool(core, EgressPolicy(), _resolver({})) as pool:
            with pytest.raises(EgressBlocked, match=r"127\.0\.0\.1 is a loopback address"):
                await pool.request("GET", f"{base_url}/")

    assert hosts == []


@pytest.mark.parametrize("core", FLAVOURS)
async def test_an_unknown_name_is_reported_as_such(core: ModuleType) -> None:
    async with _pool(core, _LOOPBACK, _resolver({})) as pool:
        with anyio.fail_after(10), pytest.raises(HostNotResolved, match=r"nowhere\.test could not be resolved"):
            await pool.request("GET", "http://nowhere.test/")


@pytest.mark.parametrize("core", FLAVOURS)
async def test_a_slow_lookup_is_the_flavours_connect_timeout(core: ModuleType) -> None:
    async def never_answers(host: str, port: int) -> Sequence[str]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    backend = GuardedNetworkBackend(core, _LOOPBACK, resolver=never_answers)
    with anyio.fail_after(10), pytest.raises(core.ConnectTimeout, match=r"resolving slow\.test took longer than"):
        await backend.connect_tcp("slow.test", 80, timeout=0.05)


@pytest.mark.parametrize("core", FLAVOURS)
async def test_an_address_that_refuses_is_skipped_for_the_next_checked_one(core: ModuleType) -> None:
    hosts: list[str] = []
    inner = _RecordingBackend(core)
    with anyio.fail_after(10):
        async with serve_app(_app(hosts)) as base_url:
            port = int(base_url.rsplit(":", 1)[1])
            # The server listens on 127.0.0.1 only: 127.0.0.2 refuses the connection.
            resolver = _resolver({"pages.test": ["127.0.0.2", "127.0.0.1"]})
            backend = GuardedNetworkBackend(core, _LOOPBACK, resolver=resolver, inner=inner)
            stream = await backend.connect_tcp("pages.test", port, timeout=5)
            await stream.aclose()

    assert inner.addresses == ["127.0.0.2", "127.0.0.1"]


@pytest.mark.parametrize("core", FLAVOURS)
async def test_a_name_with_many_addresses_is_tried_on_its_first_few_only(core: ModuleType) -> None:
    inner = _RecordingBackend(core)
    with anyio.fail_after(10):
        async with serve_app(_app([])) as base_url:
            port = int(base_url.rsplit(":", 1)[1])
            refusing = [f"127.0.0.{n}" for n in range(2, 10)]
            backend = GuardedNetworkBackend(core, _LOOPBACK, resolver=_resolver({"many.test": refusing}), inner=inner)
            with pytest.raises(core.ConnectError):
                await backend.connect_tcp("many.test", port, timeout=5)

    assert inner.addresses == refusing[:MAX_ADDRESSES_TRIED]


@pytest.mark.parametrize("core", FLAVOURS)
async def test_unix_sockets_are_refused(core: ModuleType) -> None:
    backend = GuardedNetworkBackend(core, _LOOPBACK)
    with pytest.raises(EgressBlocked, match="Unix sockets are not allowed"):
        await backend.connect_unix_socket("/var/run/docker.sock")
