"""A run as plain values: its plan (``RunPlan``), its LLM calls (``LlmCall``) and tool calls (``ToolCallRecord``),
where a run taken over resumes (``ResumePoint``), how it ended (``RunOutcome``), and the two ways it reports while it
runs: its events (``EventSink``) and its steps (``RunRecorder``, which the journal implements).

No I/O: the loop (``agent_service.engine.loop``) runs a ``RunPlan``; the run store keeps ``LlmCall``s in its usage
log; planning makes the plans (``agent_service.admission.planning``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agent_service.core.context import SummaryStore
from agent_service.core.errors import UpstreamError
from agent_service.core.limits import RunLimits, SpendGuard
from agent_service.core.tenancy import DEFAULT_TENANT
from suite_common.wire import (
    BudgetName,
    CallerContext,
    ElicitationAnswer,
    Message,
    ModelPrices,
    ReasoningControl,
    ResponseFormat,
    RunEvent,
    RunFinishReason,
    ToolCall,
    ToolCallStatus,
    ToolChoice,
    ToolInfo,
    ToolSpec,
    Usage,
    UserRole,
    Verbosity,
)

__all__ = [
    "INPUT_LOST",
    "UNKNOWN_OUTCOME",
    "AskedInput",
    "EventSink",
    "LlmCall",
    "ResumePoint",
    "RunOutcome",
    "RunPlan",
    "RunRecorder",
    "ToolCallRecord",
]

EventSink = Callable[[RunEvent], Awaitable[None]]
"""Where a run's events go as they happen (the loop's ``emit``): a stream, a journal, the OpenAI front."""


@dataclass(frozen=True)
class RunPlan:
    """A validated run: the tools are already discovered and filtered."""

    run_id: str
    model: str
    messages: list[Message]
    tools: list[ToolInfo]
    tool_choice: ToolChoice
    limits: RunLimits
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning: ReasoningControl | None = None
    """Sent with every LLM call of the run: the request's, else its persona's, else its tenant's
    (``agent_service.core.personas``)."""
    verbosity: Verbosity | None = None
    """As ``reasoning``."""
    client_tools: list[ToolSpec] = field(default_factory=list)
    """Tools the caller declared and runs itself: offered to the model, never dispatched. A round that
    calls one ends the run with finish reason ``tool_calls``, handing those calls back."""
    system_prompt: str | None = None
    """Put first in each LLM call unless the conversation has a system message; never part of ``messages`` (nor
    stored), so a conversation continued run after run does not repeat it (``agent_service.core.personas``)."""
    spending: SpendGuard | None = None
    """The monthly budgets of the run's tenant and end user (``None``: they have none): asked before each LLM
    call, after ``limits``, and told each call's usage."""
    tenant: str = DEFAULT_TENANT
    """Whose run it is: the tool-result cache keeps each tenant's results apart."""
    prices: ModelPrices | None = None
    """The model's prices in completion-service's catalog (``None``: unpriced, or a run taken over): what an LLM
    call cut off before its usage came is estimated to cost (``agent_service.engine.metering``)."""
    user: str | None = None
    """The run's end user (``X-User-Id``), whom its tool calls act for with its tenant."""
    role: UserRole | None = None
    """That user's role (``X-User-Role``)."""
    conversation_id: str | None = None
    """The stored conversation the run continues, if any."""
    response_format: ResponseFormat | None = None
    """The final answer as JSON (``json_schema`` or ``json_object``; never ``text``, which is ``None`` here): sent
    with every LLM call, the answer validated and repaired once (``agent_service.engine.output``)."""

    @property
    def caller(self) -> CallerContext:
        """Who the run's tool calls act for, as ``call-tool`` tells the gateway (and the gateway the tool)."""
        return CallerContext(
            tenant=self.tenant, user=self.user, role=self.role, run_id=self.run_id, conversation_id=self.conversation_id
        )

    context_tokens: int | None = None
    """The model's context window as completion-service knows it (``None``: unknown, the conversation is sent as it
    is): what the context fitter fits each LLM call's messages to (``agent_service.engine.context``)."""
    summary_model: str | None = None
    """Who summarises the conversation's oldest turns when they no longer fit: the persona's, else the tenant's
    ``summary_model`` (``None``: the run's model)."""
    summaries: SummaryStore | None = None
    """Where the run's conversation's summary is kept (``None``: a run without a stored conversation)."""

    tool_cache_seconds: float | None = None
    """The longest a cached tool result may serve this run (its tenant's runtime, ``toolCacheSeconds``; 0: the
    cache is neither read nor written); ``None``: the operator's cache policy as it is."""
    approval_tools: frozenset[str] = frozenset()
    """The tools (names as offered) whose calls wait for a person's approval
    (``agent_service.admission.approval_rules``): the loop holds them and the run waits in the store
    (``agent_service.runs.waiting``)."""
    approval_timeout_seconds: float = 3600.0
    """How long the run waits for those decisions; then the undecided calls are denied."""
    input_timeout_seconds: float | None = 600.0
    """How long the run waits for a person's answer to a tool server's question (``input_required``); then it is
    declined. ``None``: nobody can be asked (the OpenAI front): the gateway declines every question at once."""


@dataclass(frozen=True, slots=True)
class LlmCall:
    """One LLM call of a run, as the usage log keeps it."""

    model: str
    """The model the run asked for (a catalog name or ``<provider>/<model>``)."""
    provider: str
    """Who answered it (empty: nobody did, the call was cut off first)."""
    usage: Usage
    """This call's own tokens and cost (not the run's so far)."""
    iteration: int | None = None
    """The run's round this call answered (``None``: a call outside any run)."""
    attempt: int = 0
    """The run's ``resumes`` when the call was made, set by the journal (the loop does not know it). With the run
    and ``iteration``, the call's identity in the usage log: a step written twice logs it once, and a run taken
    over that makes its interrupted round's call again logs that second call too."""
    estimated: bool = False
    """The call was cut off before the provider reported its usage: ``usage`` is an estimate
    (``agent_service.engine.metering``)."""
    answered_model: str | None = None
    """The model that answered, as completion-service reported it: a fallback's when routing fell back (``None``:
    the call was cut off before it answered)."""
    latency_ms: float | None = None
    """From sending the call to its answer's end (or to its cut), in milliseconds."""


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tool call a run dispatched, as the audit log keeps it (the store adds the run's tenant and user)."""

    iteration: int
    """The run's round."""
    call_index: int
    """Its place among the round's tool calls, in the model's order."""
    tool_call_id: str
    tool: str
    server: str | None
    """The server that served it (``None``: a tool the run does not have, so no server was chosen)."""
    status: ToolCallStatus
    latency_ms: float
    started_at: datetime
    attempt: int = 0
    """The run's ``resumes`` when the call was made, set by the journal (as ``LlmCall.attempt``)."""


class RunRecorder(Protocol):
    """Where the loop reports each step, before it goes on: the run store's journal (``agent_service.runs``).

    Positions are indices into the run's conversation (``RunPlan.messages`` first). A failure to record
    raises ``UpstreamError``, and the run fails with it: a step that cannot be stored is not taken.
    """

    async def turn(self, position: int, message: Message, *, iterations: int, usage: Usage, call: LlmCall) -> None:
        """An assistant turn, before any of its tool calls runs. ``usage``: the run's so far; ``call``: the LLM call
        that answered this turn (one row of the usage log)."""

    async def repair(self, position: int, answer: Message, prompt: Message, *, iterations: int, usage: Usage) -> None:
        """A final answer that did not validate (``responseFormat``) at ``position``, and the user message asking
        for another at ``position + 1``, stored together before the repair round's LLM call (the answer's own
        ``turn`` left it to the run's end)."""

    async def result(self, position: int, message: Message, *, audit: ToolCallRecord | None) -> None:
        """A tool result, as soon as its call has finished; ``audit``: the call's audit row, stored with the result
        (``None``: a result of no call made here, such as one a crash left without an outcome)."""

    async def asked(self, question: AskedInput) -> None:
        """A tool server's question, stored as pending before its ``input_required`` is emitted: it may be
        answered as soon as that is told, while the round's other calls still run."""

    async def forwarded(self, input_id: str) -> None:
        """The answer to the question ``input_id`` reached the gateway (its call moved on): its content is not kept
        any longer. Best effort: never raises."""

    def unanswered(self, audit: ToolCallRecord) -> None:
        """A tool call that ended without a result of its own (cancelled, or failed with the run): its audit row,
        stored with the step that answers it (the run's end)."""

    async def cut_off(self, call: LlmCall, *, usage: Usage) -> None:
        """An LLM call cut off before its answer (``call.estimated``), to be logged with the run's next write;
        ``usage``: the run's so far, this call's included. Called shielded from the run's cancellation."""


@dataclass(frozen=True)
class AskedInput:
    """A tool server's question during a call of the round (MCP ``elicitation/create``, relayed by the gateway): the
    call waits at the gateway, the run in the store, until a person answers (``input_required``)."""

    input_id: str
    """The gateway's ``elicitationId``: the answer is forwarded to ``POST /mcp/v1/elicitations/{input_id}``."""
    tool_call_id: str
    iteration: int
    name: str
    server: str | None
    message: str
    requested_schema: dict[str, Any]
    expires_at: datetime
    """When it is declined if nobody answered."""


@dataclass(frozen=True)
class ResumePoint:
    """Where a run taken over after a crash picks up: its stored counters and the last round's loose ends."""

    iterations: int
    usage: Usage
    turn_position: int = 0
    """The position of the last assistant turn, whose tool calls follow."""
    calls: list[ToolCall] = field(default_factory=list)
    """That turn's tool calls, in the model's order; empty when the last round was complete."""
    results: dict[str, Message] = field(default_factory=dict)
    """The stored results among them, by tool call id."""
    redispatch: set[str] = field(default_factory=set)
    """The ids of the calls without a result that may run again (their tools say they are idempotent), or that a
    person approved; each other one gets a result saying its outcome is unknown, unless ``answered`` has one."""
    answered: dict[str, str] = field(default_factory=dict)
    """Calls answered without running, by id: the error result the model is told (a denied approval)."""
    answers: dict[str, tuple[str, ElicitationAnswer]] = field(default_factory=dict)
    """Calls that wait at the gateway for their server's question to be answered, by id: the input id and the answer
    to forward; the call is then followed to its result (``GET /mcp/v1/calls/{callId}/events``)."""
    repaired: bool = False
    """The run already asked its model to repair an invalid final answer (``responseFormat``): its next invalid
    answer fails the run, as it would have had the run not been taken over."""


INPUT_LOST = (
    "This tool call waited for a person's answer to its server's question, and the tool service lost the call while "
    "it waited (it restarted), so whether it took effect is unknown: check its effect before calling it again."
)

UNKNOWN_OUTCOME = (
    "The service running this conversation restarted while this tool call was in progress, so whether it took "
    "effect is unknown. The tool does not say that calling it again is safe: check its effect before calling it again."
)


@dataclass
class RunOutcome:
    finish_reason: RunFinishReason
    iterations: int
    usage: Usage
    appended: list[Message]
    error: UpstreamError | None = None
    appended_from: int = 0
    """The position of ``appended[0]`` in the run's conversation."""
    budget: BudgetName | None = None
    """Which budget ended the run (finish reason ``budget``)."""
    warnings: list[str] | None = None
    """What its LLM calls warned of (``RunDone.warnings``)."""
    output: Any = None
    """With ``responseFormat``: the final answer parsed (``RunDone.output``)."""
    waiting: list[ToolCall] = field(default_factory=list)
    """The round's calls held for a person's approval: the run did not end, it waits (no ``done`` was emitted);
    ``finish_reason`` means nothing then."""
    asked: list[AskedInput] = field(default_factory=list)
    """The round's questions of tool servers waiting for a person's answer: the run waits as for ``waiting``."""

    @property
    def parks(self) -> bool:
        """The run did not end: it waits in the store for approvals or answers."""
        return bool(self.waiting or self.asked)
