"""Store keys as ``CallerMiddleware`` sees them: the cache in front of the store (answers kept a few seconds, bounded,
failures never kept), and the middleware's answers (the file first, the store only for a protected path, 503 when
the store cannot say). The store is a stand-in counting its lookups; the real one is tested on both backends in
tests/integration/agent_service/test_caller_key_store.py."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from structlog.testing import capture_logs

from agent_service.access.callers_file import CallersFileError, parse_callers
from agent_service.access.stored_keys import StoredKeys
from agent_service.api.auth import CallerMiddleware, caller_of
from agent_service.app import create_app
from agent_service.core.tenancy import NO_RULES
from agent_service.settings import AgentSettings
from agent_service.store import CallerKeyStore, StoredCallerKey, StoreError

pytestmark = pytest.mark.anyio

STORE_KEY = "store-key-1"
FILE_KEY = "file-key-1"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class FakeKeys(CallerKeyStore):
    """The store's keys in a dict; counts lookups; ``down`` makes every lookup fail like an unreachable store."""

    def __init__(self, keys: dict[str, StoredCallerKey]) -> None:
        self.keys = {_digest(key): stored for key, stored in keys.items()}
        self.lookups = 0
        self.down = False

    async def find(self, digest: bytes) -> StoredCallerKey | None:
        self.lookups += 1
        if self.down:
            raise StoreError("The run store could not look up a caller key: ConnectionRefusedError")
        return self.keys.get(digest)


def _stored(name: str = "acme-store", tenant: str = "acme", *, trusted: bool = False) -> StoredCallerKey:
    return StoredCallerKey(name=name, tenant=tenant, trusted=trusted, created_at=datetime.now(UTC))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_an_answer_is_reused_until_it_expires_then_the_store_is_asked_again() -> None:
    clock, keys = Clock(), FakeKeys({STORE_KEY: _stored()})
    stored = StoredKeys(cache_seconds=5, clock=clock)
    stored.attach(keys)
    assert await stored.find(_digest(STORE_KEY)) == keys.keys[_digest(STORE_KEY)]
    del keys.keys[_digest(STORE_KEY)]  # revoked
    clock.now += 4.9
    assert await stored.find(_digest(STORE_KEY)) is not None, "within the cache time, the answer is reused"
    assert keys.lookups == 1
    clock.now += 0.2
    assert await stored.find(_digest(STORE_KEY)) is None, "past it, the revocation is seen"
    assert keys.lookups == 2


async def test_an_unknown_key_is_remembered_too_and_a_new_key_is_seen_once_that_expires() -> None:
    clock, keys = Clock(), FakeKeys({})
    stored = StoredKeys(cache_seconds=2, clock=clock)
    stored.attach(keys)
    for _ in range(3):
        assert await stored.find(_digest(STORE_KEY)) is None
    assert keys.lookups == 1
    keys.keys[_digest(STORE_KEY)] = _stored()
    clock.now += 2.1
    assert await stored.find(_digest(STORE_KEY)) is not None


async def test_with_no_cache_time_every_lookup_asks_the_store() -> None:
    keys = FakeKeys({STORE_KEY: _stored()})
    stored = StoredKeys(cache_seconds=0)
    stored.attach(keys)
    for _ in range(3):
        await stored.find(_digest(STORE_KEY))
    assert (keys.lookups, stored.cached()) == (3, 0)


async def test_a_flood_of_wrong_keys_keeps_at_most_the_bound_the_oldest_going_first() -> None:
    keys = FakeKeys({STORE_KEY: _stored()})
    stored = StoredKeys(cache_seconds=60, max_entries=100)
    stored.attach(keys)
    await stored.find(_digest(STORE_KEY))
    for index in range(1000):
        await stored.find(_digest(f"wrong-{index}"))
    assert stored.cached() == 100
    lookups = keys.lookups
    await stored.find(_digest("wrong-999"))
    assert keys.lookups == lookups, "the newest answers are kept"
    await stored.find(_digest(STORE_KEY))
    assert keys.lookups == lookups + 1, "the oldest was pushed out"


async def test_a_failure_of_the_store_is_not_remembered() -> None:
    keys = FakeKeys({STORE_KEY: _stored()})
    stored = StoredKeys(cache_seconds=60)
    stored.attach(keys)
    keys.down = True
    with pytest.raises(StoreError):
        await stored.find(_digest(STORE_KEY))
    keys.down = False
    assert await stored.find(_digest(STORE_KEY)) is not None


async def test_before_the_store_is_attached_a_lookup_is_a_store_error() -> None:
    with pytest.raises(StoreError):
        await StoredKeys(cache_seconds=5).find(_digest(STORE_KEY))


# --- the middleware ------------------------------------------------------------------------------------


async def _whoami(request: Request) -> JSONResponse:
    caller = caller_of(request)
    return JSONResponse(
        {"name": caller.name, "tenant": caller.tenant, "user": caller.user, "rules": repr(caller.rules)}
    )


CALLERS = f"""
[tenants.acme]
models = ["gpt-4o"]

[[keys]]
name = "acme-file"
tenant = "acme"
sha256 = "{_digest(FILE_KEY).hex()}"
"""


def _client(keys: FakeKeys, callers_file: str | None) -> httpx.AsyncClient:
    stored = StoredKeys(cache_seconds=0)
    stored.attach(keys)
    callers = parse_callers(callers_file, keys_required=False) if callers_file is not None else None
    app = Starlette(
        routes=[Route("/api/v1/agent/whoami", _whoami), Route("/v1/whoami", _whoami), Route("/healthz", _whoami)]
    )
    app.add_middleware(CallerMiddleware, callers=callers, stored=stored)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent")


def _as(key: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **headers}


async def test_without_a_callers_file_store_keys_close_the_api() -> None:
    keys = FakeKeys({STORE_KEY: _stored(trusted=True)})
    async with _client(keys, None) as client:
        assert (await client.get("/api/v1/agent/whoami")).status_code == 401
        assert (await client.get("/api/v1/agent/whoami", headers=_as("wrong"))).status_code == 401
        mine = await client.get("/api/v1/agent/whoami", headers=_as(STORE_KEY, **{"X-User-Id": "u-1"}))
    assert mine.status_code == 200, mine.text
    assert mine.json() == {"name": "acme-store", "tenant": "acme", "user": "u-1", "rules": repr(NO_RULES)}


async def test_a_file_key_is_checked_first_without_asking_the_store() -> None:
    keys = FakeKeys({STORE_KEY: _stored()})
    async with _client(keys, CALLERS) as client:
        response = await client.get("/api/v1/agent/whoami", headers=_as(FILE_KEY))
    assert response.json()["name"] == "acme-file"
    assert keys.lookups == 0


async def test_a_store_key_takes_its_tenants_rules_from_the_callers_file_else_none() -> None:
    keys = FakeKeys({STORE_KEY: _stored(), "other": _stored("globex-store", "globex")})
    async with _client(keys, CALLERS) as client:
        acme = (await client.get("/api/v1/agent/whoami", headers=_as(STORE_KEY))).json()
        globex = (await client.get("/api/v1/agent/whoami", headers=_as("other"))).json()
    assert "gpt-4o" in acme["rules"]
    assert (globex["tenant"], globex["rules"]) == ("globex", repr(NO_RULES))


def test_a_tenant_without_a_table_has_no_rule_but_may_name_the_personas_every_tenant_may() -> None:
    callers = parse_callers(CALLERS + '\n[personas.concise]\nmodel = "demo"\n', keys_required=False)
    unlisted = callers.rules_of("globex")
    assert sorted(unlisted.personas) == ["concise"]
    assert (unlisted.models, unlisted.tools, unlisted.monthly_tokens) == (None, None, None)
    assert sorted(callers.rules_of("acme").personas) == ["concise"]


async def test_an_untrusted_store_key_may_not_name_the_user() -> None:
    keys = FakeKeys({STORE_KEY: _stored(trusted=False)})
    async with _client(keys, None) as client:
        response = await client.get("/api/v1/agent/whoami", headers=_as(STORE_KEY, **{"X-User-Id": "u-1"}))
    assert (response.status_code, response.json()["error"]["code"]) == (403, "user_not_allowed")


async def test_an_open_path_never_asks_the_store() -> None:
    keys = FakeKeys({STORE_KEY: _stored()})
    async with _client(keys, None) as client:
        response = await client.get("/healthz", headers=_as(STORE_KEY))
    assert response.json()["name"] == "anonymous"
    assert keys.lookups == 0


@pytest.mark.parametrize("path", ["/api/v1/agent/whoami", "/v1/whoami"])
async def test_an_unreachable_store_is_a_503_in_the_paths_error_shape_not_a_401(path: str) -> None:
    keys = FakeKeys({STORE_KEY: _stored()})
    keys.down = True
    async with _client(keys, CALLERS) as client:
        refused = await client.get(path, headers=_as(STORE_KEY))
        file_key = await client.get(path, headers=_as(FILE_KEY))
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    body: dict[str, Any] = refused.json()
    assert body["error"]["code"] == "store_unavailable"
    assert ("type" in body["error"]) is path.startswith("/v1/"), "OpenAI's error shape on the OpenAI front"
    assert file_key.status_code == 200, "the callers file's keys still work"


# --- settings and start --------------------------------------------------------------------------------


def _settings(**values: Any) -> AgentSettings:
    return AgentSettings(mcp_service_secret=SecretStr("s3cret"), **values)


def test_store_keys_need_the_run_store() -> None:
    with pytest.raises(ValidationError, match="AGENT_CALLER_KEYS_IN_STORE needs the run store"):
        _settings(caller_keys_in_store=True, database_url="")


@pytest.mark.parametrize(("values", "open_api"), [({}, True), ({"caller_keys_in_store": True}, False)])
def test_an_open_api_is_a_warning_at_start_and_store_keys_close_it(
    values: dict[str, Any], open_api: bool, tmp_path: Path
) -> None:
    with capture_logs() as logs:
        create_app(_settings(database_url=f"sqlite:///{tmp_path}/agent.db", **values))
    assert any(line["event"] == "api_open" and line["log_level"] == "warning" for line in logs) is open_api


def test_with_store_keys_a_callers_file_may_hold_tenants_only(tmp_path: Path) -> None:
    callers = tmp_path / "callers.toml"
    callers.write_text("[tenants.acme]\nmodels = ['gpt-4o']\n")
    create_app(
        _settings(database_url=f"sqlite:///{tmp_path}/agent.db", caller_keys_in_store=True, callers_file=callers)
    )
    with pytest.raises(CallersFileError, match="no \\[\\[keys\\]\\]"):
        create_app(_settings(callers_file=callers))
