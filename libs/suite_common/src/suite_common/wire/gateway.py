"""mcp-client-service's contract: the tools it lists and a call of one, with its progress (docs/gateway-api.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from suite_common.wire.base import WireModel

__all__ = [
    "CALLER_META_KEY",
    "TENANT_HEADER",
    "AuthorizationRequiredError",
    "CallToolElicitation",
    "CallToolProgress",
    "CallToolRequest",
    "CallToolResponse",
    "CallerContext",
    "ElicitationAction",
    "ElicitationAnswer",
    "ListToolsResponse",
    "OAuthAuthorizeRequest",
    "OAuthAuthorizeResult",
    "OAuthCallback",
    "OAuthCallbackResult",
    "OAuthConnectionView",
    "OAuthConnections",
    "ToolInfo",
    "ToolUnavailable",
    "UserRole",
]


TENANT_HEADER = "X-Tenant-Id"
"""On ``list-tools`` and ``call-tool``: the tenant whose catalog the gateway answers from (the shared servers and the
tenant's own). Absent: the shared servers only."""

CALLER_META_KEY = "io.loopsuite/caller"
"""The ``_meta`` key of every ``tools/call`` the gateway sends: a ``CallerContext``, so a tool server learns who the
call acts for."""

UserRole = Literal["guest", "user", "admin", "owner"]


class CallerContext(WireModel):
    """Who a tool call acts for: sent by agent-service in ``call-tool``'s ``caller``, forwarded by the gateway as
    ``_meta["io.loopsuite/caller"]``."""

    tenant: str
    user: str | None = None
    role: UserRole | None = None
    run_id: str
    conversation_id: str | None = None


class ToolUnavailable(WireModel):
    """Why a configured tool cannot be called now (its server is restarting, its circuit is open)."""

    reason: str
    retry_after_seconds: float | None = None
    """When to try again, as far as the gateway knows; ``None`` while it is reconnecting right now."""


class ToolInfo(WireModel):
    name: str
    description: str = ""
    input_schema: dict[str, Any]
    server: str
    server_tool: str | None = None
    """The tool's own name on its server, set when the gateway lists it under another (a server's
    ``toolPrefix``, or ``<server>__<tool>`` under ``MCP_CLIENT_TOOL_NAME_COLLISION=prefix``);
    ``None``: the same as ``name``."""
    title: str | None = None
    annotations: dict[str, Any] | None = None
    """MCP ``ToolAnnotations`` as the server sent them: ``readOnlyHint``, ``destructiveHint``,
    ``idempotentHint``, ``openWorldHint``, ``title``."""
    output_schema: dict[str, Any] | None = None
    unavailable: ToolUnavailable | None = None
    """Set on a tool whose server is known but cannot take calls now: it is listed all the same,
    and ``call-tool`` answers 503 ``tool_unavailable`` with ``Retry-After``."""
    tenant: str | None = None
    """Set on a tool of a server the tenant registered itself (``TENANT_HEADER``'s tenant); ``None``: a server of
    the deployment's servers file, shared by every tenant."""


class ListToolsResponse(WireModel):
    tools: list[ToolInfo]


class CallToolRequest(WireModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    server: str | None = Field(default=None, min_length=1)
    """The MCP server to run the tool on (``server`` of its ``list-tools`` entry). Given, the gateway calls that
    server's tool, or nothing: whatever ``name`` resolves to now (under ``first_wins`` a name falls to the next
    server while its first is away, and back), the call never runs on another server. 409
    ``tool_server_mismatch`` if that server does not have the tool now; 503 ``tool_unavailable`` while it is away."""
    server_tool: str | None = Field(default=None, min_length=1)
    """With ``server``: the tool's own name there (``serverTool``, else ``name``, of its ``list-tools`` entry);
    ``name`` must then be a name that tool is listed under (its server's ``toolPrefix`` and its own name, or
    ``<server>__`` and that)."""
    caller: CallerContext | None = None
    """Who the call acts for: the gateway sends it to the tool server as ``_meta["io.loopsuite/caller"]``. Its
    ``user`` also picks the token of a per-user OAuth server (docs/gateway.md, Authorization)."""
    call_id: str | None = Field(default=None, min_length=1, max_length=300)
    """The caller's own key for the call (agent-service: ``<runId>/<toolCallId>``). A call with one that waits for a
    person's answer to the server's ``elicitation/create`` outlives its caller's connection (up to the answer's time
    limit) and is followed again with ``GET /mcp/v1/calls/{callId}/events``."""


class CallToolResponse(WireModel):
    content: list[dict[str, Any]]
    """MCP content blocks as the server sent them (``{"type": "text", "text": ...}`` and so on)."""
    structured_content: dict[str, Any] | None = None
    is_error: bool = False
    server: str
    duration_ms: float


class CallToolProgress(WireModel):
    """A ``progress`` event of a ``call-tool`` answered as SSE: the MCP server's ``notifications/progress``."""

    progress: float
    total: float | None = None
    message: str | None = None


class CallToolElicitation(WireModel):
    """An ``elicitation`` event of a ``call-tool`` answered as SSE: the server asked its user a question
    (``elicitation/create``, form mode) during the call. Answered with ``POST /mcp/v1/elicitations/{elicitationId}``;
    the call goes on when it is (or when the answer's time limit passes: ``cancel``)."""

    elicitation_id: str
    message: str
    requested_schema: dict[str, Any]
    """The restricted JSON Schema of the MCP spec: an object of flat string, number, integer, boolean and enum
    properties, with ``default``s a client fills in for what an answer leaves out (SEP-1034)."""
    server: str
    expires_at: str | None = None
    """When the gateway answers ``cancel`` for a person who did not (ISO 8601, UTC)."""


ElicitationAction = Literal["accept", "decline", "cancel"]


class ElicitationAnswer(WireModel):
    """``POST /mcp/v1/elicitations/{elicitationId}``: the person's answer, given to the server as its
    ``ElicitResult``. ``content`` only with ``accept``; it is checked against the requested schema once the schema's
    defaults fill what it leaves out (400 ``invalid_input`` otherwise)."""

    action: ElicitationAction
    content: dict[str, Any] | None = None


class AuthorizationRequiredError(WireModel):
    """The error body (HTTP 401, or an SSE ``error`` event) of a ``call-tool`` whose server is behind OAuth and holds
    no usable token for whom the call acts (the tenant's, or ``caller.user``'s on a per-user server): nothing was
    called. ``tokens`` says whose consent it wants: ``machine`` (one token for the tenant, or the deployment: only
    its admin or an operator may give it) or ``perUser`` (the call's end user).

    ``authorizationUrl`` is the gateway's pending consent, unbound to any browser: the gateway's API is behind the
    shared secret and its callers are trusted (an operator's tooling opens it). A front serving end users never
    hands it on (agent-service drops it): a person's consent is asked afresh through ``POST /mcp/v1/oauth/authorize``
    with a ``binding``, and a machine server's only by an admin."""

    code: Literal["authorization_required"] = "authorization_required"
    message: str
    server: str
    tokens: Literal["machine", "perUser"] = "machine"
    authorization_url: str | None = None


class OAuthCallback(WireModel):
    """``POST /mcp/v1/oauth/callback``: what the authorization server's redirect carried (its query), passed on by
    agent-service's ``GET /api/v1/agent/oauth/callback`` (or any front that owns the redirect URI)."""

    state: str = Field(min_length=1, max_length=512)
    code: str | None = Field(default=None, max_length=4096)
    error: str | None = Field(default=None, max_length=256)
    error_description: str | None = Field(default=None, max_length=2000)
    iss: str | None = Field(default=None, max_length=2000)
    binding: str | None = Field(default=None, max_length=128)
    """The hash of the consent-binding cookie the browser brought back (absent: it brought none). A consent asked
    with a ``binding`` completes only with the same one: the browser that asked is the one that consents."""


class OAuthCallbackResult(WireModel):
    """The answer to a completed consent: whose token is now held, for which server. Never the token."""

    server: str
    tenant: str | None = None
    user: str | None = None
    """Set for a per-user server: the end user who consented."""
    scopes: list[str] = Field(default_factory=list)


class OAuthAuthorizeRequest(WireModel):
    """``POST /mcp/v1/oauth/authorize``: a fresh consent for one principal of an OAuth server (``tenant`` absent: a
    server of the deployment's servers file; ``user``: the end user of a per-user server, absent for a machine
    one)."""

    server: str = Field(min_length=1, max_length=200)
    tenant: str | None = Field(default=None, max_length=200)
    user: str | None = Field(default=None, max_length=200)
    binding: str | None = Field(default=None, min_length=16, max_length=128)
    """Binds the consent to the browser that asks: the hash of a random nonce the asking front keeps in that
    browser (agent-service: an HttpOnly cookie of its callback's path). The callback must bring the same hash
    (``OAuthCallback.binding``), else 400 ``oauth_binding_mismatch``. Absent: unbound (an operator's tooling)."""


class OAuthAuthorizeResult(WireModel):
    """Either the URL a person opens to consent, or ``authorized: true`` when a usable token is already held."""

    authorization_url: str | None = None
    authorized: bool = False


class OAuthConnectionView(WireModel):
    """One held OAuth token, never the token: whose (``tenant``/``user`` absent: the deployment's / a machine's),
    which scopes, until when."""

    server: str
    tenant: str | None = None
    user: str | None = None
    scopes: list[str] = Field(default_factory=list)
    expires_at: str | None = None
    """ISO 8601, UTC; absent: the authorization server gave no expiry."""
    updated_at: str


class OAuthConnections(WireModel):
    """``GET /mcp/v1/oauth/connections``."""

    connections: list[OAuthConnectionView]
    available: list[str] | None = None
    """agent-service's ``GET /api/v1/agent/connections`` only: the per-user servers the person may connect and has
    not (the deployment's and their tenant's), so the first consent of a server whose tools nobody listed yet can be
    given (the console's "Connect")."""
