"""The wire models of the contracts between the services (docs/agent-api.md, docs/gateway-api.md, docs/providers.md
and the OpenAPI each service serves). JSON is camelCase.

Models accept camelCase and snake_case on input and always write camelCase, leaving ``None``
fields out (``dump``). Unknown fields are ignored so that a newer peer can add fields without
breaking an older one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "DEADLINE_HEADER",
    "MAX_MODEL_NAME_CHARS",
    "AgentRunFailure",
    "AgentRunRequest",
    "AgentRunResult",
    "BudgetName",
    "CallToolProgress",
    "CallToolRequest",
    "CallToolResponse",
    "CompletionDone",
    "CompletionEvent",
    "CompletionRequest",
    "CompletionResponse",
    "ConversationId",
    "ConversationList",
    "ConversationSettings",
    "ConversationSummaryView",
    "ConversationView",
    "ErrorDetail",
    "ErrorResponse",
    "FinishReason",
    "ListToolsResponse",
    "Message",
    "ModelInfo",
    "ModelList",
    "ModelName",
    "ModelPrices",
    "ModelTarget",
    "ModelUsageView",
    "NamedToolChoice",
    "PersonaList",
    "PersonaSummary",
    "ReasoningBlock",
    "ReasoningBlockEvent",
    "ReasoningControl",
    "ReasoningDelta",
    "ReasoningEffort",
    "ResolvedModel",
    "RunDone",
    "RunError",
    "RunErrorDetail",
    "RunEvent",
    "RunFinishReason",
    "RunReasoning",
    "RunResumed",
    "RunStarted",
    "RunStatus",
    "RunText",
    "RunToolCall",
    "RunToolProgress",
    "RunToolResult",
    "RunView",
    "StreamError",
    "Suggestion",
    "SuggestionList",
    "TextDelta",
    "ToolCall",
    "ToolCallEvent",
    "ToolChoice",
    "ToolInfo",
    "ToolList",
    "ToolSpec",
    "ToolSummary",
    "ToolUnavailable",
    "Usage",
    "UsageReport",
    "UsageTotal",
    "Verbosity",
    "WireModel",
    "dump",
]

DEADLINE_HEADER = "X-Deadline-Ms"
"""Milliseconds the caller still has for this request. A callee never works past it."""


class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


def dump(model: BaseModel) -> str:
    """The JSON a peer expects: camelCase, ``None`` fields left out."""
    return model.model_dump_json(by_alias=True, exclude_none=True)


# --- errors ----------------------------------------------------------------------------------


class ErrorDetail(WireModel):
    code: str
    """A stable machine code (``invalid_request``, ``tool_not_found``, ...)."""
    message: str
    """What went wrong and what to do, for people."""


class ErrorResponse(WireModel):
    """Every service's error body, with the right HTTP status; some errors add fields beside ``error``."""

    error: ErrorDetail


# --- conversation ----------------------------------------------------------------------------

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(WireModel):
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    invalid_arguments: str | None = None
    """Set only when the model produced arguments that are not a JSON object: the raw text,
    kept so the model can be told what was wrong and the turn can be replayed verbatim."""
    signature: str | None = None
    """An opaque token the provider attached to this call (Gemini's ``thoughtSignature``), replayed
    verbatim on the next turn because the provider refuses the conversation without it."""


class ReasoningBlock(WireModel):
    """One block of the model's reasoning, kept on the assistant message so that it can be sent back.

    Anthropic requires its thinking blocks, signature included, to come back unchanged during tool
    use; ``provider`` says whose block it is, so that it is never sent to another provider.
    """

    text: str = ""
    signature: str | None = None
    redacted_data: str | None = None
    """Reasoning the provider encrypted (Anthropic ``redacted_thinking``): opaque, replayed as is."""
    provider: str | None = None


class Message(WireModel):
    role: Role
    content: str | None = None
    reasoning: list[ReasoningBlock] | None = None
    """On an assistant message: the reasoning that came before its text and tool calls."""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    is_error: bool | None = None
    """On a ``tool`` message: the tool failed (providers that can say so are told)."""

    @model_validator(mode="after")
    def _check_role_fields(self) -> Message:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs toolCallId")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message carries toolCalls")
        return self


class NamedToolChoice(WireModel):
    name: str = Field(min_length=1)


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


MAX_MODEL_NAME_CHARS = 256
"""The longest model name agent-service and completion-service accept (400 beyond). Real names are far
shorter (a Bedrock inference-profile ARN is about 100 characters); a name travels in URLs and messages."""


def _printable_model_name(name: str) -> str:
    if not name.isprintable():
        raise ValueError("a model name has no control characters (newlines, tabs, ...)")
    return name


ModelName = Annotated[str, Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS), AfterValidator(_printable_model_name)]
"""A model name as a caller writes it: 1 to ``MAX_MODEL_NAME_CHARS`` printable characters."""


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int | None = None
    """Of ``output_tokens``, those the model spent reasoning, where the provider reports them (OpenAI's
    ``reasoning_tokens``, Gemini's ``thoughtsTokenCount``); ``None`` when it does not."""
    cost_usd: float | None = None
    """What the tokens cost in US dollars, at the prices of completion-service's model catalog; ``None`` when no
    call of it had a price (a sum of calls counts the priced ones)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if self.cost_usd is None and other.cost_usd is None:
            cost = None
        else:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        if self.reasoning_tokens is None and other.reasoning_tokens is None:
            reasoning = None
        else:
            reasoning = (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=reasoning,
            cost_usd=cost,
        )


# --- completion-service ----------------------------------------------------------------------

FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]


class ToolSpec(WireModel):
    name: str = Field(min_length=1)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


ReasoningEffort = Literal["minimal", "low", "medium", "high"]
Verbosity = Literal["low", "medium", "high"]


class ReasoningControl(WireModel):
    """How much a model that can reason should think before it answers, and whether a summary of its thinking
    comes back (as ``reasoning`` events and blocks). Each adapter maps it to its provider's own controls
    (docs/providers.md); a model that cannot reason ignores it, with a warning in the answer."""

    effort: ReasoningEffort | None = None
    """``None``: the provider's default."""
    summary: Literal["auto", "none"] | None = None
    """``auto``: the provider's summary of its reasoning where it gives one; ``none``: no reasoning text back."""


class CompletionRequest(WireModel):
    model: ModelName
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    reasoning: ReasoningControl | None = None
    verbosity: Verbosity | None = None
    """How long the answer should be, where the model takes it (OpenAI's ``verbosity``); else ignored, with a
    warning in the answer."""


class CompletionResponse(WireModel):
    message: Message
    finish_reason: FinishReason
    usage: Usage = Field(default_factory=Usage)
    model: str
    provider: str
    warnings: list[str] | None = None
    """Controls of the request the model could not take and so ignored (``reasoning``, ``verbosity``), each said
    in a sentence; never a failed call for them."""


class TextDelta(WireModel):
    type: Literal["text"] = "text"
    delta: str


class ReasoningDelta(WireModel):
    """A piece of the model's reasoning as it streams in, for display."""

    type: Literal["reasoning"] = "reasoning"
    delta: str


class ReasoningBlockEvent(WireModel):
    """A whole reasoning block once it is complete (after its ``reasoning`` deltas), for the next turn."""

    type: Literal["reasoning_block"] = "reasoning_block"
    block: ReasoningBlock


class ToolCallEvent(WireModel):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    invalid_arguments: str | None = None
    signature: str | None = None


class CompletionDone(WireModel):
    type: Literal["done"] = "done"
    finish_reason: FinishReason
    usage: Usage = Field(default_factory=Usage)
    model: str
    provider: str
    warnings: list[str] | None = None
    """As ``CompletionResponse.warnings``."""


class StreamError(WireModel):
    type: Literal["error"] = "error"
    code: str
    message: str
    retryable: bool = False


CompletionEvent = Annotated[
    TextDelta | ReasoningDelta | ReasoningBlockEvent | ToolCallEvent | CompletionDone | StreamError,
    Field(discriminator="type"),
]
"""One SSE event of a streamed completion; the SSE ``event:`` field carries ``type`` too."""


class ModelPrices(WireModel):
    """What a model's tokens cost, in US dollars per million, as completion-service's catalog gives them."""

    input_per_million_usd: float = Field(ge=0, allow_inf_nan=False)
    output_per_million_usd: float = Field(ge=0, allow_inf_nan=False)


class ModelInfo(WireModel):
    """One entry of ``GET /api/v1/models``: a model name, or a pattern (``openai/*``), and who answers it."""

    id: str
    provider: str
    upstream_model: str | None = None
    fallbacks: list[str] | None = None
    description: str | None = None
    prices: ModelPrices | None = None
    """The catalog entry's prices; ``None`` for names without them (``demo``, ``<provider>/*``)."""


class ModelList(WireModel):
    models: list[ModelInfo]


class ModelTarget(WireModel):
    id: str
    provider: str
    upstream_model: str
    prices: ModelPrices | None = None
    """The prices of the completions this target answers (its ``usage.costUsd``); ``None``: unpriced."""


class ResolvedModel(ModelTarget):
    """``GET /api/v1/models/{model}``: where a completion for this model name would go, fallbacks in order."""

    fallbacks: list[ModelTarget] | None = None


# --- mcp-client-service ----------------------------------------------------------------------


class ToolUnavailable(WireModel):
    """Why a configured tool cannot be called now (its server is restarting, its circuit is open)."""

    reason: str
    retry_after_seconds: float | None = None
    """When to try again, as far as the gateway knows; ``None`` while it is reconnecting right now."""


class ToolInfo(WireModel):
    name: str
    description: str = ""
    input_schema: dict[str, Any]
    server: str
    server_tool: str | None = None
    """The tool's own name on its server, set when the gateway lists it under another (a server's
    ``toolPrefix``, or ``<server>__<tool>`` under ``MCP_CLIENT_TOOL_NAME_COLLISION=prefix``);
    ``None``: the same as ``name``."""
    title: str | None = None
    annotations: dict[str, Any] | None = None
    """MCP ``ToolAnnotations`` as the server sent them: ``readOnlyHint``, ``destructiveHint``,
    ``idempotentHint``, ``openWorldHint``, ``title``."""
    output_schema: dict[str, Any] | None = None
    unavailable: ToolUnavailable | None = None
    """Set on a tool whose server is known but cannot take calls now: it is listed all the same,
    and ``call-tool`` answers 503 ``tool_unavailable`` with ``Retry-After``."""


class ListToolsResponse(WireModel):
    tools: list[ToolInfo]


class CallToolRequest(WireModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    server: str | None = Field(default=None, min_length=1)
    """The MCP server to run the tool on (``server`` of its ``list-tools`` entry). Given, the gateway calls that
    server's tool, or nothing: whatever ``name`` resolves to now (under ``first_wins`` a name falls to the next
    server while its first is away, and back), the call never runs on another server. 409
    ``tool_server_mismatch`` if that server does not have the tool now; 503 ``tool_unavailable`` while it is away."""
    server_tool: str | None = Field(default=None, min_length=1)
    """With ``server``: the tool's own name there (``serverTool``, else ``name``, of its ``list-tools`` entry);
    ``name`` must then be a name that tool is listed under (its server's ``toolPrefix`` and its own name, or
    ``<server>__`` and that)."""


class CallToolResponse(WireModel):
    content: list[dict[str, Any]]
    """MCP content blocks as the server sent them (``{"type": "text", "text": ...}`` and so on)."""
    structured_content: dict[str, Any] | None = None
    is_error: bool = False
    server: str
    duration_ms: float


class CallToolProgress(WireModel):
    """A ``progress`` event of a ``call-tool`` answered as SSE: the MCP server's ``notifications/progress``."""

    progress: float
    total: float | None = None
    message: str | None = None


# --- agent-service ---------------------------------------------------------------------------

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


RunStatus = Literal["processing", "tool_loop", "completed", "failed", "cancelled"]
"""``processing``: waiting for the model; ``tool_loop``: the model's tool calls are running; then final."""


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


class ConversationSettings(WireModel):
    """What a conversation's newest run asked for, kept with the conversation so that a client (another tab, another
    browser, a reload) continues it with the same settings: the run request's own fields (``None``: the request left
    it out, so the persona's, tenant's or service's default applied), and the system prompt it started with."""

    model: str | None = None
    persona: str | None = None
    tools: list[str] | None = None
    """The tools the run was offered by name; ``None``: every available tool."""
    reasoning: ReasoningControl | None = None
    verbosity: Verbosity | None = None
    max_tokens: int | None = None
    system_prompt: str | None = None
    """The first ``system`` message a run of the conversation sent (kept when later runs send none); ``None``: the
    conversation runs on its persona's or tenant's prompt."""


class ConversationView(WireModel):
    """A stored conversation, as ``GET /api/v1/agent/conversations/{conversationId}`` answers it."""

    conversation_id: str
    created_at: str
    updated_at: str
    settings: ConversationSettings | None = None
    """What its newest run asked for (absent for a conversation stored before conversations kept them)."""
    messages: list[Message]
    """Every run's messages, run after run: what a next run continues (a run that failed before the model answered
    it adds none). One page of them: the newest, or those before ``?before=``."""
    runs: list[RunView]
    """The runs of ``messages``, oldest first, without their messages (they are above)."""
    earlier: str | None = None
    """The cursor of the page before this one (pass it as ``?before=``); absent: this page starts at the
    conversation's first message (a conversation of one page answers as it always did)."""


class ConversationSummaryView(WireModel):
    """One conversation in ``GET /api/v1/agent/conversations``: what names and describes it, no messages."""

    conversation_id: str
    title: str
    """Its first user message's text on one line, cut to 80 characters (ending in ``…`` when cut); empty
    when it has none."""
    created_at: str
    updated_at: str
    """When its newest run started."""
    runs: int
    """How many runs it has."""
    status: RunStatus
    """Its newest run's status."""
    settings: ConversationSettings | None = None
    """What its newest run asked for (absent for a conversation stored before conversations kept them)."""


class ConversationList(WireModel):
    """``GET /api/v1/agent/conversations``: the conversations updated last, newest first."""

    conversations: list[ConversationSummaryView]


class UsageTotal(WireModel):
    """LLM calls summed: how many, their tokens, and their cost."""

    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None = None
    """US dollars, at completion-service's catalog prices; absent when none of the calls had a price."""


class ModelUsageView(WireModel):
    """One model's line in ``GET /api/v1/agent/usage``."""

    model: str
    """The model the runs asked for (a catalog name or ``<provider>/<model>``)."""
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None = None
    """Absent when none of its calls had a price."""


class UsageReport(WireModel):
    """``GET /api/v1/agent/usage``: the caller's tenant's LLM calls over ``[from, to)``, summed per model."""

    tenant: str
    user: str | None = None
    """The end user the report is limited to (``?user=``); absent: every call of the tenant."""
    from_: str = Field(validation_alias=AliasChoices("from", "from_"), serialization_alias="from")
    """The range's start, included (ISO 8601, UTC)."""
    to: str
    """The range's end, excluded."""
    models: list[ModelUsageView]
    """By model name."""
    total: UsageTotal


class ToolSummary(WireModel):
    """A tool a run may use, as ``GET /api/v1/agent/tools`` lists it (no input schema)."""

    name: str
    description: str = ""
    server: str
    """The MCP server that provides it."""
    title: str | None = None
    unavailable: ToolUnavailable | None = None
    """Set while its server cannot take calls (a run naming it is still accepted; see ``ToolInfo``)."""


class ToolList(WireModel):
    """``GET /api/v1/agent/tools``: sorted by server, then name."""

    tools: list[ToolSummary]


class Suggestion(WireModel):
    """A suggestion card of the console: a question an empty conversation offers."""

    title: str
    """The card's text."""
    prompt: str
    """The message a click on it sends."""


class SuggestionList(WireModel):
    """``GET /api/v1/agent/console/suggestions``: in the file's order."""

    suggestions: list[Suggestion]


class PersonaSummary(WireModel):
    """A persona the caller's runs may name (``persona`` on a run request), as ``GET /api/v1/agent/personas`` lists
    it."""

    name: str
    description: str | None = None
    model: str | None = None
    """The model it runs when the request names none (None: the request must name one)."""
    system_prompt: str | None = None
    """The system prompt a conversation of it starts with (None: the tenant's, if any)."""


class PersonaList(WireModel):
    """``GET /api/v1/agent/personas``: sorted by name."""

    personas: list[PersonaSummary]
    system_prompt: str | None = None
    """The caller's tenant's system prompt: what a conversation without a persona (or of a persona without a prompt)
    starts with; None: none."""
