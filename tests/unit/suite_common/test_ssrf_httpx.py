"""The SSRF guard in httpx, against real loopback servers: pinned addresses, redirects re-checked, TLS kept."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
import trustme
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from suite_common.ssrf import EgressBlocked, EgressPolicy, HostNotResolved, Resolver
from suite_common.ssrf_httpx import guarded_client, stream_following_redirects
from support.servers import serve_app

_ONLY_127_0_0_1 = EgressPolicy.create(allowed_cidrs=["127.0.0.1/32"])


class _Recorder:
    """A page server that answers with the Host header it saw, and redirects where asked."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.app = Starlette(routes=[Route("/", self._echo), Route("/redirect", self._redirect)])

    async def _echo(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        return JSONResponse({"host": request.headers["host"]})

    async def _redirect(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        hops = int(request.query_params.get("hops", "0"))
        if hops:
            return RedirectResponse(f"/redirect?hops={hops - 1}", status_code=302)
        return RedirectResponse(request.query_params.get("to", "/"), status_code=302)


def _resolver(answers: dict[str, list[str]], calls: list[str]) -> Resolver:
    async def resolve(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        if host not in answers:
            raise OSError(-2, "Name or service not known")
        return answers[host]

    return resolve


@pytest.mark.anyio
async def test_a_blocked_address_is_refused_before_any_request_reaches_it() -> None:
    pages = _Recorder()
    with anyio.fail_after(10):
        async with serve_app(pages.app) as base_url, guarded_client(EgressPolicy(), timeout=5) as client:
            with pytest.raises(EgressBlocked) as caught:
                await client.get(base_url)

    assert caught.value.message == (
        "Refused to connect: 127.0.0.1 is a loopback address, which this server may not reach."
    )
    assert pages.paths == []


@pytest.mark.anyio
async def test_an_allowed_network_is_reached() -> None:
    pages = _Recorder()
    with anyio.fail_after(10):
        async with serve_app(pages.app) as base_url, guarded_client(_ONLY_127_0_0_1, timeout=5) as client:
            response = await client.get(base_url)

    assert response.status_code == 200
    assert pages.paths == ["/"]


@pytest.mark.anyio
async def test_the_connection_goes_to_the_checked_address_and_keeps_the_host_header() -> None:
    pages = _Recorder()
    calls: list[str] = []
    # "pages.test" exists only in this resolver: had anything else resolved it, the request would fail.
    resolver = _resolver({"pages.test": ["127.0.0.1"]}, calls)
    with anyio.fail_after(10):
        async with serve_app(pages.app) as base_url:
            port = httpx.URL(base_url).port
            async with guarded_client(_ONLY_127_0_0_1, timeout=5, resolver=resolver) as client:
                first = await client.get(f"http://pages.test:{port}/")
                second = await client.get(f"http://pages.test:{port}/")

    assert first.json() == second.json() == {"host": f"pages.test:{port}"}
    assert calls == ["pages.test"]  # once per connection; the pooled connection was checked when opened


@pytest.mark.anyio
async def test_a_name_that_also_resolves_to_a_blocked_address_is_refused() -> None:
    pages = _Recorder()
    resolver = _resolver({"pages.test": ["127.0.0.1", "10.0.0.7"]}, [])
    with anyio.fail_after(10):
        async with serve_app(pages.app) as base_url:
            port = httpx.URL(base_url).port
            async with guarded_client(_ONLY_127_0_0_1, timeout=5, resolver=resolver) as client:
                with pytest.raises(EgressBlocked, match=r"pages\.test resolves to a private address \(RFC 1918\)"):
                    await client.get(f"http://pages.test:{port}/")

    assert pages.paths == []


@pytest.mark.anyio
async def test_a_rebinding_name_is_checked_again_on_each_new_connection() -> None:
    pages = _Recorder()
    answers = iter([["127.0.0.1"], ["127.0.0.2"]])
    calls: list[str] = []

    async def rebinding(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        return next(answers)

    with anyio.fail_after(10):
        async with serve_app(pages.app) as base_url:
            url = f"http://rebind.test:{httpx.URL(base_url).port}/"
            async with guarded_client(_ONLY_127_0_0_1, timeout=5, resolver=rebinding) as client:
                allowed = await client.get(url)
            async with guarded_client(_ONLY_127_0_0_1, timeout=5, resolver=rebinding) as client:
                with pytest.raises(EgressBlocked, match=r"rebind\.test resolves to a loopback address"):
                    await client.get(url)

    assert allowed.status_code == 200
    assert calls == ["rebind.test", "rebind.test"]
    assert pages.paths == ["/"]


@pytest.mark.anyio
async def test_an_unknown_name_is_reported_as_such() -> None:
    async with guarded_client(EgressPolicy(), timeout=5, resolver=_resolver({}, [])) as client:
        with anyio.fail_after(10), pytest.raises(HostNotResolved, match=r"nowhere\.test could not be resolved"):
            await client.get("http://nowhere.test/")


@pytest.mark.anyio
async def test_redirects_are_followed_hop_by_hop_up_to_the_bound() -> None:
    pages = _Recorder()
    with anyio.fail_after(10):
        async with serve_app(pages.app) as base_url, guarded_client(_ONLY_127_0_0_1, timeout=5) as client:
            async with stream_following_redirects(client, f"{base_url}/redirect?hops=2", max_redirects=3) as final:
                body = await final.aread()
            with pytest.raises(httpx.TooManyRedirects, match="More than 1 redirects"):
                async with stream_following_redirects(client, f"{base_url}/redirect?hops=2", max_redirects=1):
                    pass

    assert final.status_code == 200
    assert str(final.url) == f"{base_url}/"
    assert b'"host"' in body
    assert pages.paths[:4] == ["/redirect", "/redirect", "/redirect", "/"]


@pytest.mark.anyio
async def test_a_redirect_from_an_allowed_host_to_a_blocked_one_is_refused() -> None:
    pages = _Recorder()
    with anyio.fail_after(10):
        async with serve_app(pages.app) as base_url, guarded_client(_ONLY_127_0_0_1, timeout=5) as client:
            port = httpx.URL(base_url).port
            for target in (f"http://127.0.0.2:{port}/", "http://169.254.169.254/latest/meta-data/"):
                with pytest.raises(EgressBlocked) as caught:
                    async with stream_following_redirects(client, f"{base_url}/redirect?to={target}", max_redirects=3):
                        pass
                assert caught.value.host in target
            with pytest.raises(EgressBlocked, match="is not an http:// or https:// URL"):
                async with stream_following_redirects(
                    client, f"{base_url}/redirect?to=file:///etc/passwd", max_redirects=3
                ):
                    pass

    assert pages.paths == ["/redirect", "/redirect", "/redirect"]


class _TlsServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.listening.set()

    def install_signal_handlers(self) -> None:
        pass


@asynccontextmanager
async def _serve_tls(app: Starlette, certificate: trustme.LeafCert) -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    with certificate.private_key_and_cert_chain_pem.tempfile() as pem:
        config = uvicorn.Config(app, log_config=None, lifespan="off", ssl_certfile=pem, ssl_keyfile=pem)
        server = _TlsServer(config)
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            await server.listening.wait()
            try:
                yield sock.getsockname()[1]
            finally:
                server.should_exit = True
    sock.close()


@pytest.mark.anyio
async def test_tls_verifies_the_url_host_name_while_connecting_to_the_pinned_address() -> None:
    authority = trustme.CA()
    trusted = ssl.create_default_context()
    authority.configure_trust(trusted)
    resolver = _resolver({"pages.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}, [])
    pages = _Recorder()
    with anyio.fail_after(10):
        async with (
            _serve_tls(pages.app, authority.issue_cert("pages.test")) as port,
            guarded_client(_ONLY_127_0_0_1, timeout=5, resolver=resolver, verify=trusted) as client,
        ):
            response = await client.get(f"https://pages.test:{port}/")
            # The certificate names pages.test only: another name on the same address must fail.
            with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
                await client.get(f"https://other.test:{port}/")

    assert response.json() == {"host": f"pages.test:{port}"}
