"""The API of calls that wait for a person (``live_calls``), behind the shared secret:

- ``POST /mcp/v1/elicitations/{elicitationId}``: a person's answer to a server's question (``ElicitationAnswer``);
- ``GET /mcp/v1/calls/{callId}/events``: follow again a call made with ``callId`` whose caller went away while it
  waited for an answer (SSE, as ``call-tool``'s).

Both are the tenant's only: ``X-Tenant-Id`` must be the call's (a call made without one is answered and followed
without one); another tenant's question or call is not found.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from mcp_client_service.calls.elicitation import ElicitationAnswered, ElicitationNotFound, InvalidAnswer
from mcp_client_service.calls.live_calls import LiveCalls
from mcp_client_service.tenants.configs import header_tenant
from suite_common.errors import ApiError
from suite_common.http import ModelResponse, read_model
from suite_common.openapi import ApiRoute, Operation
from suite_common.sse import EventStreamResponse
from suite_common.wire import (
    TENANT_NAME_RULE,
    CallToolElicitation,
    CallToolProgress,
    CallToolResponse,
    ElicitationAction,
    ElicitationAnswer,
    ErrorDetail,
)
from suite_common.wire.base import WireModel

__all__ = ["ElicitationAnswerResult", "live_call_routes"]


class ElicitationAnswerResult(WireModel):
    """The answer to ``POST /mcp/v1/elicitations/{elicitationId}``: the server has been given ``action``."""

    elicitation_id: str
    action: ElicitationAction


_INVALID_TENANT = f"invalid_tenant: X-Tenant-Id is not a tenant's name ({TENANT_NAME_RULE})."

_ANSWER = Operation(
    "Answer a server's question asked during a call-tool (its elicitation event)",
    body=ElicitationAnswer,
    answer=ElicitationAnswerResult,
    errors={
        400: "invalid_input: accept content that does not fit the requested schema once its defaults are filled (the "
        f"message names the property), or content without accept; the question still waits. {_INVALID_TENANT}",
        404: "elicitation_not_found: no question of this id waits (or it is another tenant's).",
        409: "elicitation_answered: the question was answered already, or its time ran out (it was answered cancel).",
    },
    example={"action": "accept", "content": {"name": "octocat"}},
)
_FOLLOW = Operation(
    "Follow again a call-tool made with callId that waits for an answer or has a result to give (SSE)",
    events=CallToolElicitation | CallToolProgress | CallToolResponse | ErrorDetail,
    media_type="text/event-stream",
    errors={
        400: _INVALID_TENANT,
        404: "call_not_found: no call of this callId is running or waiting with its result (its result was taken "
        "already, kept past MCP_CLIENT_DETACHED_RESULT_SECONDS, or the gateway restarted), or it is another "
        "tenant's.",
    },
)


def live_call_routes(prefix: str, live_calls: LiveCalls) -> list[BaseRoute]:
    async def answer_elicitation(request: Request) -> Response:
        tenant = header_tenant(request.headers)
        elicitation_id = request.path_params["elicitation_id"]
        body = await read_model(request, ElicitationAnswer)
        try:
            result = live_calls.broker.answer(elicitation_id, tenant, body)
        except ElicitationNotFound:
            raise ApiError(404, "elicitation_not_found", "No question of this id waits for an answer.") from None
        except ElicitationAnswered:
            raise ApiError(
                409, "elicitation_answered", "The question was answered already, or its time ran out (cancel)."
            ) from None
        except InvalidAnswer as invalid:
            raise ApiError(400, "invalid_input", f"The answer does not fit the requested schema: {invalid}") from None
        return ModelResponse(ElicitationAnswerResult(elicitation_id=elicitation_id, action=result.action))

    async def follow_call(request: Request) -> Response | EventStreamResponse:
        tenant = header_tenant(request.headers)
        call = live_calls.follow(tenant, request.path_params["call_id"])
        if call is None:
            raise ApiError(404, "call_not_found", "No call of this callId is running or has a result to give.")
        return EventStreamResponse(call.attach().relay)

    return [
        ApiRoute(f"{prefix}/elicitations/{{elicitation_id}}", answer_elicitation, method="POST", operation=_ANSWER),
        ApiRoute(f"{prefix}/calls/{{call_id:path}}/events", follow_call, method="GET", operation=_FOLLOW),
    ]
