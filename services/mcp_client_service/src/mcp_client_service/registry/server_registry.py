"""All configured servers together: their supervisors, their states, the tool catalog, reloads.

What the call path uses (``ServerRegistry``):

- ``connections[server]``: the server's ``ServerConnection`` (``call_tool``, ``redact``, ``tools``);
- ``catalog.entry(name)``: a listed tool, its server and its name on that server;
- ``call_refusal(server)``: ``None`` when the server may be called now, else why not (circuit
  open, no session), in words fit for the caller;
- ``call_timeout(server)``: the server's own call timeout, or ``None`` for the service's;
- ``record_call(server, seconds, ok)``: every call that reached a server, for its p50 latency,
  and for its circuit breaker (``ok=False`` for a failure of the server, not of the tool;
  ``ok=None`` for an outcome that says nothing of the server, such as the caller's deadline).

Readiness (``readiness``): the service is ready once every server has had its first connection
attempt (serving or failed), and every server marked ``"required": true`` is serving. A server
that fails later, or a slow one, never takes the whole replica out of rotation: its tools are
absent and its status says why. Only required servers are waited for again after that.

A *per-user* OAuth server (``"auth": {"tokens": "perUser"}``) has no session of its own here: nobody's token could
open it. Its ``ServerConnection`` is kept (its config, options and secrets, for lookups) but never started; each end
user's calls go on a session of their own in the tenant sessions' pool (``user_connection`` makes it, keyed by the
caller's tenant, the server and the user), and the tools a user's session lists are the server's listing
(``server_tools``) from then on. It is not waited for by readiness.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping

import anyio
from anyio.abc import TaskGroup
from mcp_types import Tool

from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.references import ReferenceResolver, UnresolvedReferenceError, has_references
from mcp_client_service.config.servers_file import HttpServerConfig, ServerConfig, ServersFile, StdioServerConfig
from mcp_client_service.connection.server_connection import ServerConnection
from mcp_client_service.failures import describe_error
from mcp_client_service.oauth import Principal, ProviderContext, SessionOAuth
from mcp_client_service.registry.catalog import Away, NameCollision, ServerTools, ToolCatalog
from suite_common.logging import get_logger
from suite_common.wire import ServerAuthorization, WireModel

__all__ = ["InvalidTool", "Readiness", "ReloadResult", "ServerRegistry", "ServerStatus", "ServersResponse"]

_log = get_logger("mcp_client_service.registry.server_registry")

_DRAIN_GRACE_SECONDS = 5.0
"""A removed server's in-flight calls get their call timeout and this much more to finish."""


class InvalidTool(WireModel):
    name: str
    reason: str


class ServerStatus(WireModel):
    name: str
    transport: str
    state: str
    """``connecting``, ``ready``, ``degraded`` (serving, but its circuit is not closed, its last
    call failed, or some of its tools were dropped), ``failed``; ``disabled`` for a server
    switched off in the config."""
    tool_count: int
    """Its tools the gateway offers: after ``allowedTools``/``deniedTools``, without dropped ones."""
    last_error: str | None = None
    """While it is not serving: why its last connection failed or ended, redacted; left out once
    it serves again (the log keeps the history)."""
    circuit: str | None = None
    """``closed``, ``open`` (calls fail fast) or ``half_open`` (being tried again)."""
    circuit_detail: str | None = None
    """While the circuit is not closed: why it opened and when the server is tried again."""
    p50_latency_ms: float | None = None
    """Median duration of its last 100 calls; left out before its first call."""
    invalid_tools: list[InvalidTool] | None = None
    """Tools it lists that the gateway dropped (an unusable ``inputSchema``, a name it repeats, a
    tool that can only run as a task), and why."""
    authorization: ServerAuthorization | None = None
    """An OAuth server's authorization (servers with an ``auth`` block only)."""


class Readiness(WireModel):
    """What ``/readyz`` answers: open to probes, so one word per server, never why."""

    ready: bool
    checks: dict[str, str]
    """Per enabled server: ``ok`` (serving), ``connecting`` or ``failed``."""
    waiting_for: list[str]
    """Servers readiness waits for: on their first connection attempt, or required and not serving."""


class ServersResponse(WireModel):
    servers: list[ServerStatus]


class ReloadResult(WireModel):
    added: list[str]
    """Connecting now: new in the file, or enabled again."""
    removed: list[str]
    """Closed once their in-flight calls end: gone from the file, or disabled."""
    changed: list[str]
    """Reconnecting: their entry, or a secret it references, changed."""
    unchanged: list[str]


def _references_digest(config: ServerConfig, resolver: ReferenceResolver) -> str | None:
    """A digest of what the config's references resolve to now, or ``None`` if it has none."""
    if isinstance(config, StdioServerConfig):
        texts = [*config.args, *config.env.values()]
    else:
        texts = [config.url, *config.headers.values()]
        if config.auth is not None:
            texts += [value for value in (config.auth.client_id, config.auth.client_secret) if value]
    referencing = [text for text in texts if has_references(text)]
    if not referencing:
        return None
    try:
        values = [resolver.resolve(text) for text in referencing]
    except UnresolvedReferenceError as error:
        values = [f"unresolved: {error}"]
    return hashlib.sha256("\0".join(values).encode()).hexdigest()


def _authorization(connection: ServerConnection) -> ServerAuthorization | None:
    config = connection.config
    if not isinstance(config, HttpServerConfig) or config.auth is None:
        return None
    consent = connection.consent
    if consent is not None:
        return ServerAuthorization(
            tokens=config.auth.tokens, state="required", authorization_url=consent.authorization_url
        )
    return ServerAuthorization(tokens=config.auth.tokens, state="authorized")


def is_per_user(config: ServerConfig) -> bool:
    """Whether ``config`` is a server whose OAuth tokens are each end user's (no session without a user)."""
    return isinstance(config, HttpServerConfig) and config.auth is not None and config.auth.tokens == "perUser"


class ServerRegistry:
    """Owns one ``ServerConnection`` per enabled server, in config order, and the catalog they feed."""

    def __init__(
        self,
        servers: ServersFile,
        options: ConnectionOptions | None = None,
        *,
        collision: NameCollision = "first_wins",
        oauth: ProviderContext | None = None,
    ) -> None:
        self.options = options or ConnectionOptions()
        self.oauth = oauth
        """The OAuth of servers with an ``auth`` block (their principal: tenant ``""``, user ``""``)."""
        self.catalog = ToolCatalog(collision=collision)
        self.connections: dict[str, ServerConnection] = {}
        self.disabled: dict[str, str] = {}
        self.retiring: set[ServerConnection] = set()
        """Connections removed by a reload, finishing their in-flight calls before they close."""
        self._servers = servers
        self._order: list[str] = []
        self._digests: dict[str, str | None] = {}
        self._task_group: TaskGroup | None = None
        self._scopes: dict[ServerConnection, anyio.CancelScope] = {}
        self._changed: anyio.Event | None = None
        self._reload_lock = anyio.Lock()
        self._was_ready = False
        """Once ready, servers that are not required are no longer waited for (a reload adds some)."""
        self._user_listings: dict[str, tuple[Tool, ...]] = {}
        """Per per-user server, the tools a user's session last listed (whoever's: the server's tools)."""
        self.retired_hooks: list[Callable[[str], None]] = []
        """Told the name of every server a reload removed or changed (its per-user sessions end with it)."""
        self._apply(servers)

    def _connection(self, name: str, config: ServerConfig, servers: ServersFile) -> ServerConnection:
        oauth = None
        if self.oauth is not None and isinstance(config, HttpServerConfig) and config.auth is not None:
            # A per-user server's own connection never connects: no token of (deployment, server, nobody) exists.
            oauth = None if is_per_user(config) else SessionOAuth(self.oauth, Principal("", name))
        return ServerConnection(
            name, config, self.options, base_dir=servers.base_dir, on_change=self._on_change, oauth=oauth
        )

    def is_per_user(self, name: str) -> bool:
        """Whether the servers file's server ``name`` holds an OAuth token per end user."""
        connection = self.connections.get(name)
        return connection is not None and is_per_user(connection.config)

    def user_connection(
        self, key: tuple[str, str, str], config: HttpServerConfig, on_change: Callable[[], None]
    ) -> ServerConnection:
        """The connection of one user's session of the per-user server ``key[1]`` (a ``ConnectionMaker`` of
        ``tenants.sessions``), made as the server's own would be (its options, its base directory), with the token
        of the principal ``key``: (the CALLER's tenant, the server, the user). Never one principal per user name
        alone: "alice" of two tenants are two principals. The tools it lists become the server's listing."""
        assert self.oauth is not None, "OAuth is not configured"
        tenant, name, user = key
        assert user, "a per-user server's session is a user's"

        def changed() -> None:
            on_change()
            current = self.connections.get(name)
            if connection.serving and current is not None and current.config is connection.config:
                self._listed_by_user(name, connection.listing.tools)

        connection = ServerConnection(
            name,
            config,
            self.options,
            base_dir=self._servers.base_dir,
            on_change=changed,
            oauth=SessionOAuth(self.oauth, Principal(tenant, name, user)),
        )
        return connection

    def _listed_by_user(self, name: str, tools: tuple[Tool, ...]) -> None:
        if self._user_listings.get(name) != tools:
            self._user_listings[name] = tools
            self._on_change()

    def oauth_token_changed(self, principal: Principal, authorized: bool) -> None:
        """A machine token of a servers-file server changed (consent, revocation): its connection is told."""
        connection = self.connections.get(principal.server) if not principal.tenant and not principal.user else None
        if connection is not None and connection.oauth is not None:
            connection.token_changed(authorized)

    def _apply(self, servers: ServersFile) -> None:
        """Adopt ``servers`` as the config before ``run`` starts (connections are made, not started)."""
        self._servers = servers
        self._order = list(servers.servers)
        for name, config in servers.servers.items():
            if not config.enabled:
                self.disabled[name] = config.transport
                continue
            self.connections[name] = self._connection(name, config, servers)
            self._digests[name] = _references_digest(config, self._resolver(servers))

    def _resolver(self, servers: ServersFile) -> ReferenceResolver:
        return ReferenceResolver(environ=self.options.environ, base_dir=servers.base_dir)

    async def run(self) -> None:
        """Supervise every server until cancelled; cancelling closes every session and stdio child."""
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            try:
                for connection in self.connections.values():
                    if not is_per_user(connection.config):
                        self._start(connection)
                await anyio.sleep_forever()
            finally:
                self._task_group = None

    def _start(self, connection: ServerConnection) -> None:
        assert self._task_group is not None, "the registry is not running"
        scope = anyio.CancelScope()
        self._scopes[connection] = scope
        self._task_group.start_soon(self._supervise, connection, scope, name=f"mcp-server:{connection.name}")

    async def _supervise(self, connection: ServerConnection, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                await connection.run()
        finally:
            self._scopes.pop(connection, None)
            self.retiring.discard(connection)
            self._notify()

    async def _retire(self, connection: ServerConnection) -> None:
        """Close ``connection`` once its in-flight calls have ended (bounded by its call timeout)."""
        with anyio.move_on_after(connection.call_timeout + _DRAIN_GRACE_SECONDS) as drain:
            await connection.calls.wait_idle()
        if drain.cancelled_caught:
            _log.warning(
                "mcp_server_closed_with_calls_in_flight", server=connection.name, calls=connection.calls.in_flight
            )
        scope = self._scopes.get(connection)
        if scope is not None:
            scope.cancel()
        else:
            self.retiring.discard(connection)
            self._notify()

    async def reload(self, servers: ServersFile) -> ReloadResult:
        """Adopt a new config: connect added servers, close removed ones, reconnect changed ones.

        Calls in flight on a removed or changed server finish on its old session, which closes
        after them. The new file's order is the new priority order.
        """
        async with self._reload_lock:
            old = self._servers.servers
            result = ReloadResult(added=[], removed=[], changed=[], unchanged=[])
            resolver = self._resolver(servers)
            for name, config in old.items():
                if config.enabled and (name not in servers.servers or not servers.servers[name].enabled):
                    result.removed.append(name)
            connections: dict[str, ServerConnection] = {}
            disabled: dict[str, str] = {}
            for name, config in servers.servers.items():
                if not config.enabled:
                    disabled[name] = config.transport
                    continue
                previous = self.connections.get(name)
                digest = _references_digest(config, resolver)
                if previous is not None and previous.config == config and self._digests.get(name) == digest:
                    connections[name] = previous
                    result.unchanged.append(name)
                    continue
                connection = self._connection(name, config, servers)
                if previous is not None:
                    # Until it lists again, a call to one of its tools says "connecting", not "no such tool".
                    connection.listing.known_tools = previous.listing.known_tools
                    result.changed.append(name)
                else:
                    result.added.append(name)
                connections[name] = connection
                self._digests[name] = digest
            # Before the changed servers connect again: they must not pick up what was got for the old URL or client.
            await self._forget_oauth(old, servers)
            retired = [
                connection for name, connection in self.connections.items() if connections.get(name) is not connection
            ]
            self._servers, self._order = servers, list(servers.servers)
            self.connections, self.disabled = connections, disabled
            for name in result.removed:
                self._digests.pop(name, None)
            for name in result.removed:
                self._user_listings.pop(name, None)
            for name in (*result.removed, *result.changed):
                # (a changed per-user server's listing stays: callable, a call opens the caller's session anew)
                for hook in self.retired_hooks:
                    hook(name)
            for connection in retired:
                self.retiring.add(connection)
                if self._task_group is not None:
                    self._task_group.start_soon(self._retire, connection, name=f"mcp-server-retire:{connection.name}")
            if self._task_group is not None:
                for name in (*result.added, *result.changed):
                    if not is_per_user(connections[name].config):
                        self._start(connections[name])
            self._on_change()
            _log.info("mcp_servers_reloaded", **result.model_dump())
            return result

    async def _forget_oauth(self, old: Mapping[str, ServerConfig], servers: ServersFile) -> None:
        """Forget the OAuth tokens, registration and pending consents of every server with an ``auth`` block that
        the new file removes or whose ``url`` or ``auth`` it changes (tenant ``""``: the servers file's)."""
        if self.oauth is None:
            return
        for name, config in old.items():
            if not isinstance(config, HttpServerConfig) or config.auth is None:
                continue
            new = servers.servers.get(name)
            if isinstance(new, HttpServerConfig) and new.url == config.url and new.auth == config.auth:
                continue
            try:
                await self.oauth.vault.forget_server("", name)
            except Exception as error:  # the store away: the tokens stay bound to their URL (vault), logged
                _log.warning("oauth_forget_failed", server=name, error=describe_error(error))

    # --- state and change notification -----------------------------------------------------------

    def _on_change(self) -> None:
        self.catalog.rebuild(self.server_tools())
        if not self._was_ready:
            self._waiting_for()  # latches readiness as soon as it is reached
        self._notify()

    def server_tools(self) -> list[ServerTools]:
        """What the catalog knows of each enabled server, in config order (tenant catalogs start from it)."""
        servers = []
        for connection in self.connections.values():
            if is_per_user(connection.config):
                # Listed once a user's session listed it; callable then (a call opens the caller's own session).
                tools = self._user_listings.get(connection.name, ())
                servers.append(
                    ServerTools(
                        server=connection.name,
                        ready=True,
                        tools=tools,
                        known_tools=tools,
                        tool_prefix=connection.config.tool_prefix,
                        offers=connection.config.offers,
                    )
                )
                continue
            away = connection.away()
            servers.append(
                ServerTools(
                    server=connection.name,
                    ready=away is None,
                    tools=connection.listing.tools,
                    known_tools=connection.listing.known_tools,
                    tool_prefix=connection.config.tool_prefix,
                    offers=connection.config.offers,
                    away=Away(reason=away[0], retry_at=away[1]) if away is not None else None,
                )
            )
        return servers

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_until(self, condition: Callable[[ServerRegistry], bool]) -> None:
        """Return once ``condition(self)`` holds, re-checking on every state change (bound it with a timeout)."""
        while not condition(self):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def all_ready(self) -> bool:
        """Whether every enabled server is serving (``ready`` or ``degraded``)."""
        return all(connection.serving for connection in self.connections.values())

    def readiness(self) -> Readiness:
        """Ready once every server had its first connection attempt and every required one serves.

        ``checks`` has one word per server: ``ok`` (serving), ``connecting`` or ``failed``.
        ``/readyz`` is open to probes, so it never says why: an error can quote a command line or
        a URL. The reasons are on the protected ``GET /mcp/v1/servers``.
        """
        checks = {
            name: "ok" if connection.serving or is_per_user(connection.config) else connection.state
            for name, connection in self.connections.items()
        }
        waiting = self._waiting_for()
        return Readiness(ready=not waiting, checks=checks, waiting_for=waiting)

    def _waiting_for(self) -> list[str]:
        waiting = [
            name
            for name, connection in self.connections.items()
            if not is_per_user(connection.config)  # each user's own sessions: nothing of the replica's to wait for
            and (
                (connection.required and not connection.serving)
                or (not self._was_ready and not connection.first_attempt_done)
            )
        ]
        self._was_ready = self._was_ready or not waiting
        return waiting

    def statuses(self) -> ServersResponse:
        """Every server of the config, in its order, disabled ones included."""
        servers = []
        for name in self._order:
            connection = self.connections.get(name)
            if connection is None:
                status = ServerStatus(name=name, transport=self.disabled[name], state="disabled", tool_count=0)
            elif is_per_user(connection.config):
                status = self._per_user_status(connection)
            else:
                invalid = [InvalidTool(name=tool.name, reason=tool.reason) for tool in connection.listing.invalid_tools]
                status = ServerStatus(
                    name=name,
                    transport=connection.transport,
                    state=connection.state,
                    tool_count=sum(1 for tool in connection.listing.tools if connection.config.offers(tool.name)),
                    last_error=connection.last_error,
                    circuit=connection.circuit,
                    circuit_detail=connection.circuit_detail(),
                    p50_latency_ms=connection.calls.durations.p50_ms(),
                    invalid_tools=invalid or None,
                    authorization=_authorization(connection),
                )
            servers.append(status)
        return ServersResponse(servers=servers)

    def _per_user_status(self, connection: ServerConnection) -> ServerStatus:
        """A per-user server: ``ready`` (authorized) once a user's session listed it, else ``unauthorized`` (each user
        consents for themselves: no URL of anyone's here)."""
        tools = self._user_listings.get(connection.name)
        listed = tools is not None
        return ServerStatus(
            name=connection.name,
            transport=connection.transport,
            state="ready" if listed else "unauthorized",
            tool_count=sum(1 for tool in tools or () if connection.config.offers(tool.name)),
            authorization=ServerAuthorization(tokens="perUser", state="authorized" if listed else "required"),
        )

    # --- for the call path ---------------------------------------------------------------------------

    def call_refusal(self, server: str) -> str | None:
        """``None`` when ``server`` may be called now; else why not, in words fit for the caller."""
        connection = self.connections.get(server)
        if connection is None:
            return f'the MCP server "{server}" is no longer in the gateway\'s config'
        return connection.refuse_reason()

    def retry_after(self, server: str) -> float | None:
        """Seconds until ``server`` is tried again, while it cannot take calls; ``None`` if unknown
        (being tried right now, or gone from the config)."""
        connection = self.connections.get(server)
        away = connection.away() if connection is not None else None
        if away is None or away[1] is None:
            return None
        return max(0.0, away[1] - time.monotonic())

    def call_timeout(self, server: str) -> float | None:
        """The server's own ``callTimeoutSeconds``, or ``None`` (then the service's applies)."""
        connection = self.connections.get(server)
        return connection.config.call_timeout_seconds if connection is not None else None

    def record_call(self, server: str, seconds: float, ok: bool | None) -> None:
        """A call that reached ``server`` took ``seconds``; ``ok=False`` if the server failed it.

        A failure is the server's, not the tool's: a timeout at the server's own limit, a dropped
        connection, a malformed answer. An answer is ``ok=True``, be it the tool's own error
        result (``isError``) or a JSON-RPC error. ``ok=None`` says nothing of the server (the
        caller's shorter deadline ended the call, the answer was too large): the breaker is not
        told. Calls that never reached the server (invalid arguments, a passed deadline, a
        refusal) are not recorded.
        """
        connection = self.connections.get(server)
        if connection is not None:
            connection.calls.record(seconds, ok=ok)
            self._notify()
