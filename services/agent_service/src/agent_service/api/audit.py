"""``GET /api/v1/agent/audit``: the caller's tenant's tool calls, one audit row each (written with the run's step
that stored the call's result), newest first, a page at a time."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import get_args

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agent_service.api.auth import caller_of
from agent_service.api.runs import query_limit
from agent_service.api.services import services_of
from agent_service.api.usage import query_moment, query_user
from agent_service.store import AuditCursor, AuditedCall, AuditFilter
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.http import ModelResponse
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import AuditedToolCall, AuditPage, ToolCallStatus

__all__ = ["audit_routes", "decode_cursor", "encode_cursor"]

_DEFAULT_PAGE = 50
_MAX_PAGE = 500
_MAX_TOOL_CHARS = 128
"""MCP's bound on a tool's name; a longer one names no tool."""
_STATUSES: tuple[ToolCallStatus, ...] = get_args(ToolCallStatus)


def encode_cursor(cursor: AuditCursor) -> str:
    """Opaque to clients: the last row's time and number, base64url."""
    moment, row_id = cursor
    return base64.urlsafe_b64encode(f"{moment.isoformat()}|{row_id}".encode()).decode().rstrip("=")


def decode_cursor(text: str) -> AuditCursor:
    """``encode_cursor`` undone; ``ValueError`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError("not base64url") from None
    moment, separator, row_id = raw.partition("|")
    if not separator or not row_id.isdecimal() or len(row_id) > 19:
        raise ValueError("not a cursor")
    at = datetime.fromisoformat(moment)
    if at.tzinfo is None:
        raise ValueError("a cursor's time has its offset")
    return at, int(row_id)


def _filter(request: Request) -> AuditFilter:
    start, end = query_moment(request, "from"), query_moment(request, "to")
    if start is not None and end is not None and start > end:
        raise ApiError(
            400, "invalid_request", f"from ({start.isoformat()}) is after to ({end.isoformat()}): the range is empty."
        )
    tool = request.query_params.get("tool")
    if tool is not None and not (1 <= len(tool) <= _MAX_TOOL_CHARS and tool.isprintable()):
        raise ApiError(
            400, "invalid_request", f"tool must be a tool's name, 1 to {_MAX_TOOL_CHARS} printable characters."
        )
    status = request.query_params.get("status")
    if status is not None and status not in _STATUSES:
        raise ApiError(400, "invalid_request", f"status must be one of {', '.join(_STATUSES)} (got {clip(status)!r}).")
    return AuditFilter(
        start=start,
        end=end,
        tool=tool,
        status=next((known for known in _STATUSES if known == status), None),
        user=query_user(request),
    )


def _cursor(request: Request) -> AuditCursor | None:
    raw = request.query_params.get("cursor")
    if raw is None:
        return None
    try:
        return decode_cursor(raw.strip())
    except (ValueError, OverflowError):
        raise ApiError(
            400, "invalid_request", f"cursor must be the nextCursor of a page of this list (got {clip(raw)!r})."
        ) from None


def _view(call: AuditedCall) -> AuditedToolCall:
    return AuditedToolCall(
        run_id=call.run_id,
        iteration=call.iteration,
        call_index=call.call_index,
        attempt=call.attempt,
        tool_call_id=call.tool_call_id,
        tool=call.tool,
        server=call.server,
        status=call.status,
        latency_ms=call.latency_ms,
        user=call.user,
        at=call.created_at.isoformat(),
    )


async def get_audit(request: Request) -> Response:
    runs = services_of(request).runs
    where = _filter(request)
    limit = query_limit(request, _DEFAULT_PAGE, _MAX_PAGE)
    after = _cursor(request)
    # Any key of the tenant may read its tenant's audit (as it may read any of its runs); never another tenant's.
    tenant = caller_of(request).tenant
    calls, following = await runs.audit(tenant, where, limit=limit, after=after)
    page = AuditPage(
        tenant=tenant,
        calls=[_view(call) for call in calls],
        next_cursor=encode_cursor(following) if following is not None else None,
    )
    return ModelResponse(page)


_GET_AUDIT = Operation(
    "The caller's tenant's tool calls, one row each (run, round, call index, server, tool, status, latency), newest "
    "first, a page at a time (?limit=1..500, 50 by default; the next page with ?cursor=<the page's nextCursor> and "
    "the same filters). Filters: ?from=&to= (ISO 8601 dates or times, [from, to), UTC unless they say otherwise), "
    "?tool= (a tool's name), ?status= (ok, error, refused, cancelled, cached), ?user= (an end user's id)",
    answer=AuditPage,
    errors={
        400: "from or to is not an ISO 8601 date or time, or from is after to; tool, status or user is not one; "
        "limit is not a whole number from 1 to 500; or cursor is not a page's nextCursor.",
        404: "Runs are not stored (AGENT_DATABASE_URL is empty), so there is no audit log.",
        503: "The run store is unavailable (Retry-After).",
    },
)


def audit_routes() -> list[BaseRoute]:
    return [ApiRoute("/api/v1/agent/audit", get_audit, method="GET", operation=_GET_AUDIT)]
