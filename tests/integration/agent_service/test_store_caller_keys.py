"""Caller keys kept in the run store (AGENT_CALLER_KEYS_IN_STORE) through the real services.

The keys are made and revoked by ``python -m agent_service.keys`` in a real subprocess, against the database
agent-service uses (SQLite; PostgreSQL for the store going away), or in-process where the test is about what
the service does with a key; the cache time is 0, so a revocation must be seen at the next request. The callers file
beside holds one key of its own and the rules of the tenant ``acme`` (the model ``gpt-4o`` only); the tenant
``globex`` has no table, hence no rules. Only the LLM is scripted.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from agent_service.access.callers_file import hash_key
from agent_service.keys import new_key as make_key
from agent_service.store import RunStore
from support import fake_openai
from support.databases import ADMIN_DSN
from support.stacks import AgentStack, running_agent, running_stack

pytestmark = pytest.mark.anyio

FILE_KEY = "file-" + uuid.uuid4().hex
CALLERS_FILE = f"""
[tenants.acme]
models = ["gpt-4o"]

[[keys]]
name = "acme-file"
tenant = "acme"
sha256 = "{hashlib.sha256(FILE_KEY.encode()).hexdigest()}"
"""
CONVERSATIONS = "/api/v1/agent/conversations"


IN_STORE: dict[str, Any] = {"caller_keys_in_store": True, "caller_keys_cache_seconds": 0}
"""agent-service's settings here: caller keys read from its store, on every request."""


@dataclass
class Stack(AgentStack):
    database_url: str
    callers: Path


def keys_command(database_url: str, *arguments: str, callers: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m agent_service.keys <arguments>`` as an operator runs it, against ``database_url``, with the
    callers file ``callers`` (``AGENT_CALLERS_FILE``) if any."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AGENT_")}
    env["AGENT_DATABASE_URL"] = database_url
    if callers is not None:
        env["AGENT_CALLERS_FILE"] = str(callers)
    return subprocess.run(
        [sys.executable, "-m", "agent_service.keys", *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def new_key(database_url: str, name: str, tenant: str, *extra: str, callers: Path | None = None) -> str:
    made = keys_command(database_url, "add", "--name", name, "--tenant", tenant, *extra, callers=callers)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert len(key) >= 43, "the key alone on stdout"
    assert "\n" not in key
    return key


async def stored_key(database_url: str, name: str, tenant: str, *, trusted: bool = False) -> str:
    """A key added in-process (quicker than the command, which the tests of the command itself run)."""
    key = make_key()
    store = await RunStore.open(database_url)
    try:
        await store.caller_keys.add(hash_key(key), name=name, tenant=tenant, trusted=trusted)
    finally:
        await store.aclose()
    return key


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    folder = tmp_path_factory.mktemp("store-keys")
    callers = folder / "callers.toml"
    callers.write_text(CALLERS_FILE)
    database_url = f"sqlite:///{folder}/agent.db"
    async with running_stack(database_url=database_url, callers_file=callers, **IN_STORE) as stack:
        yield Stack(**vars(stack), database_url=database_url, callers=callers)


def _as(key: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **headers}


def _run(model: str = "gpt-4o") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], "tools": ["echo"]}


def _unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def test_a_key_made_by_the_command_runs_the_agent_as_its_tenant(stack: Stack) -> None:
    key = new_key(stack.database_url, _unique("acme-store"), "acme", "--trusted", callers=stack.callers)
    stack.llm.push(fake_openai.text("done"))
    response = await stack.http.post("/api/v1/agent/run", json=_run(), headers=_as(key, **{"X-User-Id": "u-1"}))
    assert response.status_code == 200, response.text
    assert response.json()["message"]["content"] == "done"


async def test_a_revoked_key_is_refused_at_the_next_request(stack: Stack) -> None:
    name = _unique("acme-store")
    key = new_key(stack.database_url, name, "acme", callers=stack.callers)
    assert (await stack.http.get(CONVERSATIONS, headers=_as(key))).status_code == 200
    revoked = keys_command(stack.database_url, "revoke", "--name", name)
    assert revoked.returncode == 0, revoked.stderr
    refused = await stack.http.get(CONVERSATIONS, headers=_as(key))
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"


async def test_an_unknown_key_or_none_is_refused_and_the_files_key_still_works(stack: Stack) -> None:
    for headers in ({}, _as("not-a-key")):
        refused = await stack.http.get(CONVERSATIONS, headers=headers)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
    assert (await stack.http.get(CONVERSATIONS, headers=_as(FILE_KEY))).status_code == 200


async def test_a_store_key_has_its_tenants_rules_from_the_file_and_a_tenant_without_a_table_none(stack: Stack) -> None:
    acme = await stored_key(stack.database_url, _unique("acme-store"), "acme")
    refused = await stack.http.post("/api/v1/agent/run", json=_run("gpt-4o-mini"), headers=_as(acme))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "model_not_allowed"
    globex = await stored_key(stack.database_url, _unique("globex-store"), "globex")
    stack.llm.push(fake_openai.text("any model"))
    allowed = await stack.http.post("/api/v1/agent/run", json=_run("gpt-4o-mini"), headers=_as(globex))
    assert allowed.status_code == 200, allowed.text


async def test_an_untrusted_store_key_may_not_name_the_user(stack: Stack) -> None:
    key = await stored_key(stack.database_url, _unique("acme-store"), "acme")
    refused = await stack.http.get(CONVERSATIONS, headers=_as(key, **{"X-User-Id": "u-1"}))
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "user_not_allowed")


async def test_runs_of_a_store_key_belong_to_its_tenant(stack: Stack) -> None:
    mine = await stored_key(stack.database_url, _unique("acme-store"), "acme")
    theirs = await stored_key(stack.database_url, _unique("globex-store"), "globex")
    stack.llm.push(fake_openai.text("done"))
    run = await stack.http.post("/api/v1/agent/run", json=_run(), headers=_as(mine))
    run_id = run.json()["runId"]
    assert (await stack.http.get(f"/api/v1/agent/runs/{run_id}", headers=_as(FILE_KEY))).status_code == 200
    assert (await stack.http.get(f"/api/v1/agent/runs/{run_id}", headers=_as(theirs))).status_code == 404


def test_the_command_lists_names_and_never_a_key(stack: Stack) -> None:
    name = _unique("listed")
    key = new_key(stack.database_url, name, "globex", "--trusted", "--allow-unlisted-tenant")
    keys_command(stack.database_url, "revoke", "--name", name)
    listed = keys_command(stack.database_url, "list")
    assert listed.returncode == 0, listed.stderr
    [line] = [line.split() for line in listed.stdout.splitlines() if line.startswith(name)]
    assert line[:4] == [name, "globex", "yes", "-"]  # no role: it runs and reads only
    assert line[5] != "-", "revoked, with its time"
    assert key not in listed.stdout
    assert hashlib.sha256(key.encode()).hexdigest() not in listed.stdout


def test_the_command_gives_a_key_a_role_and_lists_it(stack: Stack) -> None:
    admin, operator = _unique("acme-admin"), _unique("ops")
    new_key(stack.database_url, admin, "acme", "--role", "admin", callers=stack.callers)
    new_key(stack.database_url, operator, "acme", "--role", "operator", callers=stack.callers)
    listed = keys_command(stack.database_url, "list").stdout.splitlines()
    assert listed[0].split()[:4] == ["NAME", "TENANT", "TRUSTED", "ROLE"]
    roles = {line.split()[0]: line.split()[3] for line in listed[1:]}
    assert (roles[admin], roles[operator]) == ("admin", "operator")
    wrong = keys_command(stack.database_url, "add", "--name", _unique("x"), "--tenant", "acme", "--role", "owner")
    assert (wrong.returncode, wrong.stdout) == (2, "")
    assert "invalid choice: 'owner'" in wrong.stderr


def test_the_command_refuses_a_taken_name_and_an_unknown_one(stack: Stack) -> None:
    name = _unique("taken")
    new_key(stack.database_url, name, "acme", callers=stack.callers)
    again = keys_command(stack.database_url, "add", "--name", name, "--tenant", "acme", callers=stack.callers)
    assert (again.returncode, again.stdout) == (1, "")
    assert "stored already" in again.stderr
    unknown = keys_command(stack.database_url, "revoke", "--name", _unique("nobody"))
    assert unknown.returncode == 1
    assert keys_command("", "list").returncode == 2, "no database, nothing to do"


def test_the_command_refuses_the_name_of_a_key_of_the_callers_file(stack: Stack) -> None:
    refused = keys_command(stack.database_url, "add", "--name", "acme-file", "--tenant", "acme", callers=stack.callers)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert "A key of the callers file" in refused.stderr
    assert "'acme-file'" in refused.stderr
    listed = keys_command(stack.database_url, "list")
    assert "acme-file" not in listed.stdout, "nothing stored"


def test_the_command_refuses_a_tenant_without_a_table_unless_allowed(stack: Stack) -> None:
    name = _unique("typo")
    refused = keys_command(stack.database_url, "add", "--name", name, "--tenant", "acmee", callers=stack.callers)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert "no [tenants.acmee] table" in refused.stderr
    assert "--allow-unlisted-tenant" in refused.stderr
    without_file = keys_command(stack.database_url, "add", "--name", name, "--tenant", "acme")
    assert (without_file.returncode, without_file.stdout) == (1, "")
    assert "AGENT_CALLERS_FILE is not set" in without_file.stderr
    assert name not in keys_command(stack.database_url, "list").stdout, "nothing stored"
    new_key(stack.database_url, name, "acmee", "--allow-unlisted-tenant", callers=stack.callers)
    [line] = [line.split() for line in keys_command(stack.database_url, "list").stdout.splitlines() if name in line]
    assert line[:2] == [name, "acmee"]


async def test_an_unreachable_store_is_a_503_not_a_401(stack: Stack, own_postgres_url: str) -> None:
    database = own_postgres_url.rsplit("/", 1)[1]
    key = new_key(own_postgres_url, "acme-pg", "acme", callers=stack.callers)  # the command on PostgreSQL too
    async with (
        running_agent(
            stack.completion_url, stack.gateway, database_url=own_postgres_url, callers_file=None, **IN_STORE
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        assert (await http.get(CONVERSATIONS, headers=_as(key))).status_code == 200
        admin = await asyncpg.connect(ADMIN_DSN, timeout=5)
        try:
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", database, timeout=10
            )
            down = await http.get(CONVERSATIONS, headers=_as(key))
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        finally:
            await admin.close()
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "store_unavailable"
        assert key not in down.text
        assert (await http.get(CONVERSATIONS, headers=_as(key))).status_code == 200, "back once the store is"
