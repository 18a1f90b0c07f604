"""agent-service's runs: the request, the events of a streamed run, the answer of one that is not, and a stored run
(docs/agent-api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from suite_common.wire.base import WireModel
from suite_common.wire.completion import ReasoningControl, ResponseFormat, Verbosity
from suite_common.wire.conversation import Message, ModelName, ToolChoice, Usage

__all__ = [
    "APPROVAL_DESTRUCTIVE",
    "AgentRunFailure",
    "AgentRunRequest",
    "AgentRunResult",
    "ApprovalDecision",
    "ApprovalStatus",
    "ApprovalView",
    "ApprovalsRequest",
    "ApprovalsResponse",
    "BudgetName",
    "ConversationId",
    "InputAnswer",
    "InputStatus",
    "InputView",
    "InputsRequest",
    "InputsResponse",
    "RunApprovalDecided",
    "RunApprovalRequired",
    "RunAuthorizationRequired",
    "RunContextCompacted",
    "RunDone",
    "RunError",
    "RunErrorDetail",
    "RunEvent",
    "RunFinishReason",
    "RunInputDecided",
    "RunInputRequired",
    "RunReasoning",
    "RunResumed",
    "RunStarted",
    "RunStatus",
    "RunText",
    "RunToolCall",
    "RunToolProgress",
    "RunToolResult",
    "RunView",
    "ToolResultImage",
]

RunFinishReason = Literal["stop", "max_iterations", "deadline", "budget", "cancelled", "tool_calls", "error"]
"""``budget``: a token or cost budget ended the run (``budget`` names which); its partial result is kept.
``tool_calls``: the model called a client-side tool (one the caller declared and runs itself, see the OpenAI
front); the run stops and hands the call back. ``error``: the run failed (an LLM provider or a service it needs);
the error says why."""


BudgetName = Literal[
    "run_tokens", "run_cost", "tenant_monthly_tokens", "tenant_monthly_cost", "user_monthly_tokens", "user_monthly_cost"
]
"""The budget that ended a run (finish reason ``budget``): the run's own token or cost limit (``maxTotalTokens``,
``maxCostUsd``, or its tenant's cap on them), or its tenant's or end user's for the calendar month (UTC)."""


ConversationId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")]
"""A conversation's id, chosen by the caller: 1 to 128 letters, digits and ``. _ : -``."""


class AgentRunRequest(WireModel):
    model: ModelName | None = None
    """Omitted: the persona's, else the service's default (``AGENT_DEFAULT_MODEL``); without either, a 400."""
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    tools: list[str] | None = None
    """Names of the tools the model may call; omitted means every available tool."""
    tool_choice: ToolChoice = "auto"
    max_iterations: int | None = Field(default=None, ge=1)
    """Lower than the service's cap (15) to stop sooner; higher is refused."""
    deadline_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Shorter than the service's deadline to stop sooner; longer is refused."""
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    reasoning: ReasoningControl | None = None
    """Passed to every LLM call of the run (omitted: the persona's, else the provider's default)."""
    verbosity: Verbosity | None = None
    """Passed to every LLM call of the run (omitted: the persona's, else the provider's default)."""
    conversation_id: ConversationId | None = None
    """Continue this stored conversation: its messages come before ``messages``, and the run's are appended to it.
    An id not known yet starts a conversation. One run at a time per conversation."""
    on_disconnect: Literal["cancel", "continue"] = "cancel"
    """What happens to the run when the client's connection drops: ``continue`` lets it run on, to be read or
    followed later (``GET /api/v1/agent/runs/{runId}`` and ``.../events``)."""
    max_total_tokens: int | None = Field(default=None, ge=1)
    """End the run (finish reason ``budget``) before an LLM call once its input and output tokens reach this."""
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """End the run (finish reason ``budget``) before an LLM call once its cost reaches this (US dollars, at the
    catalog's prices)."""
    persona: str | None = Field(default=None, min_length=1, max_length=64)
    """A named preset of the callers file (system prompt, model, tools, limits); the request's own fields win."""
    require_approval: list[str] | None = Field(default=None, max_length=64)
    """More tools whose calls wait for a person's approval, beside the tenant's and the persona's ``approval``
    (it can add, never remove): tool names, ``<server>:<tool>``, ``<server>:*``, or ``destructive`` (every tool
    whose MCP annotations do not say ``readOnlyHint: true``)."""
    response_format: ResponseFormat | None = None
    """The final answer as JSON following a schema (``json_schema``) or any JSON object (``json_object``):
    validated, repaired once, else the run fails with ``invalid_output``; ``done`` carries the value as
    ``output``."""


APPROVAL_DESTRUCTIVE = "destructive"
"""The approval pattern that matches every tool whose MCP annotations do not say ``readOnlyHint: true``."""


class _RunEventBase(WireModel):
    run_id: str


class RunStarted(_RunEventBase):
    type: Literal["run_started"] = "run_started"
    model: str
    tools: list[str]
    max_iterations: int


class RunResumed(_RunEventBase):
    """The run was taken over after the replica running it stopped; it goes on from its last stored step."""

    type: Literal["run_resumed"] = "run_resumed"
    iterations: int
    """Rounds done before the takeover."""
    resumes: int
    """How many times the run has been taken over so far."""


class RunToolCall(_RunEventBase):
    type: Literal["tool_call"] = "tool_call"
    iteration: int
    id: str
    name: str
    arguments: dict[str, Any]


class ToolResultImage(WireModel):
    """An image a tool returned, as its ``tool_result`` event tells of it (the bytes go to the model, not the
    stream)."""

    mime_type: str
    size_bytes: int


class RunToolResult(_RunEventBase):
    type: Literal["tool_result"] = "tool_result"
    iteration: int
    tool_call_id: str
    name: str
    content: str
    is_error: bool
    duration_ms: float
    cached: bool | None = None
    """True when the result is an earlier identical call's, from the tool-result cache (nothing was called)."""
    images: list[ToolResultImage] | None = None
    """The images of the result (their type and size), which reach the model as images."""


class RunApprovalRequired(_RunEventBase):
    """A tool call of the round waits for a person's decision (``POST /api/v1/agent/runs/{runId}/approvals``); the
    run's status is ``waiting`` until every such call of the round is decided or the wait's limit passes."""

    type: Literal["approval_required"] = "approval_required"
    iteration: int
    tool_call_id: str
    name: str
    server: str | None = None
    arguments: dict[str, Any]
    expires_at: str | None = None
    """When the call is denied if no one decided (ISO 8601, UTC)."""


class RunApprovalDecided(_RunEventBase):
    """A waiting call was decided (by a person, or denied when the wait's limit passed); approved calls then run as
    any other (``tool_result`` follows)."""

    type: Literal["approval_decided"] = "approval_decided"
    tool_call_id: str
    approve: bool
    message: str | None = None
    decided_by: str | None = None
    """The caller key's name and the end user (``<key>/<user>``) who decided; ``None``: the wait's limit passed."""


class RunAuthorizationRequired(_RunEventBase):
    """A tool call's server is behind OAuth and holds no token for whom the run acts (the run's end user on a
    per-user server, else its tenant): the call was not made, its ``tool_result`` says so, and the run goes on.

    ``tokens`` says who may consent. ``perUser``: the run's end user connects the server themselves — ``POST
    /api/v1/agent/connections/{server}/authorize`` from their own browser (the console's "Connect"), which binds the
    consent to that browser. ``machine``: one token serves the whole tenant (or deployment), so only an
    administrator connects it (``POST /api/v1/admin/mcp-servers/{name}/authorize``); the end user is told so.

    ``authorizationUrl`` is never set any more (a consent URL in an event could be completed by whoever reads it);
    it stays in the schema for readers of older events."""

    type: Literal["authorization_required"] = "authorization_required"
    iteration: int
    tool_call_id: str
    name: str
    server: str
    tokens: Literal["machine", "perUser"] = "machine"
    authorization_url: str | None = None


class RunInputRequired(_RunEventBase):
    """A running tool's server asked its user a question (MCP ``elicitation/create``): the run waits (status
    ``waiting``, in the store as for an approval) until the question is answered with ``POST
    /api/v1/agent/runs/{runId}/inputs`` or its wait's limit passes (then ``decline``)."""

    type: Literal["input_required"] = "input_required"
    iteration: int
    input_id: str
    tool_call_id: str
    name: str
    server: str | None = None
    message: str
    requested_schema: dict[str, Any]
    expires_at: str | None = None
    """When the question is declined if no one answered (ISO 8601, UTC)."""


class RunInputDecided(_RunEventBase):
    """A question was answered (by a person, or ``decline`` when the wait's limit passed); the tool call goes on."""

    type: Literal["input_decided"] = "input_decided"
    input_id: str
    tool_call_id: str
    action: Literal["accept", "decline", "cancel"]
    decided_by: str | None = None
    """As ``approval_decided``'s: ``<key>`` or ``<key>/<user>``; ``None``: the wait's limit passed."""


class RunContextCompacted(_RunEventBase):
    """Before this round's LLM call the conversation did not fit the model's context window: its oldest turns were
    folded into a stored summary (and old tool results trimmed). The stored conversation keeps every message."""

    type: Literal["context_compacted"] = "context_compacted"
    iteration: int
    messages_folded: int
    tokens_before: int
    tokens_after: int


class RunToolProgress(_RunEventBase):
    """A running tool's progress (streamed runs only), before its ``tool_result``."""

    type: Literal["tool_progress"] = "tool_progress"
    iteration: int
    tool_call_id: str
    progress: float
    total: float | None = None
    message: str | None = None


class RunText(_RunEventBase):
    type: Literal["text"] = "text"
    iteration: int
    delta: str


class RunReasoning(_RunEventBase):
    """A piece of the model's reasoning (its thinking, or the provider's summary of it) as it is generated, from
    providers that show it, unless the run asked for ``reasoning.summary: "none"``; before that round's text and
    tool calls. The whole of it stays on the round's assistant message (``reasoning``)."""

    type: Literal["reasoning"] = "reasoning"
    iteration: int
    delta: str


class RunDone(_RunEventBase):
    type: Literal["done"] = "done"
    finish_reason: RunFinishReason
    iterations: int
    usage: Usage
    budget: BudgetName | None = None
    """Which budget ended the run, when ``finish_reason`` is ``budget``."""
    warnings: list[str] | None = None
    """The run's LLM calls' ``CompletionResponse.warnings``, each once: controls of the run (``reasoning``,
    ``verbosity``) its model ignored."""
    output: Any | None = None
    """With ``responseFormat``: the final answer parsed (a JSON value valid against the schema)."""


class RunError(_RunEventBase):
    type: Literal["error"] = "error"
    code: str
    message: str


RunEvent = Annotated[
    RunStarted
    | RunResumed
    | RunToolCall
    | RunToolProgress
    | RunToolResult
    | RunText
    | RunReasoning
    | RunApprovalRequired
    | RunApprovalDecided
    | RunAuthorizationRequired
    | RunInputRequired
    | RunInputDecided
    | RunContextCompacted
    | RunDone
    | RunError,
    Field(discriminator="type"),
]


class AgentRunResult(WireModel):
    """The answer to a run with ``stream: false``."""

    run_id: str
    message: Message
    messages: list[Message]
    """Every message the run appended to the conversation, in order."""
    finish_reason: RunFinishReason
    iterations: int
    usage: Usage
    budget: BudgetName | None = None
    """Which budget ended the run, when ``finish_reason`` is ``budget``."""
    warnings: list[str] | None = None
    """As the ``done`` event's."""
    output: Any | None = None
    """As the ``done`` event's: the final answer parsed, with ``responseFormat``."""


class RunErrorDetail(WireModel):
    code: str
    message: str


class AgentRunFailure(WireModel):
    """The answer to a run with ``stream: false`` that failed midway, sent with the error's HTTP status.

    The suite's error shape, plus what the run did before it failed: tools that ran may have had
    effects, so their calls and results are not lost. No ``message``: there is no final answer.
    """

    error: RunErrorDetail
    run_id: str
    messages: list[Message]
    """Every message the run appended before it failed, in order; each tool call has its result."""
    finish_reason: Literal["error"] = "error"
    iterations: int
    usage: Usage


RunStatus = Literal["processing", "tool_loop", "waiting", "completed", "failed", "cancelled"]
"""``processing``: waiting for the model; ``tool_loop``: the model's tool calls are running; ``waiting``: tool calls
wait for a person's approval, or a tool's question waits for a person's answer (the run is in the store, no replica
holds it); then final."""

ApprovalStatus = Literal["pending", "approved", "denied"]


class ApprovalView(WireModel):
    """A tool call that needed approval, and its decision."""

    tool_call_id: str
    iteration: int
    name: str
    server: str | None = None
    arguments: dict[str, Any]
    status: ApprovalStatus
    message: str | None = None
    decided_by: str | None = None
    requested_at: str
    decided_at: str | None = None
    expires_at: str


class ApprovalDecision(WireModel):
    tool_call_id: str = Field(min_length=1, max_length=256)
    approve: bool
    message: str | None = Field(default=None, max_length=2000)
    """Told to the model with a denial (``Not approved: <message>``), and kept with the decision."""


class ApprovalsRequest(WireModel):
    """``POST /api/v1/agent/runs/{runId}/approvals``."""

    decisions: list[ApprovalDecision] = Field(min_length=1, max_length=64)


class ApprovalsResponse(WireModel):
    run_id: str
    status: RunStatus
    """The run's status after the decisions: still ``waiting`` while calls of the round are undecided."""
    approvals: list[ApprovalView]
    """The round's calls that needed approval, decided or not."""


InputStatus = Literal["pending", "accepted", "declined", "cancelled"]


class InputView(WireModel):
    """A question a tool's server asked during the run, and its answer (never the answer's content)."""

    input_id: str
    tool_call_id: str
    iteration: int
    name: str
    server: str | None = None
    message: str
    requested_schema: dict[str, Any]
    status: InputStatus
    decided_by: str | None = None
    requested_at: str
    decided_at: str | None = None
    expires_at: str


class InputAnswer(WireModel):
    input_id: str = Field(min_length=1, max_length=256)
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None
    """With ``accept``: the answer, an object valid against the question's ``requestedSchema`` once its defaults fill
    what it leaves out (400 ``invalid_input`` otherwise)."""


class InputsRequest(WireModel):
    """``POST /api/v1/agent/runs/{runId}/inputs``."""

    inputs: list[InputAnswer] = Field(min_length=1, max_length=64)


class InputsResponse(WireModel):
    run_id: str
    status: RunStatus
    inputs: list[InputView]


class RunView(WireModel):
    """A stored run, as ``GET /api/v1/agent/runs/{runId}`` answers it."""

    run_id: str
    conversation_id: str | None = None
    model: str
    status: RunStatus
    finish_reason: RunFinishReason | None = None
    """Set once the run has ended."""
    budget: BudgetName | None = None
    """Which budget ended the run, when ``finish_reason`` is ``budget``."""
    user: str | None = None
    """The end user a trusted caller named (``X-User-Id``) for the run."""
    iterations: int
    usage: Usage
    error: RunErrorDetail | None = None
    messages: list[Message] = Field(default_factory=list)
    """The run's own messages: the request's, then what the run added (in a conversation, the earlier runs' are
    not repeated)."""
    created_at: str
    updated_at: str
    resumes: int = 0
    """How many times another replica took the run over after a crash."""
    cancel_requested: bool = False
    approvals: list[ApprovalView] | None = None
    """The calls of the run that needed approval, the waiting ones first (``None``: none did)."""
    inputs: list[InputView] | None = None
    """The questions tool servers asked during the run, the pending ones first (``None``: none did)."""
    output: Any | None = None
    """With ``responseFormat``: the final answer parsed."""
