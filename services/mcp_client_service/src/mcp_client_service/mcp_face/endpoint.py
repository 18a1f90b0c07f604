"""The gateway as an MCP server: every tool of every server through one streamable HTTP endpoint.

Mounted at ``/mcp`` next to the REST API. ``tools/list`` is the aggregated catalog under the
names ``list-tools`` gives (each tool with its output schema and annotations); ``tools/call``
goes through ``ToolRouter.call``, the path of ``call-tool``, so arguments are validated, calls
time out (a request's ``X-Deadline-Ms`` header shortens the limit) and fail into error results
the same way. A name no server offers is the JSON-RPC error -32602, as the spec asks for an
unknown tool (the REST API's 404).

A ``tools/call`` that carries a ``progressToken`` gets the upstream server's progress
notifications for the call, under the client's token (``progress.ProgressRelay``: none after the
result). Resources and prompts of every server are served as well (``features``: by URI and by
name, in config order); ``initialize`` declares ``resources`` and ``prompts`` only while a serving
server has them.

It is stateless: every request stands alone, so any replica can answer and no session has to
be kept or expired; a client learns of a changed catalog by listing again. It requires the
service's shared secret, as ``Authorization: Bearer <secret>`` (what MCP clients are configured
with) or in the secret header. The host app's lifespan must run ``McpFace.run()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    ResourcesCapability,
    ServerCapabilities,
)
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from mcp_client_service.calls.call import RoutedTool
from mcp_client_service.calls.progress import ProgressRelay
from mcp_client_service.calls.router import ToolNotFoundError, ToolRouter
from mcp_client_service.failures import OutboundBlockedError
from mcp_client_service.mcp_face.features import FeatureRouter
from mcp_client_service.oauth import AuthorizationRequired
from suite_common.auth import secrets_match
from suite_common.deadline import Deadline
from suite_common.errors import ApiError, error_response
from suite_common.wire import CallToolResponse

__all__ = ["MCP_FACE_PATH", "McpFace", "to_call_tool_result", "transport_security"]

MCP_FACE_PATH = "/mcp"

_INSTRUCTIONS = (
    "A gateway to the tools of several MCP servers. Tool errors come back as results with isError, "
    "saying what went wrong (invalid arguments name the field), so that they can be corrected."
)


def transport_security(allowed_hosts: Sequence[str]) -> TransportSecuritySettings:
    """Host (and browser Origin) checks against DNS rebinding when ``allowed_hosts`` is given.

    Without it no Host is checked: the endpoint requires the shared secret, which a page a
    browser was lured to cannot send. ``host:*`` allows any port.
    """
    if not allowed_hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = [f"{scheme}://{host}" for host in allowed_hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=list(allowed_hosts), allowed_origins=origins
    )


def to_call_tool_result(response: CallToolResponse, tool: RoutedTool | None) -> CallToolResult:
    """The ``call-tool`` answer as an MCP result; which server answered, and how fast, go in ``_meta``."""
    structured: Any = response.structured_content
    schema = tool.output_schema if tool is not None else None
    if (
        structured is not None
        and schema is not None
        and schema.get("type", "object") != "object"
        and structured.keys() == {"result"}
    ):
        structured = structured["result"]  # the REST answer wraps a non-object value; MCP carries it as it is
    return CallToolResult.model_validate(
        {
            "content": response.content,
            "structuredContent": structured,
            "isError": response.is_error,
            "_meta": {"loopsuite/server": response.server, "loopsuite/durationMs": response.duration_ms},
        }
    )


def _caller_deadline(ctx: ServerRequestContext[Any]) -> Deadline:
    headers: Mapping[str, str] = getattr(ctx.request, "headers", None) or {}
    try:
        return Deadline.from_header(headers, cap=math.inf)
    except ApiError as error:
        raise MCPError(INVALID_REQUEST, error.message) from None


class _GatewayServer(Server[Any]):
    """The SDK's server, declaring resources and prompts only while an upstream server has them."""

    def __init__(self, features: FeatureRouter | None, **kwargs: Any) -> None:
        super().__init__("mcp-client-service", **kwargs)
        self._features = features

    def get_capabilities(self, *args: Any, **kwargs: Any) -> ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        features = self._features
        if features is None:
            return capabilities
        absent = {feature: None for feature in ("resources", "prompts") if not features.offers(feature)}
        if isinstance(capabilities.resources, ResourcesCapability):
            # Clients cannot subscribe through the gateway: it relays no resource updates.
            capabilities.resources.subscribe = False
        return capabilities.model_copy(update=absent) if absent else capabilities


class McpFace:
    """An ASGI app serving the router's catalog as an MCP server (stateless streamable HTTP).

    With ``features`` it serves the servers' resources and prompts too.
    """

    def __init__(
        self,
        router: ToolRouter,
        *,
        secret: str,
        secret_header: str,
        allowed_hosts: Sequence[str] = (),
        features: FeatureRouter | None = None,
    ) -> None:
        if not secret:
            raise ValueError("a shared secret is required")
        self._router = router
        self._features = features
        self._secret = secret
        self._secret_header = secret_header
        handlers: dict[str, Any] = {}
        if features is not None:
            handlers = {
                "on_list_resources": self._list_resources,
                "on_list_resource_templates": self._list_resource_templates,
                "on_read_resource": self._read_resource,
                "on_list_prompts": self._list_prompts,
                "on_get_prompt": self._get_prompt,
            }
        self.server: Server[Any] = _GatewayServer(
            features,
            version="0.1.0",
            instructions=_INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=self._input_schema,
            **handlers,
        )
        self.session_manager = StreamableHTTPSessionManager(
            app=self.server, stateless=True, security_settings=transport_security(allowed_hosts)
        )
        self._transport = StreamableHTTPASGIApp(self.session_manager)

    def run(self) -> AbstractAsyncContextManager[None]:
        """The session manager's task group; enter it in the host app's lifespan."""
        return self.session_manager.run()

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        tool = self._router.find(name)
        return tool.input_schema if tool is not None else None

    async def _list_tools(self, _: ServerRequestContext[Any], __: PaginatedRequestParams | None) -> ListToolsResult:
        # One page: the catalog is in memory, and a cursor over a catalog that changes would skip tools.
        return ListToolsResult(tools=self._router.tools())

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        deadline = _caller_deadline(ctx)
        # Progress is asked of the upstream server only for a client that asked for it.
        relay = (
            ProgressRelay(ctx.session.report_progress) if progress_token_from_params(ctx.params) is not None else None
        )
        try:
            response = await self._router.call(
                params.name, dict(params.arguments or {}), deadline=deadline, on_progress=relay
            )
        except ToolNotFoundError as error:
            raise MCPError(INVALID_PARAMS, f"{error} tools/list lists them.") from None
        except OutboundBlockedError as blocked:
            # Not a tool result a model reads: a refusal of the request, as the REST API's 403.
            raise MCPError(INVALID_REQUEST, f"outbound_ssrf_blocked: {blocked.message}") from None
        except AuthorizationRequired as required:
            # As the REST API's 401: nothing was called; a person opens the URL to consent, then calls again.
            message = f'authorization_required: the MCP server "{required.server}" needs a consent first: open '
            raise MCPError(INVALID_REQUEST, message + required.authorization_url) from None
        except ApiError as refused:
            # A per-user server's tool called with no end user (user_required): a refusal, as the REST API's 403.
            raise MCPError(INVALID_REQUEST, f"{refused.code}: {refused.message}") from None
        finally:
            if relay is not None:
                await relay.close()
        return to_call_tool_result(response, self._router.find(params.name))

    def _feature_router(self) -> FeatureRouter:
        assert self._features is not None, "resources and prompts are served only with a FeatureRouter"
        return self._features

    async def _list_resources(
        self, _: ServerRequestContext[Any], __: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        return ListResourcesResult(resources=await self._feature_router().list_resources())

    async def _list_resource_templates(
        self, _: ServerRequestContext[Any], __: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=await self._feature_router().list_resource_templates())

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        return await self._feature_router().read_resource(str(params.uri), deadline=_caller_deadline(ctx))

    async def _list_prompts(self, _: ServerRequestContext[Any], __: PaginatedRequestParams | None) -> ListPromptsResult:
        return ListPromptsResult(prompts=await self._feature_router().list_prompts())

    async def _get_prompt(self, ctx: ServerRequestContext[Any], params: GetPromptRequestParams) -> GetPromptResult:
        return await self._feature_router().get_prompt(params.name, params.arguments, deadline=_caller_deadline(ctx))

    def _authorized(self, scope: Scope) -> bool:
        headers = Headers(scope=scope)
        authorization = headers.get("authorization", "")
        scheme, _, token = authorization.partition(" ")
        bearer = token.strip() if scheme.lower() == "bearer" else None
        # Both checked, in constant time each, so timing does not tell which one was tried.
        in_header = secrets_match(headers.get(self._secret_header), self._secret)
        as_bearer = secrets_match(bearer, self._secret)
        return in_header or as_bearer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            response = error_response(
                401,
                "unauthorized",
                "Missing or wrong shared secret: send it as Authorization: Bearer <secret> "
                f"or in the {self._secret_header} header.",
                headers={"WWW-Authenticate": 'Bearer realm="mcp-client-service"'},
            )
            await response(scope, receive, send)
            return
        await self._transport(scope, receive, send)
