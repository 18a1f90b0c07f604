"""What agent-service answers besides runs: stored conversations, usage, the tools and personas a caller may use,
and the console's suggestions (docs/agent-api.md, docs/callers.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field

from suite_common.wire.agent_runs import RunStatus, RunView
from suite_common.wire.base import WireModel
from suite_common.wire.completion import ReasoningControl, Verbosity
from suite_common.wire.conversation import Message
from suite_common.wire.gateway import ToolUnavailable

__all__ = [
    "AuditPage",
    "AuditedToolCall",
    "ConversationList",
    "ConversationSettings",
    "ConversationSummaryView",
    "ConversationView",
    "ModelUsageView",
    "PersonaList",
    "PersonaSummary",
    "Suggestion",
    "SuggestionList",
    "ToolCallStatus",
    "ToolList",
    "ToolSummary",
    "UsageReport",
    "UsageTotal",
]


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


ToolCallStatus = Literal["ok", "error", "refused", "cancelled", "cached"]
"""How a tool call a run dispatched ended: ``ok`` (the tool answered), ``error`` (the tool or the gateway answered an
error, which the model read), ``refused`` (not made: a tool the run does not have, arguments that were not a JSON
object, or an address the outbound policy blocks), ``cancelled`` (the run was cancelled, ran out of time, or failed
while it ran), ``cached`` (answered from the tool-result cache, nothing called)."""


class AuditedToolCall(WireModel):
    """One tool call of a run, as ``GET /api/v1/agent/audit`` lists it."""

    run_id: str
    iteration: int
    """The run's round (its first is 1)."""
    call_index: int
    """Its place among the round's tool calls, in the order the model asked for them (from 0)."""
    attempt: int
    """The run's takeovers when it was made (0 unless a replica took the run over after a crash and made the call
    again)."""
    tool_call_id: str
    tool: str
    """The tool's name as the run listed it."""
    server: str | None = None
    """The MCP server that served it; absent when no server was chosen (a tool the run does not have)."""
    status: ToolCallStatus
    latency_ms: float | None = None
    user: str | None = None
    """The run's end user (``X-User-Id``), if it had one."""
    at: str
    """When the call was made (ISO 8601, UTC)."""


class AuditPage(WireModel):
    """``GET /api/v1/agent/audit``: the caller's tenant's tool calls, newest first, one page of them."""

    tenant: str
    calls: list[AuditedToolCall]
    next_cursor: str | None = None
    """Pass it as ``?cursor=`` (with the same filters) for the next, older page; absent: this is the last page."""


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
