"""``/readyz``: a broken or slow server never takes every replica out of rotation.

The gateway is ready once each server has had its first connection attempt (serving or failed);
a server marked ``"required": true`` is waited for until it serves.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from support.mcp_gateway import (
    FAST_RETRIES,
    WAIT_SECONDS,
    Gateway,
    echo_http_server,
    raw_stdio_server,
    running_gateway,
)

pytestmark = pytest.mark.anyio

HUNG: dict[str, Any] = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}
"""Never answers the handshake: its attempts end at the connect timeout."""


async def _readyz(gateway: Gateway) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gateway.url) as probe:  # no secret: probes have none
        return await probe.get("/readyz")


async def _first_attempts_done(gateway: Gateway, *names: str) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        await gateway.registry.wait_until(
            lambda registry: all(registry.connections[name].first_attempt_done for name in names)
        )


async def test_readyz_is_200_once_every_server_had_its_first_attempt_even_when_some_failed() -> None:
    async with echo_http_server("web") as url:
        servers = {"web": {"url": url}, "broken": {"command": "no-such-mcp-server-command"}, "hung": HUNG}
        async with running_gateway(servers, connect_timeout_seconds=1.0) as gateway:
            await gateway.wait_until_ready("web")
            await _first_attempts_done(gateway, "broken", "hung")
            response = await _readyz(gateway)

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    assert body["checks"]["web"] == "ok"
    assert body["checks"]["broken"] in ("failed", "connecting")  # it keeps retrying
    assert body["checks"]["hung"] in ("failed", "connecting")
    assert body["waitingFor"] == []
    assert "no-such-mcp-server-command" not in response.text  # why is for those with the secret


async def test_a_required_server_keeps_the_gateway_not_ready_until_it_serves() -> None:
    async with echo_http_server("web") as url:
        servers = {"web": {"url": url}, "needed": {**HUNG, "required": True}}
        async with running_gateway(servers, connect_timeout_seconds=1.0) as gateway:
            await gateway.wait_until_ready("web")
            await _first_attempts_done(gateway, "needed")
            response = await _readyz(gateway)

    assert response.status_code == 503
    assert response.json() == {
        "status": "not_ready",
        "checks": {"web": "ok", "needed": response.json()["checks"]["needed"]},
        "waitingFor": ["needed"],
    }
    assert response.json()["checks"]["needed"] in ("failed", "connecting")


async def test_a_required_server_that_serves_makes_the_gateway_ready() -> None:
    async with echo_http_server("web") as url, running_gateway({"web": {"url": url, "required": True}}) as gateway:
        await gateway.wait_until_ready("web")
        response = await _readyz(gateway)

    assert (response.status_code, response.json()["waitingFor"]) == (200, [])


async def test_a_server_that_breaks_after_startup_leaves_the_gateway_ready(tmp_path: Path) -> None:
    fragile = raw_stdio_server("crash-on-restart", "--state", str(tmp_path / "started-once"))
    async with running_gateway({"fragile": fragile}, **FAST_RETRIES) as gateway:
        await gateway.wait_until_ready("fragile")
        assert (await _readyz(gateway)).status_code == 200
        connection = gateway.registry.connections["fragile"]

        await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "die", "arguments": {}})
        with anyio.fail_after(WAIT_SECONDS):
            await gateway.registry.wait_until(lambda _: connection.attempts >= 3 and not connection.serving)
        response = await _readyz(gateway)

    assert response.status_code == 200
    assert response.json()["checks"] == {"fragile": response.json()["checks"]["fragile"]}
    assert response.json()["checks"]["fragile"] in ("failed", "connecting")
