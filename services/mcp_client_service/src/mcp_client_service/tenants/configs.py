"""A tenant's server as the connection config the gateway's connections take: remote only, values as written.

A tenant can never make the gateway run a command: its servers are streamable HTTP or SSE. Its URL and header
values are taken literally: ``${env:...}`` / ``${file:...}`` references would read the gateway's own environment
and files, which only the operator's servers file may (registration refuses them, and tenant connections never
resolve them: ``ConnectionOptions.resolve_references``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import ValidationError

from mcp_client_service.config.references import has_references
from mcp_client_service.config.servers_file import HttpServerConfig
from suite_common.errors import ApiError
from suite_common.wire import TENANT_HEADER, TENANT_NAME_RULE, is_tenant_name

MASK = "***"

__all__ = ["checked_tenant", "header_tenant", "is_per_user", "masked_url", "registration_problem", "server_config"]


def checked_tenant(tenant: str, where: str) -> str:
    """``tenant`` (``X-Tenant-Id``, or the tenant API's path, which ``where`` names) if it is a tenant's name, the
    rule agent-service's callers file holds its tenants to; else 400 ``invalid_tenant``."""
    if not is_tenant_name(tenant):
        raise ApiError(400, "invalid_tenant", f"{where} is not a tenant's name: one is {TENANT_NAME_RULE}.")
    return tenant


def header_tenant(headers: Mapping[str, str]) -> str | None:
    """The tenant a request's ``X-Tenant-Id`` names (checked as ``checked_tenant`` does); ``None`` without one."""
    tenant = headers.get(TENANT_HEADER)
    return None if tenant is None else checked_tenant(tenant, TENANT_HEADER)


def server_config(
    url: str,
    transport: Literal["streamable-http", "sse"],
    headers: Mapping[str, str],
    allowed_tools: Sequence[str] | None,
    auth: Mapping[str, Any] | None = None,
) -> HttpServerConfig:
    """The connection config of a tenant's server (``auth``: its OAuth block as written); ``ValueError`` (saying
    why) for a URL, header or ``auth`` it cannot use."""
    fields: dict[str, Any] = {
        "type": transport,
        "url": url,
        "headers": dict(headers),
        # Its own tool names, matched literally: a glob character in a tool name is not a pattern here.
        "allowedTools": None if allowed_tools is None else [_literal_pattern(name) for name in allowed_tools],
    }
    if auth is not None:
        fields["auth"] = dict(auth)
    try:
        return HttpServerConfig.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, item['loc'])) or 'server'}: {item['msg']}" for item in error.errors())
        raise ValueError(problems) from None


def is_per_user(auth: Mapping[str, Any] | None) -> bool:
    """Whether a server with this ``auth`` block (as stored) holds a token per end user: each user's calls then go
    on a session of their own, and a call naming no user cannot be made."""
    return auth is not None and auth.get("tokens") == "perUser"


def _literal_pattern(name: str) -> str:
    return "".join(f"[{char}]" if char in "*?[]" else char for char in name)


def registration_problem(
    url: str, headers: Mapping[str, str] | None, auth: Mapping[str, Any] | None = None
) -> str | None:
    """Why a tenant may not register a server with this URL, headers and ``auth`` block (before the outbound
    policy), or ``None``."""
    if not url.startswith(("http://", "https://")):
        return "url must be an http:// or https:// URL"
    texts = [("url", url), *((f'header "{name}"', value) for name, value in (headers or {}).items())]
    texts += [(f"auth.{name}", value) for name, value in (auth or {}).items() if isinstance(value, str)]
    for where, text in texts:
        if has_references(text):
            return f"{where} holds a ${{env:...}} or ${{file:...}} reference: a tenant's server takes literal values"
    return None


def masked_url(url: str) -> str:
    """``url`` as answers show it: a password in its userinfo (or a userinfo that is one token, without a
    password) and every query value replaced by ``***``, since tenants put API keys there. The stored URL is
    unchanged; headers are the place for credentials."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL this parser takes (an unclosed IPv6 bracket): show none of it
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if has_password else f"{MASK}@{host}"
    query = "&".join(_masked_pair(pair) for pair in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _masked_pair(pair: str) -> str:
    name, has_value, _ = pair.partition("=")
    # A bare item (``?sk-123``) may be the secret itself: masked whole.
    return f"{name}={MASK}" if has_value else (MASK if pair else pair)
