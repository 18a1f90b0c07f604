"""``POST /api/v1/agent/runs/{runId}/inputs``: a person's answers to the questions tool servers asked during a run
(``input_required``: MCP elicitation, relayed by the gateway).

The run waits in the store (``agent_service.runs.waiting``), as for approvals: any replica takes the answer, and the
one that leaves nothing of the round pending resumes the run itself, forwarding each answer to the gateway where
its call waited.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agent_service.api.auth import caller_of
from agent_service.api.runs import input_view, path_id, stored_run
from agent_service.api.services import services_of
from suite_common.http import ModelResponse, read_model
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import InputsRequest, InputsResponse

__all__ = ["inputs_routes"]


async def answer(request: Request) -> Response:
    runs = services_of(request).runs
    run_id = path_id(request, "runId")
    body = await read_model(request, InputsRequest)
    caller = caller_of(request)
    await stored_run(request, runs, run_id)  # the caller's tenant's, or 404 as an unknown run
    answered = await runs.answer(run_id, body.inputs, decided_by=caller.decider)
    # The round's questions: those of the round the run waited in.
    waited = max((question.iteration for question in answered.inputs), default=0)
    return ModelResponse(
        InputsResponse(
            run_id=run_id,
            status=answered.record.status,
            inputs=[input_view(question) for question in answered.inputs if question.iteration == waited],
        )
    )


_ANSWER = Operation(
    "Answer the questions tool servers asked a waiting run (input_required): accept with content valid against the "
    "question's requestedSchema, decline, or cancel; the run resumes once nothing of its round waits any more",
    body=InputsRequest,
    answer=InputsResponse,
    errors={
        400: "The body is not valid JSON, or not a valid request (an inputId answered twice in it); or an accepted "
        "content does not fit the question's requestedSchema once its defaults are filled (invalid_input). No answer "
        "of the request is kept.",
        404: "No such run of the caller's tenant is stored, or runs are not stored.",
        409: "An inputId does not wait for an answer: answered already, unknown, or the run is not waiting "
        "(input_not_pending); no answer of the request is kept.",
        503: "The run store is unavailable (Retry-After).",
    },
    example={"inputs": [{"inputId": "el_1", "action": "accept", "content": {"partySize": 4}}]},
)


def inputs_routes() -> list[BaseRoute]:
    return [ApiRoute("/api/v1/agent/runs/{runId}/inputs", answer, method="POST", operation=_ANSWER)]
