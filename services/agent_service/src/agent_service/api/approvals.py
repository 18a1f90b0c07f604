"""``POST /api/v1/agent/runs/{runId}/approvals``: decisions on the tool calls a waiting run holds for a person.

The run waits in the store (``agent_service.runs.waiting``): any replica takes the decision, and the one that leaves
nothing of the round undecided resumes the run itself.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agent_service.api.auth import caller_of
from agent_service.api.runs import approval_view, path_id, stored_run
from agent_service.api.services import services_of
from suite_common.http import ModelResponse, read_model
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import ApprovalsRequest, ApprovalsResponse

__all__ = ["approvals_routes"]


async def decide(request: Request) -> Response:
    runs = services_of(request).runs
    run_id = path_id(request, "runId")
    body = await read_model(request, ApprovalsRequest)
    caller = caller_of(request)
    await stored_run(request, runs, run_id)  # the caller's tenant's, or 404 as an unknown run
    decided = await runs.decide(run_id, body.decisions, decided_by=caller.decider)
    # The round's calls: those of the round the run waited in.
    waited = max((approval.iteration for approval in decided.approvals), default=0)
    return ModelResponse(
        ApprovalsResponse(
            run_id=run_id,
            status=decided.record.status,
            approvals=[approval_view(approval) for approval in decided.approvals if approval.iteration == waited],
        )
    )


_DECIDE = Operation(
    "Approve or deny tool calls a waiting run holds (approval_required); the run resumes once none of its round "
    "waits any more",
    body=ApprovalsRequest,
    answer=ApprovalsResponse,
    errors={
        400: "The body is not valid JSON, or not a valid request (a toolCallId decided twice in it).",
        404: "No such run of the caller's tenant is stored, or runs are not stored.",
        409: "A toolCallId does not wait for a decision: decided already, unknown, or the run is not waiting "
        "(approval_not_pending); no decision of the request is kept.",
        503: "The run store is unavailable (Retry-After).",
    },
    example={"decisions": [{"toolCallId": "call_1", "approve": True}]},
)


def approvals_routes() -> list[BaseRoute]:
    return [ApiRoute("/api/v1/agent/runs/{runId}/approvals", decide, method="POST", operation=_DECIDE)]
