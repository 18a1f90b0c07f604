"""The stored runs' API: read a run, follow or re-attach to its events, cancel it, read a conversation."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agent_service.api.auth import caller_of
from agent_service.api.services import services_of
from agent_service.runs import AgentRuns, StoredEventSink
from agent_service.store import ApprovalRecord, ConversationSummary, InputRecord, RunRecord, StoredEvent
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.http import ModelResponse
from suite_common.openapi import ApiRoute, Operation
from suite_common.sse import Emit, EventStreamResponse, encode_event
from suite_common.wire import (
    ApprovalView,
    ConversationList,
    ConversationSummaryView,
    ConversationView,
    InputView,
    Message,
    RunErrorDetail,
    RunEvent,
    RunView,
)

__all__ = [
    "MAX_EVENT_ID",
    "approval_view",
    "event_sender",
    "input_view",
    "path_id",
    "query_limit",
    "run_view",
    "runs_routes",
    "stored_run",
]

_MAX_ID_CHARS = 128
_DEFAULT_CONVERSATIONS = 50
_MAX_CONVERSATIONS = 200
_DEFAULT_PAGE_MESSAGES = 200
_MAX_PAGE_MESSAGES = 1000
PAGE_BYTES = 1024 * 1024
"""A page of a conversation stops taking messages once they hold this many bytes (it has one at least): a huge
conversation is never answered whole."""
_TITLE_CHARS = 80

MAX_EVENT_ID = 2**31 - 1
"""The largest event id (sequence number) a run can have: the store keeps them as SQL INTEGERs (32 bits)."""
_WHOLE_NUMBER = re.compile(r"[0-9]{1,20}")


def event_sender(send: Emit) -> StoredEventSink:
    """Where a followed run's events go: the SSE stream, each as stored (its sequence number as the event id)."""

    async def send_event(event: StoredEvent) -> None:
        await send(encode_event(event.data, event=event.type, id=event.seq))

    return send_event


def _runs(request: Request) -> AgentRuns:
    return services_of(request).runs


def approval_view(approval: ApprovalRecord) -> ApprovalView:
    return ApprovalView(
        tool_call_id=approval.tool_call_id,
        iteration=approval.iteration,
        name=approval.tool,
        server=approval.server,
        arguments=approval.arguments,
        status=approval.status,
        message=approval.message,
        decided_by=approval.decided_by,
        requested_at=approval.requested_at.isoformat(),
        decided_at=approval.decided_at.isoformat() if approval.decided_at is not None else None,
        expires_at=approval.expires_at.isoformat(),
    )


def input_view(question: InputRecord) -> InputView:
    """A question of a tool's server and how it was answered; never the answer's content (it may be a person's
    private data, and it was the server's to read)."""
    return InputView(
        input_id=question.input_id,
        tool_call_id=question.tool_call_id,
        iteration=question.iteration,
        name=question.name,
        server=question.server,
        message=question.message,
        requested_schema=question.requested_schema,
        status=question.status,
        decided_by=question.decided_by,
        requested_at=question.requested_at.isoformat(),
        decided_at=question.decided_at.isoformat() if question.decided_at is not None else None,
        expires_at=question.expires_at.isoformat(),
    )


def run_view(
    record: RunRecord,
    messages: list[Message] | None = None,
    approvals: list[ApprovalRecord] | None = None,
    inputs: list[InputRecord] | None = None,
) -> RunView:
    return RunView(
        run_id=record.run_id,
        conversation_id=record.conversation_id,
        model=record.model,
        status=record.status,
        finish_reason=record.finish_reason,
        budget=record.budget,
        user=record.user,
        iterations=record.iterations,
        usage=record.usage,
        error=RunErrorDetail(code=record.error.code, message=record.error.message) if record.error else None,
        messages=messages or [],
        created_at=record.created_at.isoformat(),
        updated_at=record.updated_at.isoformat(),
        resumes=record.resumes,
        cancel_requested=record.cancel_requested,
        output=record.output,
        approvals=[approval_view(approval) for approval in approvals] if approvals else None,
        inputs=[input_view(question) for question in inputs] if inputs else None,
    )


def path_id(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    if len(value) > _MAX_ID_CHARS:
        raise ApiError(404, "not_found", f"No such {name}: {clip(value)}.")
    return value


async def stored_run(request: Request, runs: AgentRuns, run_id: str) -> RunRecord:
    """The caller's tenant's run; another tenant's is answered exactly as an unknown one."""
    record = await runs.get(run_id, tenant=caller_of(request).tenant)
    if record is None:
        raise ApiError(404, "run_not_found", f"No run {clip(run_id)} is stored.")
    return record


async def get_run(request: Request) -> Response:
    runs = _runs(request)
    record = await stored_run(request, runs, path_id(request, "runId"))
    messages = await runs.messages(record.run_id)
    approvals, inputs = await runs.approvals(record.run_id), await runs.inputs(record.run_id)
    return ModelResponse(run_view(record, messages, approvals, inputs))


def _after(request: Request) -> int:
    """Where a re-attaching client resumes: ``Last-Event-ID`` (what an ``EventSource`` sends), else ``?after=``;
    a whole number up to ``MAX_EVENT_ID`` (a larger one is no event id of ours, and the store cannot compare it)."""
    raw = request.headers.get("last-event-id")
    source = "The Last-Event-ID header"
    if raw is None:
        raw, source = request.query_params.get("after", "0"), "after"
    digits = raw.strip()
    if not _WHOLE_NUMBER.fullmatch(digits) or int(digits) > MAX_EVENT_ID:
        raise ApiError(
            400, "invalid_request", f"{source} must be a whole number from 0 to {MAX_EVENT_ID} (got {clip(raw)!r})."
        )
    return int(digits)


async def get_events(request: Request) -> EventStreamResponse:
    runs = _runs(request)
    run_id = path_id(request, "runId")
    after = _after(request)
    await stored_run(request, runs, run_id)

    async def stream(send: Emit) -> None:
        await runs.follow(run_id, after, event_sender(send))

    return EventStreamResponse(stream, headers={"X-Agent-Run-Id": run_id})


async def cancel_run(request: Request) -> Response:
    runs = _runs(request)
    run_id = path_id(request, "runId")
    record = await runs.cancel(run_id, tenant=caller_of(request).tenant)
    if record is None:
        raise ApiError(404, "run_not_found", f"No run {clip(run_id)} is stored.")
    return ModelResponse(run_view(record))


def _cursor(request: Request) -> tuple[str, int] | None:
    """``?before=``: a page's ``earlier``, ``<runId>:<position>`` (the run and position of its first message)."""
    raw = request.query_params.get("before")
    if raw is None:
        return None
    run_id, _, position = raw.rpartition(":")
    if not run_id or len(run_id) > _MAX_ID_CHARS or not _WHOLE_NUMBER.fullmatch(position) or len(position) > 9:
        raise ApiError(400, "invalid_request", f"before must be the earlier of a page (got {clip(raw)!r}).")
    return run_id, int(position)


async def get_conversation(request: Request) -> Response:
    runs = _runs(request)
    conversation_id = path_id(request, "conversationId")
    limit = query_limit(request, _DEFAULT_PAGE_MESSAGES, _MAX_PAGE_MESSAGES)
    before = _cursor(request)
    conversation = await runs.conversation(
        conversation_id, tenant=caller_of(request).tenant, limit=limit, max_bytes=PAGE_BYTES, before=before
    )
    if conversation is None:
        raise ApiError(404, "conversation_not_found", f"No conversation {clip(conversation_id)} is stored.")
    earlier = conversation.earlier
    return ModelResponse(
        ConversationView(
            conversation_id=conversation.conversation_id,
            created_at=conversation.created_at.isoformat(),
            updated_at=conversation.updated_at.isoformat(),
            messages=conversation.messages,
            runs=[run_view(record) for record in conversation.runs],
            earlier=f"{earlier[0]}:{earlier[1]}" if earlier is not None else None,
            settings=conversation.settings,
        )
    )


def query_limit(request: Request, default: int, maximum: int) -> int:
    """``?limit=``: a whole number from 1 to ``maximum`` (``default`` when absent)."""
    raw = request.query_params.get("limit", str(default))
    try:
        limit = int(raw.strip())
    except ValueError:
        limit = 0
    if not 1 <= limit <= maximum:
        raise ApiError(400, "invalid_request", f"limit must be a whole number from 1 to {maximum} (got {clip(raw)!r}).")
    return limit


def _title(text: str | None) -> str:
    """The first user message on one line (a title, not the message), clipped."""
    return clip(" ".join((text or "").split()), _TITLE_CHARS)


def _summary_view(summary: ConversationSummary) -> ConversationSummaryView:
    return ConversationSummaryView(
        conversation_id=summary.conversation_id,
        title=_title(summary.first_user_text),
        created_at=summary.created_at.isoformat(),
        updated_at=summary.updated_at.isoformat(),
        runs=summary.runs,
        status=summary.latest_status,
        settings=summary.settings,
    )


async def list_conversations(request: Request) -> Response:
    runs = _runs(request)
    limit = query_limit(request, _DEFAULT_CONVERSATIONS, _MAX_CONVERSATIONS)
    listed = await runs.conversations(limit, tenant=caller_of(request).tenant)
    return ModelResponse(ConversationList(conversations=[_summary_view(summary) for summary in listed]))


_NOT_STORED = "Runs are not stored (AGENT_DATABASE_URL is empty), or no such run is stored."
_GET_RUN = Operation(
    "A stored run: status (waiting: tool calls wait for approval, or tool servers' questions for answers), finish "
    "reason, iterations, usage, its messages, its calls that needed approval, its questions, the error if any",
    answer=RunView,
    errors={404: _NOT_STORED, 503: "The run store is unavailable (Retry-After)."},
)
_GET_EVENTS = Operation(
    "The run's events: those after Last-Event-ID (or ?after=N) first, then live ones until the run ends",
    events=RunEvent,
    errors={400: "Last-Event-ID or after is not a whole number from 0 to 2147483647.", 404: _NOT_STORED},
)
_CANCEL = Operation(
    "Cancel a run wherever it executes; answers the run as it is then (status: ended yet or still stopping)",
    answer=RunView,
    errors={404: _NOT_STORED},
)
_GET_CONVERSATION = Operation(
    "A stored conversation, a page at a time: its newest messages (?limit=1..1000, 200 by default, at most 1 MiB of "
    "them; earlier ones with ?before=<the page's earlier>), run after run, and their runs",
    answer=ConversationView,
    errors={
        400: "limit is not a whole number from 1 to 1000, or before is not the earlier of a page of it.",
        404: "No such conversation is stored, or runs are not stored.",
        503: "The run store is unavailable (Retry-After).",
    },
)

_LIST_CONVERSATIONS = Operation(
    "The stored conversations updated last, newest first (?limit=1..200, 50 by default): title, run count, status",
    answer=ConversationList,
    errors={
        400: "limit is not a whole number from 1 to 200.",
        404: "Runs are not stored (AGENT_DATABASE_URL is empty).",
        503: "The run store is unavailable (Retry-After).",
    },
)


def runs_routes() -> list[BaseRoute]:
    return [
        ApiRoute("/api/v1/agent/runs/{runId}", get_run, method="GET", operation=_GET_RUN),
        ApiRoute("/api/v1/agent/runs/{runId}/events", get_events, method="GET", operation=_GET_EVENTS),
        ApiRoute("/api/v1/agent/runs/{runId}/cancel", cancel_run, method="POST", operation=_CANCEL),
        ApiRoute("/api/v1/agent/conversations", list_conversations, method="GET", operation=_LIST_CONVERSATIONS),
        ApiRoute(
            "/api/v1/agent/conversations/{conversationId}",
            get_conversation,
            method="GET",
            operation=_GET_CONVERSATION,
        ),
    ]
