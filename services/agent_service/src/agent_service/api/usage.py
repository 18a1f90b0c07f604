"""``GET /api/v1/agent/usage``: the caller's tenant's LLM calls over a time range, summed per model, from the run
store's usage log (one row per LLM call, written with the run's step)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agent_service.admission.spend_ledgers import month_start
from agent_service.api.auth import caller_of
from agent_service.api.services import services_of
from agent_service.core.names import USER_ID_RULE, is_user_id
from agent_service.store import ModelUsage
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.http import ModelResponse
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import ModelUsageView, Usage, UsageReport, UsageTotal

__all__ = ["MAX_RANGE", "query_moment", "query_user", "usage_routes"]

MAX_RANGE = timedelta(days=366)
"""The longest range one request may sum: a year, a leap year's included."""


def query_moment(request: Request, name: str) -> datetime | None:
    """The query parameter ``name`` as an aware UTC datetime; a date is its midnight, a time without an offset UTC."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw.strip())
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise ApiError(
            400,
            "invalid_request",
            f"{name} must be an ISO 8601 date or date and time, such as 2026-11-01 or 2026-11-01T08:00:00Z "
            f"(write an offset's + as %2B in a URL); got {clip(raw)!r}.",
        ) from None


def _range(request: Request) -> tuple[datetime, datetime]:
    """``[from, to)``: ``to`` defaults to now, ``from`` to the start of ``to``'s calendar month (UTC)."""
    end = query_moment(request, "to") or datetime.now(UTC)
    start = query_moment(request, "from") or month_start(end)
    if start > end:
        raise ApiError(
            400, "invalid_request", f"from ({start.isoformat()}) is after to ({end.isoformat()}): the range is empty."
        )
    if end - start > MAX_RANGE:
        raise ApiError(
            400,
            "invalid_request",
            f"The range from {start.isoformat()} to {end.isoformat()} is longer than {MAX_RANGE.days} days; "
            "ask for it in parts.",
        )
    return start, end


def query_user(request: Request) -> str | None:
    """``?user=``: an end user's id (``X-User-Id``), or ``None``."""
    user = request.query_params.get("user")
    if user is not None and not is_user_id(user):
        raise ApiError(400, "invalid_request", f"user must be an X-User-Id: {USER_ID_RULE}.")
    return user


def _report(tenant: str, user: str | None, start: datetime, end: datetime, lines: list[ModelUsage]) -> UsageReport:
    total = Usage()
    for line in lines:
        total += line.usage
    return UsageReport(
        tenant=tenant,
        user=user,
        from_=start.isoformat(),
        to=end.isoformat(),
        models=[
            ModelUsageView(
                model=line.model,
                calls=line.calls,
                input_tokens=line.usage.input_tokens,
                output_tokens=line.usage.output_tokens,
                cost_usd=line.usage.cost_usd,
            )
            for line in lines
        ],
        total=UsageTotal(
            calls=sum(line.calls for line in lines),
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            cost_usd=total.cost_usd,
        ),
    )


async def get_usage(request: Request) -> Response:
    runs = services_of(request).runs
    start, end = _range(request)
    user = query_user(request)
    # Any key of the tenant may read the tenant's usage, and any of its users' (as it may read any of its runs).
    tenant = caller_of(request).tenant
    lines = await runs.usage(tenant, start, end, user=user)
    return ModelResponse(_report(tenant, user, start, end, lines))


_GET_USAGE = Operation(
    "The caller's tenant's LLM calls over [from, to), summed per model: calls, tokens, cost (?from=&to= ISO 8601 "
    "dates or times, UTC unless they say otherwise; default: this calendar month so far; ?user= one end user's)",
    answer=UsageReport,
    errors={
        400: "from or to is not an ISO 8601 date or time, from is after to, the range is longer than 366 days, "
        "or user is empty or too long.",
        404: "Runs are not stored (AGENT_DATABASE_URL is empty), so there is no usage log.",
        503: "The run store is unavailable (Retry-After).",
    },
)


def usage_routes() -> list[BaseRoute]:
    return [ApiRoute("/api/v1/agent/usage", get_usage, method="GET", operation=_GET_USAGE)]
