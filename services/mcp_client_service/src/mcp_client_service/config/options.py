"""How every server is connected and supervised: the options the service's settings give.

The defaults of the caps live here, beside the options that carry them, so that the settings,
the transports and the connections all take them from one place below them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from mcp_client_service.config.schemas import DEFAULT_MAX_TOOLS
from suite_common.ssrf import EgressPolicy, Resolver

__all__ = [
    "DEFAULT_INHERITED_ENV",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "Backoff",
    "BreakerPolicy",
    "ConnectionOptions",
]

DEFAULT_INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TZ")
"""The SDK's safe defaults, plus the locale and time zone: nothing that holds a secret."""

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest line (one JSON-RPC message) a stdio server may write (``transport.stdio``)."""

DEFAULT_MAX_CONNECTIONS = 1000
"""Connections one HTTP server's client may hold at once (``transport.ssrf_guard``)."""

DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""Most one HTTP answer, or one SSE event, may hold (``transport.response_limits``)."""


@dataclass(frozen=True)
class BreakerPolicy:
    """When a server's circuit opens, and for how long (``connection.breaker``)."""

    failure_threshold: int = 5
    window_seconds: float = 60.0
    open_seconds: float = 30.0


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnection attempts: ``initial`` doubling up to ``maximum``.

    A session that stayed up at least ``maximum`` seconds was healthy, so the next failure
    starts again from ``initial``.
    """

    initial: float = 0.5
    maximum: float = 30.0

    def next(self, delay: float) -> float:
        return min(delay * 2, self.maximum)


@dataclass(frozen=True)
class ConnectionOptions:
    """How every server is connected and supervised (from the service's settings)."""

    connect_timeout: float = 60.0
    list_timeout: float = 15.0
    probe_interval: float = 30.0
    catalog_ttl: float = 600.0
    call_timeout: float = 60.0
    """For servers without their own ``callTimeoutSeconds``; also bounds how long a removed
    server's in-flight calls may keep it open after a reload."""
    list_changed_debounce: float = 2.0
    """Least time between two listings of a server's tools that ``list_changed`` asks for: the
    notifications that come in between are answered by one listing."""
    max_tools: int = DEFAULT_MAX_TOOLS
    """Most tools listed per server; the rest are left out (and logged)."""
    backoff: Backoff = field(default_factory=Backoff)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    inherit_env: tuple[str, ...] = DEFAULT_INHERITED_ENV
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    egress: EgressPolicy = field(default_factory=EgressPolicy)
    """What HTTP servers may be reached at (``MCP_CLIENT_SSRF_*``), checked at every connection."""
    trust_url_hosts: bool = False
    """Trust the host name in each server's own URL whatever it resolves to (``egress_for``): True for the
    servers file's servers (the operator wrote their URLs), never for a tenant's (``for_tenant_servers``)."""
    resolver: Resolver | None = None
    """How the guard resolves names (``MCP_CLIENT_HOSTS_FILE`` first, then DNS); ``None``: DNS only."""
    http_max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Connections one HTTP server's client may hold at once (a call in flight may hold one)."""
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    """Most an HTTP server's answer (a JSON body, or one SSE event) may hold."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """The gateway's environment (``os.environ``): variables a stdio child may inherit, and the
    values of ``${env:...}`` references."""
    forbidden_values: tuple[str, ...] = ()
    """Values that must never reach a server (the gateway's shared secret): a config whose
    resolved env, headers, args or URL contain one is refused."""
    resolve_references: bool = True
    """Whether ``${env:...}`` / ``${file:...}`` in a URL or header are resolved. Only the operator's servers file
    may read the gateway's environment and files: a tenant's server (``tenants``) is connected with its values as
    written."""

    def egress_for(self, url: str) -> EgressPolicy:
        """The policy for connections to the server at ``url``: ``egress``, trusting the URL's host name when
        ``trust_url_hosts`` (an IP literal stays judged by the address rules)."""
        host = urlsplit(url).hostname if self.trust_url_hosts else None
        return self.egress.trusting_hosts([host]) if host else self.egress

    def for_tenant_servers(self) -> ConnectionOptions:
        """These options for servers a tenant registered: the plain policy (no URL's host trusted), nothing of the
        gateway's environment, their values as written (no ``${env:...}`` / ``${file:...}`` resolved)."""
        return replace(self, trust_url_hosts=False, environ={}, resolve_references=False)
