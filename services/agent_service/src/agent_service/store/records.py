"""What the run store keeps, as plain values: the store's API speaks these, never table rows."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent_service.core.run import LlmCall, ToolCallRecord
from suite_common.sql import StoreError
from suite_common.wire import (
    ApprovalStatus,
    BudgetName,
    ConversationSettings,
    InputStatus,
    Message,
    RunErrorDetail,
    RunFinishReason,
    RunStatus,
    ToolCallStatus,
    Usage,
    UserRole,
)

__all__ = [
    "ACTIVE_STATUSES",
    "UNFINISHED_STATUSES",
    "ApprovalNotPending",
    "ApprovalRecord",
    "AuditCursor",
    "AuditFilter",
    "AuditedCall",
    "ConversationBusy",
    "ConversationFull",
    "ConversationLimits",
    "ConversationRecord",
    "ConversationSummary",
    "ConversationTooLarge",
    "InputNotPending",
    "InputRecord",
    "LeaseLost",
    "ModelUsage",
    "NewApproval",
    "NewRun",
    "RunRecord",
    "RunStatus",
    "Step",
    "StoreError",
    "StoredEvent",
    "UnknownCursor",
]

ACTIVE_STATUSES: tuple[RunStatus, ...] = ("processing", "tool_loop")
"""A replica executes the run (it holds its lease, and renews it)."""
UNFINISHED_STATUSES: tuple[RunStatus, ...] = (*ACTIVE_STATUSES, "waiting")
"""Not ended: executing, or waiting in the store for approvals (its conversation is busy all the same)."""


class LeaseLost(StoreError):
    """Another replica owns the run now (this one's lease expired): stop working on it, write nothing more."""


class ConversationBusy(StoreError):
    """A run of the conversation is still active; a conversation takes one run at a time."""

    def __init__(self, conversation_id: str, run_id: str) -> None:
        super().__init__(f"Conversation {conversation_id} has a run in progress ({run_id}).")
        self.conversation_id = conversation_id
        self.run_id = run_id


class ConversationTooLarge(StoreError):
    """The conversation's messages and the new run's input together are larger than its limit: nothing is stored."""

    def __init__(self, conversation_id: str, *, stored: int, adding: int, limit: int) -> None:
        super().__init__(
            f"Conversation {conversation_id} holds {stored} bytes of messages; with this run's {adding} it would "
            f"hold more than {limit}."
        )
        self.conversation_id = conversation_id
        self.stored, self.adding, self.limit = stored, adding, limit


class ConversationFull(StoreError):
    """The conversation has as many runs as it may have: nothing is stored."""

    def __init__(self, conversation_id: str, *, runs: int, limit: int) -> None:
        super().__init__(f"Conversation {conversation_id} has {runs} runs, its limit is {limit}.")
        self.conversation_id = conversation_id
        self.runs, self.limit = runs, limit


class UnknownCursor(ValueError):
    """A page cursor (``before``) that names no message of the conversation."""


@dataclass(frozen=True, slots=True)
class ConversationLimits:
    """What one conversation may hold, checked when a run of it is created (before anything of it is stored)."""

    max_bytes: int
    """Its messages' stored JSON, in bytes, with the new run's input (the run's own output may go past it: the next
    run is then refused)."""
    max_runs: int
    """Its runs, every run started in it counted (one the model never answered too: its input is stored)."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One SSE event of a run: ``data`` is the JSON text sent to the client, byte for byte."""

    seq: int
    type: str
    data: str


@dataclass(frozen=True, slots=True)
class NewRun:
    run_id: str
    model: str
    plan: dict[str, Any]
    """What a replica needs to resume the run: the loop's settings and tools (see ``agent_service.runs``)."""
    input_messages: list[Message]
    """The request's messages; stored at positions 0..n-1 of the run."""
    conversation_id: str | None = None
    caller: str | None = None
    tenant: str | None = None
    user: str | None = None
    """The end user a trusted caller named (``X-User-Id``); a new conversation is that user's too."""
    user_role: UserRole | None = None
    """That user's role (``X-User-Role``), which chooses the user's monthly budget when the run is taken over."""
    settings: ConversationSettings | None = None
    """What the run asked for: becomes its conversation's settings (its ``system_prompt`` only while the
    conversation has none). ``None``: the conversation's stay as they are."""


@dataclass(slots=True)
class Step:
    """What one step of a run changes, written in one transaction: messages, events, the run's counters."""

    messages: list[tuple[int, Message]] = field(default_factory=list)
    """``(position, message)``: the position within the run (the input messages are 0..n-1). Writing a
    position again replaces its message (a resumed run rewrites what it finishes)."""
    events: list[StoredEvent] = field(default_factory=list)
    status: RunStatus | None = None
    """``None`` leaves the status as it is."""
    iterations: int | None = None
    usage: Usage | None = None
    """The run's so far (its cost too: ``None`` leaves the stored cost as it is)."""
    finish_reason: RunFinishReason | None = None
    error: RunErrorDetail | None = None
    budget: BudgetName | None = None
    """Which budget ended the run."""
    output: Any | None = None
    """With ``responseFormat``: the final answer parsed (``runs.output``); ``None`` leaves it as it is."""
    calls: list[LlmCall] = field(default_factory=list)
    """The LLM calls made since the previous step: one usage log row each, of the run's tenant, user and caller,
    written with the step (nothing is written for them when the guard refuses the step). A call already logged
    (the same ``iteration`` and ``attempt``: the step written again after a write that committed unseen) is skipped."""
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    """The tool calls whose results (or ends) this step records: one audit row each (``schema.tool_calls``), of the
    run's tenant and user, written with the step; a row already there (the same round, call index and attempt) is
    skipped, as a usage row is."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    conversation_id: str | None
    caller: str | None
    tenant: str | None
    user: str | None
    model: str
    status: RunStatus
    iterations: int
    usage: Usage
    finish_reason: RunFinishReason | None
    budget: BudgetName | None
    error: RunErrorDetail | None
    plan: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    resumes: int
    """How many times another lease took the run over (0 for a run that never crashed)."""
    cancel_requested: bool
    last_seq: int
    """The highest stored event sequence number (0: none)."""
    user_role: UserRole | None = None
    """The end user's role (``X-User-Role``) when the run started; ``None``: stored before roles (``user``)."""
    output: Any | None = None
    """With ``responseFormat``: the final answer parsed, once the run has it."""
    waiting_since: datetime | None = None
    """Set while the run waits for approvals or answers (status ``waiting``)."""
    deadline_left_seconds: float | None = None
    """The wall-clock seconds its deadline had left when it began to wait: it resumes with these."""

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def waiting(self) -> bool:
        return self.status == "waiting"


class ApprovalNotPending(StoreError):
    """A decision for a tool call that does not wait for one (decided already, unknown, or its run not waiting)."""

    def __init__(self, run_id: str, tool_call_id: str) -> None:
        super().__init__(f"The tool call {tool_call_id} of run {run_id} does not wait for a decision.")
        self.run_id = run_id
        self.tool_call_id = tool_call_id


@dataclass(frozen=True, slots=True)
class NewApproval:
    """A tool call held for approval as its run begins to wait."""

    tool_call_id: str
    iteration: int
    tool: str
    server: str | None
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """A tool call that needed approval (``schema.approvals``), and its decision."""

    run_id: str
    tool_call_id: str
    iteration: int
    tool: str
    server: str | None
    arguments: dict[str, Any]
    status: ApprovalStatus
    message: str | None
    decided_by: str | None
    requested_at: datetime
    decided_at: datetime | None
    expires_at: datetime


class Parked(enum.Enum):
    """How ``RunStore.park`` went; true unless the run was not parked for its cancel."""

    WAITING = "waiting"
    """Parked: it waits for a person, no replica holds it."""
    CANCELLED = "cancelled"
    """Not parked (nothing written): its cancel was asked for."""
    RESUMED = "resumed"
    """Nothing was left pending (its questions were answered before it parked): claimed again by its owner at once,
    to resume as a decided run is (its events stored, status ``tool_loop``)."""

    def __bool__(self) -> bool:
        return self is not Parked.CANCELLED


class InputNotPending(StoreError):
    """An answer to a question that does not wait for one (answered already, unknown, or its run not waiting)."""

    def __init__(self, run_id: str, input_id: str) -> None:
        super().__init__(f"The input {input_id} of run {run_id} does not wait for an answer.")
        self.run_id = run_id
        self.input_id = input_id


@dataclass(frozen=True, slots=True)
class InputRecord:
    """A tool server's question during a run (``schema.inputs``), and its answer."""

    run_id: str
    input_id: str
    tool_call_id: str
    iteration: int
    name: str
    server: str | None
    message: str
    requested_schema: dict[str, Any]
    status: InputStatus
    answer: dict[str, Any] | None
    """The accepted content, defaults filled (forwarded on resume; never shown)."""
    decided_by: str | None
    requested_at: datetime
    decided_at: datetime | None
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    conversation_id: str
    created_at: datetime
    updated_at: datetime
    messages: list[Message]
    """Every run's messages, run after run, in order (one page of them when asked for a page); a run that failed
    before the model answered it is not part of its conversation (its input is not sent again)."""
    runs: list[RunRecord]
    """Oldest first: the runs of ``messages`` (a run cut by the page's start is on both pages)."""
    settings: ConversationSettings | None = None
    """What its newest run asked for (``None``: stored before conversations kept them)."""
    earlier: tuple[str, int] | None = None
    """Where the page before this one ends, ``(run id, position)`` of this page's first message; ``None``: this
    page starts at the conversation's first message."""


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """A conversation as a list of them shows it: no messages, only what names and describes it."""

    conversation_id: str
    created_at: datetime
    updated_at: datetime
    """When its newest run was started."""
    first_user_text: str | None
    """The text of its first user message (``None``: it has none)."""
    runs: int
    latest_status: RunStatus
    """The status of its newest run."""
    settings: ConversationSettings | None = None
    """What its newest run asked for (``None``: stored before conversations kept them)."""


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """The usage log summed for one model over a time range."""

    model: str
    calls: int
    usage: Usage
    """``cost_usd`` is ``None`` when none of the calls had a price."""


@dataclass(frozen=True, slots=True)
class AuditedCall:
    """One row of the tool-call audit log, as read back."""

    id: int
    """The row's own number: with ``created_at``, its place in the log's order (newest first)."""
    tenant: str
    user: str | None
    run_id: str
    iteration: int
    call_index: int
    attempt: int
    tool_call_id: str
    server: str | None
    tool: str
    status: ToolCallStatus
    latency_ms: float | None
    created_at: datetime


AuditCursor = tuple[datetime, int]
"""Where a page of the audit log ended: its last row's ``(created_at, id)``; the next page is the rows before it."""


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which of a tenant's audit rows to read: each field narrows it (``None``: any); times are ``[start, end)``."""

    start: datetime | None = None
    end: datetime | None = None
    tool: str | None = None
    status: ToolCallStatus | None = None
    user: str | None = None
