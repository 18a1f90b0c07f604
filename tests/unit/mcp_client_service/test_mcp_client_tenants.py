"""Tenant servers without a network: each tenant's catalog, the bounds of their sessions, syncing with the store.

The store is a double with the store's API (``StoreDouble``); sessions are real ``ServerConnection``s to a port
nobody listens on (they fail to connect, which these tests do not mind).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
import pytest
from mcp_types import Tool
from structlog.testing import capture_logs

from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.servers_file import HttpServerConfig, ServersFile, parse_servers_config
from mcp_client_service.connection.server_connection import ServerConnection
from mcp_client_service.registry.catalog import ServerTools
from mcp_client_service.registry.server_registry import ServerRegistry
from mcp_client_service.tenants.catalogs import TenantCatalogs
from mcp_client_service.tenants.configs import registration_problem, server_config
from mcp_client_service.tenants.servers import ServerGone, TenantServers, TenantSettings
from mcp_client_service.tenants.sessions import SessionKey, SessionLimitReached, TenantSessions
from suite_common.ssrf import EgressPolicy

pytestmark = pytest.mark.anyio

_NOBODY = "http://127.0.0.1:9/mcp"
"""A loopback port nothing listens on: a session to it fails to connect at once."""

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _tool(name: str) -> Tool:
    return Tool(name=name, description=f"{name}'s", input_schema={"type": "object", "properties": {}})


def _json(*names: str) -> list[dict[str, Any]]:
    return [_tool(name).model_dump(by_alias=True, exclude_none=True, mode="json") for name in names]


@dataclass(frozen=True)
class Row:
    tenant: str
    name: str
    url: str = _NOBODY
    transport: Literal["streamable-http", "sse"] = "streamable-http"
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    enabled: bool = True
    allowed_tools: tuple[str, ...] | None = None
    tools: list[dict[str, Any]] | None = None
    last_error: str | None = None
    created_at: datetime = _EPOCH
    updated_at: datetime = _EPOCH
    headers_problem: str | None = None
    auth: Mapping[str, Any] | None = None


class StoreDouble:
    """The store's API over a dict, shared by the "replicas" of a test; its revision moves with every write, and
    each row and deletion keeps the revision it was written at, as the store's do."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = {}
        self.written: dict[tuple[str, str], int] = {}
        self.deleted: dict[tuple[str, str], int] = {}
        self.rev = 0
        self.recorded: list[tuple[str, str, list[dict[str, Any]] | None, str | None]] = []
        self.reads: list[int] = []
        """The revision each ``changes_since`` read from."""

    def put(self, row: Row) -> None:
        """A write by "another replica"."""
        order = len(self.rows)
        self.rev += 1
        self.rows[row.tenant, row.name] = replace(row, created_at=_EPOCH + timedelta(seconds=order))
        self.written[row.tenant, row.name] = self.rev

    async def revision(self) -> int:
        return self.rev

    async def load_all(self) -> tuple[int, Sequence[Row]]:
        return self.rev, list(self.rows.values())

    async def changes_since(self, revision: int) -> tuple[int, Sequence[Row], Sequence[tuple[str, str]]]:
        self.reads.append(revision)
        rows = [row for key, row in self.rows.items() if self.written[key] > revision]
        return self.rev, rows, [key for key, at in self.deleted.items() if at > revision]

    async def list(self, tenant: str) -> Sequence[Row]:
        return [row for row in self.rows.values() if row.tenant == tenant]

    async def get(self, tenant: str, name: str) -> Row | None:
        return self.rows.get((tenant, name))

    async def create(self, *args: Any, **kwargs: Any) -> Row:
        raise NotImplementedError

    async def update(self, tenant: str, name: str, **changes: Any) -> Row | None:
        raise NotImplementedError

    async def delete(self, tenant: str, name: str) -> bool:
        self.rev += 1
        self.deleted[tenant, name] = self.rev
        self.written.pop((tenant, name), None)
        return self.rows.pop((tenant, name), None) is not None

    async def record_listing(
        self, tenant: str, name: str, tools: builtins.list[dict[str, Any]] | None, last_error: str | None
    ) -> None:
        self.recorded.append((tenant, name, tools, last_error))


_OPTIONS = ConnectionOptions(
    connect_timeout=2.0,
    egress=EgressPolicy(allow_loopback=True),
    resolve_references=False,
)


def _registry(*names: str) -> ServerRegistry:
    servers: ServersFile = parse_servers_config(
        '{"mcpServers": {' + ",".join(f'"{name}": {{"url": "http://127.0.0.1:9/{name}"}}' for name in names) + "}}"
    )
    return ServerRegistry(servers, _OPTIONS)


@asynccontextmanager
async def _running(servers: TenantServers) -> AsyncIterator[TenantServers]:
    await servers.load()
    async with anyio.create_task_group() as tg:
        await tg.start(servers.run)
        yield servers
        tg.cancel_scope.cancel()


# --- each tenant's catalog ---------------------------------------------------------------------------


def _catalogs(own: dict[str, list[ServerTools]], shared: Sequence[ServerTools], **options: Any) -> TenantCatalogs:
    version = object()
    return TenantCatalogs(shared=lambda: (version, shared), own=lambda tenant: own.get(tenant, []), **options)


def test_a_tenants_catalog_is_the_shared_tools_then_its_own_marked_with_the_tenant() -> None:
    shared = [ServerTools(server="web", ready=True, tools=[_tool("web_search")])]
    own = {"a": [ServerTools(server="clock", ready=True, tools=[_tool("now")], tenant="a")]}
    catalogs = _catalogs(own, shared, collision="first_wins")

    listing = catalogs.catalog("a").listing().tools

    assert [(tool.name, tool.server, tool.tenant) for tool in listing] == [
        ("web_search", "web", None),
        ("now", "clock", "a"),
    ]
    assert [tool.name for tool in catalogs.catalog("b").listing().tools] == ["web_search"]


def test_a_shared_tool_keeps_its_name_over_a_tenants_tool_of_the_same_name() -> None:
    shared = [ServerTools(server="web", ready=True, tools=[_tool("search")])]
    own = {"a": [ServerTools(server="mine", ready=True, tools=[_tool("search")], tenant="a")]}

    first_wins = _catalogs(own, shared, collision="first_wins").catalog("a")
    prefix = _catalogs(own, shared, collision="prefix").catalog("a")

    assert first_wins.entry("search") is not None
    assert first_wins.entry("search").server == "web"  # type: ignore[union-attr]
    assert [tool.name for tool in prefix.listing().tools] == ["search", "mine__search"]
    assert prefix.entry("mine__search").tenant == "a"  # type: ignore[union-attr]


def test_a_tenants_catalog_is_rebuilt_only_when_something_changed() -> None:
    own: dict[str, list[ServerTools]] = {"a": [ServerTools(server="one", ready=True, tools=[_tool("x")], tenant="a")]}
    catalogs = _catalogs(own, [], collision="first_wins")
    before = catalogs.catalog("a").listing()

    assert catalogs.catalog("a").listing() is before
    own["a"] = [*own["a"], ServerTools(server="two", ready=True, tools=[_tool("y")], tenant="a")]
    catalogs.changed("a")
    assert [tool.name for tool in catalogs.catalog("a").listing().tools] == ["x", "y"]


async def test_servers_switched_off_or_named_like_a_shared_one_are_not_in_the_tenants_catalog() -> None:
    store = StoreDouble()
    store.put(Row("a", "on", tools=_json("kept")))
    store.put(Row("a", "off", enabled=False, tools=_json("gone")))
    store.put(Row("a", "web", tools=_json("clash")))  # a shared server took the name later
    servers = TenantServers(store, _registry("web"), _OPTIONS)
    await servers.load()

    catalog = servers.catalog("a")

    assert [(tool.name, tool.server, tool.tenant) for tool in catalog.listing().tools] == [("kept", "on", "a")]
    assert servers.catalog("b") is servers.catalog(None)  # no servers of its own: the shared catalog


# --- bounds of the sessions ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


_CONFIG = server_config(_NOBODY, "streamable-http", {}, None)


@asynccontextmanager
async def _sessions(**bounds: Any) -> AsyncIterator[tuple[TenantSessions, Clock]]:
    clock = Clock()
    sessions = TenantSessions(_OPTIONS, clock=clock, **{"idle_seconds": 60.0, **bounds})
    async with anyio.create_task_group() as tg:
        await tg.start(sessions.run)
        yield sessions, clock
        tg.cancel_scope.cancel()


async def test_at_the_tenants_bound_its_least_recently_used_idle_session_closes() -> None:
    async with _sessions(max_sessions=10, max_per_tenant=2) as (sessions, clock):
        sessions.open(("a", "one", ""), _CONFIG)
        clock.now += 1
        sessions.open(("a", "two", ""), _CONFIG)
        sessions.open(("a", "one", ""), _CONFIG)  # used again: "two" is now the least recently used
        sessions.open(("b", "other", ""), _CONFIG)

        sessions.open(("a", "three", ""), _CONFIG)

        assert sessions.get(("a", "two", "")) is None
        assert sessions.get(("a", "one", "")) is not None
        assert sessions.get(("b", "other", "")) is not None  # another tenant's session is not taken
        assert (sessions.count("a"), len(sessions)) == (2, 3)


async def test_at_the_total_bound_any_tenants_idle_session_makes_room() -> None:
    async with _sessions(max_sessions=2, max_per_tenant=2) as (sessions, _):
        sessions.open(("a", "one", ""), _CONFIG)
        sessions.open(("b", "one", ""), _CONFIG)

        sessions.open(("c", "one", ""), _CONFIG)

        assert sessions.get(("a", "one", "")) is None
        assert len(sessions) == 2


async def test_when_every_session_is_in_use_no_other_opens() -> None:
    async with _sessions(max_sessions=1, max_per_tenant=1) as (sessions, _):
        async with sessions.using(("a", "one", ""), _CONFIG, wait=0):
            with pytest.raises(SessionLimitReached, match="in use"):
                sessions.open(("b", "one", ""), _CONFIG)
        sessions.open(("b", "one", ""), _CONFIG)  # idle again: it makes room

        assert sessions.get(("a", "one", "")) is None


async def test_a_session_closes_after_its_idle_time_and_not_before() -> None:
    async with _sessions(max_sessions=5, max_per_tenant=5, idle_seconds=60.0) as (sessions, clock):
        sessions.open(("a", "one", ""), _CONFIG)
        clock.now += 59
        sessions._close_idle()
        assert sessions.get(("a", "one", "")) is not None

        clock.now += 2
        sessions._close_idle()
        assert sessions.get(("a", "one", "")) is None
        assert sessions.count("a") == 0


async def test_each_user_of_a_per_user_server_has_a_session_of_their_own_closed_alone_or_with_the_server() -> None:
    made: list[SessionKey] = []

    def make(key: SessionKey, config: HttpServerConfig, on_change: Callable[[], None]) -> ServerConnection:
        made.append(key)  # the gateway's maker picks the token of the key's principal
        return ServerConnection(key[1], config, _OPTIONS, on_change=on_change)

    clock = Clock()
    sessions = TenantSessions(
        _OPTIONS, idle_seconds=60.0, max_sessions=10, max_per_tenant=10, clock=clock, make_connection=make
    )
    async with anyio.create_task_group() as tg:
        await tg.start(sessions.run)
        alice = sessions.open(("a", "crm", "alice"), _CONFIG)
        clock.now += 1
        bob = sessions.open(("a", "crm", "bob"), _CONFIG)
        other = sessions.open(("a", "wiki", "alice"), _CONFIG)
        assert alice is not bob
        assert sessions.open(("a", "crm", "alice"), _CONFIG) is alice  # the same user's calls share theirs
        assert made == [("a", "crm", "alice"), ("a", "crm", "bob"), ("a", "wiki", "alice")]
        assert sessions.latest("a", "crm") is alice  # used last

        sessions.close(("a", "crm", "alice"), "its token was revoked")  # one user's only
        assert (sessions.get(("a", "crm", "alice")), sessions.get(("a", "crm", "bob"))) == (None, bob)
        assert sessions.latest("a", "crm") is bob

        sessions.close_server("a", "crm", "its settings changed")  # every user's
        assert sessions.get(("a", "crm", "bob")) is None
        assert sessions.latest("a", "crm") is None
        assert sessions.get(("a", "wiki", "alice")) is other
        tg.cancel_scope.cancel()


# --- in step with the store ----------------------------------------------------------------------


async def test_a_change_on_another_replica_is_adopted_at_the_next_sync() -> None:
    store = StoreDouble()
    store.put(Row("a", "clock", tools=_json("now")))
    servers = TenantServers(store, _registry(), _OPTIONS, settings=TenantSettings(sync_seconds=3600))
    await servers.load()
    assert [tool.name for tool in servers.catalog("a").listing().tools] == ["now"]

    store.put(Row("a", "clock", enabled=False, tools=_json("now")))
    store.put(Row("a", "notes", tools=_json("write")))
    assert await servers.sync()

    assert [tool.name for tool in servers.catalog("a").listing().tools] == ["write"]
    assert not await servers.sync()  # the revision did not move: nothing is read again


async def test_switching_a_server_off_closes_its_session_and_refuses_new_ones() -> None:
    store = StoreDouble()
    store.put(Row("a", "clock", tools=_json("now")))
    settings = TenantSettings(sync_seconds=3600)
    async with _running(TenantServers(store, _registry(), _OPTIONS, settings=settings)) as servers:
        async with servers.session("a", "clock"):
            assert servers.sessions.get(("a", "clock", "")) is not None

        store.put(Row("a", "clock", enabled=False))
        await servers.sync()

        assert servers.sessions.get(("a", "clock", "")) is None
        with pytest.raises(ServerGone):
            async with servers.session("a", "clock"):
                pass
        with pytest.raises(ServerGone):  # another tenant never reaches it
            async with servers.session("b", "clock"):
                pass


async def test_deleting_a_tenants_last_server_leaves_it_the_shared_catalog() -> None:
    store = StoreDouble()
    store.put(Row("a", "clock", tools=_json("now")))
    servers = TenantServers(store, _registry(), _OPTIONS)
    await servers.load()

    await store.delete("a", "clock")
    await servers.sync()

    assert servers.catalog("a") is servers.catalog(None)


async def test_a_first_connection_that_fails_is_recorded_and_its_session_closed() -> None:
    store = StoreDouble()
    store.put(Row("a", "down", tools=_json("now")))
    settings = TenantSettings(sync_seconds=3600)
    async with _running(TenantServers(store, _registry(), _OPTIONS, settings=settings)) as servers:
        await servers._list_now("a", "down", "")

        assert servers.sessions.get(("a", "down", "")) is None
        [(tenant, name, tools, error)] = store.recorded
        assert (tenant, name, tools) == ("a", "down", None)  # None: the tools listed before stay
        assert error


# --- what a tenant may register ----------------------------------------------------------------------


def test_a_tenant_may_not_register_references_to_the_gateways_environment_or_files() -> None:
    assert registration_problem("https://tools.example.com/mcp", {"Authorization": "Bearer x"}) is None
    assert "reference" in (
        registration_problem("https://x.example/mcp", {"A": "${env:MCP_CLIENT_SERVICE_SECRET}"}) or ""
    )
    assert "reference" in (registration_problem("https://x.example/${file:/etc/passwd}", None) or "")
    assert "http" in (registration_problem("file:///etc/passwd", None) or "")


def test_allowed_tools_are_names_not_patterns() -> None:
    config = server_config(_NOBODY, "sse", {}, ["get*"])

    assert config.transport == "sse"
    assert config.offers("get*")
    assert not config.offers("get_secrets")


async def test_a_sync_that_read_the_store_before_a_change_made_here_does_not_undo_it() -> None:
    store = StoreDouble()
    servers = TenantServers(store, _registry(), _OPTIONS)
    await servers.load()
    store.put(Row("b", "elsewhere", tools=_json("x")))  # moves the revision: the next sync reads
    stale = await store.load_all()

    async def read_then_register_here(revision: int) -> tuple[int, Sequence[Row], Sequence[tuple[str, str]]]:
        servers.adopt(Row("a", "mine", tools=_json("now")))  # registered here while the sync was reading
        return stale[0], stale[1], []

    store.changes_since = read_then_register_here  # type: ignore[method-assign]
    assert not await servers.sync()

    assert [row.name for row in servers.servers_of("a")] == ["mine"]


async def test_a_sync_reads_only_what_changed_since_the_revision_it_has() -> None:
    store = StoreDouble()
    store.put(Row("a", "clock", tools=_json("now")))
    store.put(Row("b", "notes", tools=_json("write")))
    servers = TenantServers(store, _registry(), _OPTIONS, settings=TenantSettings(sync_seconds=3600))
    await servers.load()
    b_catalog = servers.catalog("b")
    loaded_at = servers.revision

    store.put(Row("a", "clock", tools=_json("now", "later")))  # a's listing changed on another replica
    assert await servers.sync()

    assert store.reads == [loaded_at]
    assert [tool.name for tool in servers.catalog("a").listing().tools] == ["now", "later"]
    assert servers.catalog("b") is b_catalog  # b's servers were neither read nor rebuilt

    await store.delete("a", "clock")
    store.put(Row("a", "clock", tools=_json("again")))  # deleted and registered again between two syncs
    await store.delete("b", "notes")
    assert await servers.sync()
    assert [tool.name for tool in servers.catalog("a").listing().tools] == ["again"]
    assert servers.servers_of("b") == []
    assert servers.revision == store.rev


async def test_a_server_whose_headers_no_key_decrypts_is_failed_and_the_others_load() -> None:
    store = StoreDouble()
    problem = "The header values of server locked of tenant a cannot be decrypted with any key"
    store.put(Row("a", "locked", tools=_json("secret"), headers_problem=problem))
    store.put(Row("a", "clock", tools=_json("now")))
    servers = TenantServers(store, _registry(), _OPTIONS, settings=TenantSettings(sync_seconds=3600))
    with capture_logs() as logs:
        await servers.load()

    assert [tool.name for tool in servers.catalog("a").listing().tools] == ["now"]
    [locked] = [row for row in servers.servers_of("a") if row.name == "locked"]
    card = servers.describe(locked)
    assert (card.state, card.last_error) == ("failed", problem)
    with pytest.raises(ServerGone):
        async with servers.session("a", "locked"):
            pass
    assert [line["event"] for line in logs if line.get("server") == "locked"] == [
        "mcp_tenant_server_headers_unreadable"
    ]
