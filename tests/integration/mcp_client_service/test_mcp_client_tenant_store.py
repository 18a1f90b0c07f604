"""The gateway's tenant server store on both backends: SQLite (a file of the test's) and PostgreSQL (this session's
database, each test with tenants of its own; migrations on databases of their own).

Every test runs against both; PostgreSQL being unreachable fails them (see ``support.databases``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from cryptography.fernet import Fernet, InvalidToken
from pydantic import SecretStr

from mcp_client_service.app import create_app
from mcp_client_service.settings import MCPClientSettings
from mcp_client_service.store import (
    SecretsBox,
    SecretsKeyMissing,
    SecretsUnreadable,
    ServerExists,
    StoredServer,
    StoreError,
    TenantServerStore,
    TooManyServers,
    open_tenant_store,
)
from mcp_client_service.store.schema import metadata, tenant_servers
from mcp_client_service.store.tenant_servers import MAX_LISTING_BYTES, MIGRATIONS, STORE_NAME
from suite_common.sql import database_url, open_database
from support.databases import fresh_database, fresh_postgres_database

pytestmark = pytest.mark.anyio

BACKENDS = ["sqlite", "postgresql"]
KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
TOKEN = "Bearer s3cr3t-t0ken"
TOOLS: list[dict[str, Any]] = [{"name": "echo", "inputSchema": {"type": "object"}, "description": "Échos 🌦"}]

OpenStore = Callable[..., Awaitable[TenantServerStore]]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store/mcp_client.db"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def open_store(store_url: str) -> AsyncIterator[OpenStore]:
    """Opens stores on the test's database (each its own connections, like replicas), with key A unless told
    otherwise; closes them."""
    opened: list[TenantServerStore] = []

    async def open_one(keys: str | None = KEY_A) -> TenantServerStore:
        secrets = SecretsBox.configured(SecretStr(keys or ""), None)
        store = await open_tenant_store(store_url, secrets=secrets)
        opened.append(store)
        return store

    try:
        yield open_one
    finally:
        for store in opened:
            await store.close()


@pytest.fixture
async def store(open_store: OpenStore) -> TenantServerStore:
    return await open_store()


@pytest.fixture
def tenant() -> str:
    """A tenant of this test's own (the PostgreSQL database is the session's)."""
    return f"t-{uuid.uuid4().hex[:10]}"


async def create(store: TenantServerStore, tenant: str, name: str, **fields: Any) -> StoredServer:
    values: dict[str, Any] = {
        "url": f"https://{name}.example/mcp",
        "transport": "streamable-http",
        "headers": {},
        "enabled": True,
        "allowed_tools": None,
        "max_servers": 20,
    }
    values.update(fields)
    max_servers = values.pop("max_servers")
    return await store.create(tenant, name, **values, max_servers=max_servers)


async def stored_token(store: TenantServerStore, tenant: str, name: str) -> str | None:
    def read(connection: sa.Connection) -> str | None:
        query = sa.select(tenant_servers.c.headers_encrypted).where(
            tenant_servers.c.tenant == tenant, tenant_servers.c.name == name
        )
        token: str | None = connection.execute(query).scalar_one()
        return token

    return await store._db.run("read a token", read, write=False)


async def test_a_created_server_reads_back_with_its_headers_decrypted_and_encrypted_at_rest(
    store: TenantServerStore, open_store: OpenStore, tenant: str
) -> None:
    created = await create(
        store, tenant, "docs", transport="sse", headers={"Authorization": TOKEN}, allowed_tools=["search", "read"]
    )
    assert created.headers == {"Authorization": TOKEN}
    assert TOKEN not in repr(created)
    read = await (await open_store()).get(tenant, "docs")
    assert read is not None
    assert read == created
    assert (read.transport, read.allowed_tools, read.tools, read.last_error) == ("sse", ("search", "read"), None, None)
    assert read.created_at.tzinfo is not None
    token = await stored_token(store, tenant, "docs")
    assert token is not None
    assert "s3cr3t" not in token
    assert "Authorization" not in token


async def test_a_server_without_headers_needs_no_key_and_one_with_headers_is_refused_without_one(
    open_store: OpenStore, tenant: str
) -> None:
    keyless = await open_store(keys=None)
    plain = await create(keyless, tenant, "plain")
    assert plain.headers == {}
    assert await stored_token(keyless, tenant, "plain") is None
    with pytest.raises(SecretsKeyMissing, match="MCP_CLIENT_SECRETS_KEY is not set"):
        await create(keyless, tenant, "secret", headers={"Authorization": TOKEN})
    with pytest.raises(SecretsKeyMissing):
        await keyless.update(tenant, "plain", headers={"Authorization": TOKEN})
    assert [server.name for server in await keyless.list(tenant)] == ["plain"]


async def test_a_name_is_taken_once_per_tenant(store: TenantServerStore, tenant: str) -> None:
    await create(store, tenant, "docs")
    with pytest.raises(ServerExists, match="already has a server named docs"):
        await create(store, tenant, "docs", url="https://other.example/mcp")
    other = f"{tenant}-other"
    await create(store, other, "docs")
    assert [s.url for s in await store.list(tenant)] == ["https://docs.example/mcp"]
    assert [s.tenant for s in await store.list(other)] == [other]


async def test_a_tenant_at_its_most_servers_cannot_add_one(store: TenantServerStore, tenant: str) -> None:
    for name in ("a", "b"):
        await create(store, tenant, name, max_servers=2)
    with pytest.raises(TooManyServers, match=r"\(2\)"):
        await create(store, tenant, "c", max_servers=2)
    await create(store, f"{tenant}-other", "c", max_servers=2)  # another tenant's count is its own
    assert [s.name for s in await store.list(tenant)] == ["a", "b"]


async def test_replicas_creating_at_once_never_pass_the_bound(open_store: OpenStore, tenant: str) -> None:
    replicas = [await open_store() for _ in range(4)]
    outcomes: list[str] = []

    async def add(replica: TenantServerStore, index: int) -> None:
        try:
            await create(replica, tenant, f"s{index}", max_servers=3)
            outcomes.append("created")
        except TooManyServers:
            outcomes.append("refused")

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for index in range(8):
                group.start_soon(add, replicas[index % 4], index)
    assert sorted(outcomes) == ["created"] * 3 + ["refused"] * 5
    assert len(await replicas[0].list(tenant)) == 3


async def test_an_update_changes_only_the_fields_given_and_moves_the_revision(
    store: TenantServerStore, tenant: str
) -> None:
    created = await create(store, tenant, "docs", headers={"Authorization": TOKEN}, allowed_tools=["search"])
    before = await store.revision()
    updated = await store.update(tenant, "docs", enabled=False)
    assert updated is not None
    assert (updated.enabled, updated.url, updated.headers, updated.allowed_tools) == (
        False,
        created.url,
        {"Authorization": TOKEN},
        ("search",),
    )
    assert updated.updated_at >= created.updated_at
    assert updated.created_at == created.created_at
    assert await store.revision() == before + 1
    changed = await store.update(tenant, "docs", headers={}, allowed_tools=None, url="https://new.example/mcp")
    assert changed is not None
    assert (changed.headers, changed.allowed_tools, changed.url) == ({}, None, "https://new.example/mcp")
    assert await stored_token(store, tenant, "docs") is None
    assert await store.get(tenant, "docs") == changed
    assert await store.update(tenant, "missing", enabled=False) is None
    assert await store.revision() == before + 2


async def test_deleting_a_server_removes_it_once(store: TenantServerStore, tenant: str) -> None:
    await create(store, tenant, "docs")
    before = await store.revision()
    assert await store.delete(tenant, "docs") is True
    assert await store.delete(tenant, "docs") is False
    assert await store.get(tenant, "docs") is None
    assert await store.revision() == before + 1


async def test_a_listing_moves_the_revision_only_when_the_tools_changed(store: TenantServerStore, tenant: str) -> None:
    await create(store, tenant, "docs")
    start = await store.revision()
    await store.record_listing(tenant, "docs", TOOLS, None)
    assert await store.revision() == start + 1
    listed = await store.get(tenant, "docs")
    assert listed is not None
    assert (listed.tools, listed.last_error) == (TOOLS, None)
    await store.record_listing(tenant, "docs", [dict(tool) for tool in TOOLS], None)  # the same tools again
    await store.record_listing(tenant, "docs", None, "connection refused")  # failed: the tools stay
    assert await store.revision() == start + 1
    failed = await store.get(tenant, "docs")
    assert failed is not None
    assert (failed.tools, failed.last_error) == (TOOLS, "connection refused")
    await store.record_listing(tenant, "docs", [], None)
    emptied = await store.get(tenant, "docs")
    assert emptied is not None
    assert (emptied.tools, emptied.last_error) == ([], None)
    assert await store.revision() == start + 2
    await store.record_listing(tenant, "gone", TOOLS, None)  # deleted meanwhile: nothing happens
    assert await store.revision() == start + 2


async def test_load_all_reads_the_revision_and_every_tenants_servers_in_creation_order(
    store: TenantServerStore, open_store: OpenStore, tenant: str
) -> None:
    other = f"{tenant}-b"
    for owner, name in ((tenant, "zeta"), (other, "one"), (tenant, "alpha")):
        await create(store, owner, name)
    revision, servers = await (await open_store()).load_all()
    assert revision == await store.revision()
    mine = [(s.tenant, s.name) for s in servers if s.tenant in (tenant, other)]
    assert mine == [(tenant, "zeta"), (tenant, "alpha"), (other, "one")]


async def test_a_key_rotation_re_encrypts_every_row_with_the_new_key(open_store: OpenStore, tenant: str) -> None:
    old = await open_store(keys=KEY_A)
    await create(old, tenant, "docs", headers={"Authorization": TOKEN})
    token_before = await stored_token(old, tenant, "docs")
    both = await open_store(keys=f"{KEY_B},{KEY_A}")
    server = await both.get(tenant, "docs")  # the old key still decrypts
    assert server is not None
    assert server.headers == {"Authorization": TOKEN}
    assert await both.rotate_secrets() >= 1
    token_after = await stored_token(both, tenant, "docs")
    assert token_after != token_before
    new_only = await open_store(keys=KEY_B)
    rotated = await new_only.get(tenant, "docs")
    assert rotated is not None
    assert rotated.headers == {"Authorization": TOKEN}


async def test_an_auth_block_is_sealed_at_rest_read_back_changed_removed_and_rotated(
    open_store: OpenStore, tenant: str
) -> None:
    client_secret = "cs-" + TOKEN
    auth = {"type": "oauth", "tokens": "perUser", "clientId": "gw-client", "clientSecret": client_secret}
    old = await open_store(keys=KEY_A)
    created = await create(old, tenant, "crm", auth=auth)
    assert created.auth == auth
    assert client_secret not in repr(created)

    def raw(connection: sa.Connection) -> str | None:
        query = sa.select(tenant_servers.c.auth_encrypted).where(
            tenant_servers.c.tenant == tenant, tenant_servers.c.name == "crm"
        )
        token: str | None = connection.execute(query).scalar_one()
        return token

    sealed = await old._db.run("read the sealed auth", raw, write=False)
    assert sealed is not None
    assert client_secret not in sealed
    assert "gw-client" not in sealed
    with pytest.raises(SecretsKeyMissing):
        await create(await open_store(keys=None), tenant, "other", auth=auth)

    both = await open_store(keys=f"{KEY_B},{KEY_A}")
    assert await both.rotate_secrets() >= 1
    rotated = await (await open_store(keys=KEY_B)).get(tenant, "crm")
    assert rotated is not None
    assert rotated.auth == auth

    machine = {"type": "oauth", "tokens": "machine"}
    changed = await both.update(tenant, "crm", auth=machine)
    assert changed is not None
    assert changed.auth == machine
    kept = await both.update(tenant, "crm", enabled=False)  # auth left out: kept
    assert kept is not None
    assert kept.auth == machine
    removed = await both.update(tenant, "crm", auth=None)
    assert removed is not None
    assert removed.auth is None
    assert await both._db.run("read the sealed auth", raw, write=False) is None


async def test_headers_no_key_decrypts_make_that_server_say_so_and_never_keep_the_others_from_loading(
    open_store: OpenStore, tenant: str
) -> None:
    await create(await open_store(keys=KEY_A), tenant, "docs", headers={"Authorization": TOKEN})
    await create(await open_store(keys=KEY_A), tenant, "open")
    wrong = await open_store(keys=KEY_B)
    _, servers = await wrong.load_all()
    mine = {server.name: server for server in servers if server.tenant == tenant}
    assert (mine["open"].headers_problem, mine["docs"].headers) == (None, {})
    problem = mine["docs"].headers_problem or ""
    assert re.search(f"server docs of tenant {tenant}.*MCP_CLIENT_SECRETS_KEY", problem), problem
    assert TOKEN not in problem
    assert KEY_A not in problem
    got = await wrong.get(tenant, "docs")
    assert got is not None
    assert got.headers_problem == problem
    with pytest.raises(SecretsUnreadable):
        await wrong.rotate_secrets()
    keyless = await (await open_store(keys=None)).get(tenant, "docs")
    assert keyless is not None
    assert "set the key they were encrypted with" in (keyless.headers_problem or "")


async def test_changes_since_a_revision_are_the_servers_written_and_deleted_after_it(
    store: TenantServerStore, tenant: str
) -> None:
    await create(store, tenant, "kept")
    await create(store, tenant, "changed")
    await create(store, tenant, "gone")
    since = await store.revision()
    await store.record_listing(tenant, "changed", TOOLS, None)
    await store.delete(tenant, "gone")
    await create(store, tenant, "new")

    revision, rows, deleted = await store.changes_since(since)

    assert revision == await store.revision() == since + 3
    assert [row.name for row in rows if row.tenant == tenant] == ["changed", "new"]
    assert [key for key in deleted if key[0] == tenant] == [(tenant, "gone")]
    assert await store.changes_since(revision) == (revision, [], [])
    await store.record_listing(tenant, "changed", TOOLS, "slow")  # an error alone: read with the row, no change
    await store.update(tenant, "nobody", enabled=False)  # no such server: nothing changes
    assert (await store.changes_since(revision))[1:] == ([], [])


async def test_a_listing_larger_than_the_cap_keeps_the_previous_one_and_says_why(
    store: TenantServerStore, tenant: str
) -> None:
    await create(store, tenant, "big")
    await store.record_listing(tenant, "big", TOOLS, None)
    start = await store.revision()
    huge = [{"name": f"t{i}", "description": "x" * 10_000, "inputSchema": {"type": "object"}} for i in range(101)]

    await store.record_listing(tenant, "big", huge, None)

    kept = await store.get(tenant, "big")
    assert kept is not None
    assert kept.tools == TOOLS
    assert f"more than the {MAX_LISTING_BYTES}" in (kept.last_error or "")
    assert await store.revision() == start


def test_a_key_that_is_not_a_fernet_key_is_refused_by_position_without_showing_it() -> None:
    with pytest.raises(ValueError, match="key 2 of 2 is not a Fernet key") as refused:
        SecretsBox.configured(SecretStr(f"{KEY_A}, not-a-key-at-all"), None)
    assert "not-a-key-at-all" not in str(refused.value)
    assert SecretsBox.configured(SecretStr(" , "), None) is None


def test_the_keys_may_come_from_a_file_one_per_line(tmp_path: Path) -> None:
    key_file = tmp_path / "secrets-key"
    key_file.write_text(f"{KEY_B}\n{KEY_A}\n")
    box = SecretsBox.configured(SecretStr(""), key_file)
    assert box is not None
    assert box.key_count == 2
    token = box.seal({"X-Api-Key": "k"})
    assert SecretsBox([KEY_B]).open(token) == {"X-Api-Key": "k"}  # the first key encrypts
    with pytest.raises(InvalidToken):
        SecretsBox([KEY_A]).open(token)
    with pytest.raises(ValueError, match="cannot be read"):
        SecretsBox.configured(SecretStr(""), tmp_path / "missing")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_migrated_schema_is_the_schema_the_store_declares(backend: str, tmp_path: Path) -> None:
    def differences(connection: sa.Connection) -> list[Any]:
        context = MigrationContext.configure(connection, opts={"version_table": MIGRATIONS.version_table})
        return list(compare_metadata(context, metadata))

    async def migrate_and_compare(url: str) -> None:
        database = open_database(database_url(url, STORE_NAME), STORE_NAME)
        try:
            assert await MIGRATIONS.upgrade(database) == MIGRATIONS.head()
            assert await database.run("compare the schema", differences, write=False) == []
        finally:
            await database.dispose()

    with fresh_database(backend, tmp_path, "gateway_fresh") as url:
        await migrate_and_compare(url)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_store_opened_without_migrating_refuses_a_schema_behind(backend: str, tmp_path: Path) -> None:
    async def check(url: str) -> None:
        with pytest.raises(StoreError, match=re.escape("python -m mcp_client_service.store migrate")):
            await open_tenant_store(url, secrets=None, migrate=False)
        await (await open_tenant_store(url, secrets=None)).close()
        store = await open_tenant_store(url, secrets=None, migrate=False)
        try:
            await store.ping()
        finally:
            await store.close()

    with fresh_database(backend, tmp_path, "gateway_unmigrated") as url:
        await check(url)


def _command(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **env}
    environ.pop("MCP_CLIENT_SERVICE_SECRET", None)  # a job on the store needs only the store's settings
    return subprocess.run(
        [sys.executable, "-m", "mcp_client_service.store", *args],
        env=environ,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_commands_migrate_and_rotate_the_key_of_a_database(backend: str, tmp_path: Path) -> None:
    async def check(url: str) -> None:
        done = await anyio.to_thread.run_sync(lambda: _command(tmp_path, "migrate", MCP_CLIENT_DATABASE_URL=url))
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"The tenant server store's schema is at revision {MIGRATIONS.head()}."
        store = await open_tenant_store(url, secrets=SecretsBox([KEY_A]), migrate=False)
        try:
            await create(store, "acme", "docs", headers={"Authorization": TOKEN})
        finally:
            await store.close()
        rotate = await anyio.to_thread.run_sync(
            lambda: _command(
                tmp_path, "rotate-key", MCP_CLIENT_DATABASE_URL=url, MCP_CLIENT_SECRETS_KEY=f"{KEY_B},{KEY_A}"
            )
        )
        assert rotate.returncode == 0, rotate.stderr
        assert rotate.stdout.strip() == "Header values of 1 servers re-encrypted with the first key."
        store = await open_tenant_store(url, secrets=SecretsBox([KEY_B]), migrate=False)
        try:
            server = await store.get("acme", "docs")
            assert server is not None
            assert server.headers == {"Authorization": TOKEN}
        finally:
            await store.close()
        wrong = await anyio.to_thread.run_sync(
            lambda: _command(tmp_path, "rotate-key", MCP_CLIENT_DATABASE_URL=url, MCP_CLIENT_SECRETS_KEY=KEY_A)
        )
        assert wrong.returncode == 1
        assert "cannot be decrypted" in wrong.stderr
        assert "Traceback" not in wrong.stderr

    if backend == "sqlite":
        await check(f"sqlite:///{tmp_path}/data/mcp_client.db")  # the folder is created
        assert (tmp_path / "data" / "mcp_client.db").is_file()
    else:
        with fresh_postgres_database("gateway_migrate") as url:
            await check(url)


def test_generate_key_prints_a_fernet_key(tmp_path: Path) -> None:
    done = _command(tmp_path, "generate-key")
    assert done.returncode == 0, done.stderr
    assert SecretsBox([done.stdout.strip()]).key_count == 1


@pytest.mark.parametrize(
    "url", ["mysql://root@localhost/gw", "sqlite://", "sqlite:///:memory:", "not a url", "postgresql+psycopg://x/y"]
)
async def test_a_database_url_the_store_does_not_take_is_refused_in_one_sentence(url: str) -> None:
    with pytest.raises(ValueError, match=r"^The tenant server store's") as refused:
        await open_tenant_store(url, secrets=None)
    assert str(refused.value).endswith(".")
    assert "\n" not in str(refused.value)


async def test_an_unreachable_postgresql_is_a_store_error_that_keeps_the_password_out() -> None:
    with anyio.fail_after(15), pytest.raises(StoreError) as failure:
        await open_tenant_store("postgresql://postgres:hunter2secret@127.0.0.1:1/gw", secrets=None)
    assert str(failure.value).startswith("The tenant server store could not")
    assert "hunter2secret" not in str(failure.value)


async def test_the_gateway_opens_its_store_for_its_lifetime_and_closes_it(tmp_path: Path) -> None:
    servers_file = tmp_path / "mcp_servers.json"
    servers_file.write_text('{"mcpServers": {}}')
    settings = MCPClientSettings(
        service_secret=SecretStr("s"),
        servers_file=servers_file,
        database_url=f"sqlite:///{tmp_path}/gateway/store.db",
        secrets_key=SecretStr(KEY_A),
    )
    app = create_app(settings)
    with anyio.fail_after(20):
        async with app.router.lifespan_context(app) as state:
            store: TenantServerStore = state["services"].tenant_store  # type: ignore[index]
            await create(store, "acme", "docs", headers={"Authorization": TOKEN})
            assert [s.name for s in await store.list("acme")] == ["docs"]
    assert (tmp_path / "gateway" / "store.db").is_file()
    with pytest.raises(ValueError, match="not a Fernet key"):
        create_app(settings.model_copy(update={"secrets_key": SecretStr("nope")}))
