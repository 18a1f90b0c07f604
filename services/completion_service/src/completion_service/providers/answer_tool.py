"""A structured answer from providers without a JSON mode (Anthropic, Bedrock): a forced final tool.

The request's ``response_format`` becomes one more tool, named after the schema, whose input schema is the
answer's, and the tool choice becomes ``required`` (Anthropic and Converse ``any``): each turn the model either
calls one of the caller's tools or gives its answer by calling this one. A call of it comes back as the answer's
text (the JSON of its input) with finish reason ``stop``; the caller never sees the tool. Pure functions, applied
by ``HttpAdapter`` around an adapter that says ``answers_through_tool``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    NamedToolChoice,
    TextDelta,
    ToolCallEvent,
    ToolSpec,
)

__all__ = ["JSON_OBJECT_TOOL", "AnswerTool"]

JSON_OBJECT_TOOL = "json_answer"
"""The tool's name for ``json_object`` (any JSON object), which has no schema name of its own."""

_DESCRIPTION = (
    "Give your final answer by calling this tool: its input is the answer. Call it once you need no other tool."
)


@dataclass(frozen=True)
class AnswerTool:
    """The answer tool of one call: ``outbound`` adds it to the request, ``inbound`` / ``inbound_event`` turn its
    call back into the answer's text."""

    name: str

    @classmethod
    def plan(cls, request: CompletionRequest) -> AnswerTool | None:
        """The answer tool ``request`` needs, or ``None`` (no JSON answer asked for)."""
        answer_format = request.response_format
        if answer_format is None or answer_format.type == "text":
            return None
        name = answer_format.json_schema.name if answer_format.json_schema is not None else JSON_OBJECT_TOOL
        taken = {tool.name for tool in request.tools}
        while name in taken:  # a caller's tool of that name keeps it; the answer tool takes another
            name = f"{name[:57]}_answer"
        return cls(name)

    def outbound(self, request: CompletionRequest) -> CompletionRequest:
        """``request`` with the answer tool offered and a tool call forced (a named choice stays as it is: that
        tool is called first, the answer comes in a later turn)."""
        answer_format = request.response_format
        assert answer_format is not None
        schema = answer_format.json_schema
        description = _DESCRIPTION + (f" {schema.description}" if schema is not None and schema.description else "")
        spec = ToolSpec(
            name=self.name,
            description=description,
            input_schema=schema.schema_ if schema is not None else {"type": "object"},
        )
        choice = request.tool_choice
        if choice == "none" or not request.tools:
            # No tool of the caller's may be called: the answer tool is the only one offered, and forced by name.
            return request.model_copy(update={"tools": [spec], "tool_choice": NamedToolChoice(name=self.name)})
        forced = choice if isinstance(choice, NamedToolChoice) else "required"
        return request.model_copy(update={"tools": [*request.tools, spec], "tool_choice": forced})

    def inbound(self, response: CompletionResponse) -> CompletionResponse:
        """The answer tool's call as the answer's text (other calls of the same turn dropped: the turn answered)."""
        calls = response.message.tool_calls or []
        answer = next((call for call in calls if call.name == self.name), None)
        if answer is None:
            return response
        text = answer.invalid_arguments if answer.invalid_arguments is not None else json.dumps(answer.arguments)
        message = response.message.model_copy(update={"content": text, "tool_calls": None})
        return response.model_copy(update={"message": message, "finish_reason": "stop"})

    def inbound_events(self) -> _EventFilter:
        """A filter for one stream's events (it remembers whether the answer came)."""
        return _EventFilter(self.name)


class _EventFilter:
    """Tool calls are held until ``done`` (adapters give them whole, just before it): a turn that answered drops
    the others, as ``inbound`` does."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.answered = False
        self.held: list[CompletionEvent] = []

    def __call__(self, event: CompletionEvent) -> list[CompletionEvent]:
        """What the caller gets for ``event``."""
        if isinstance(event, ToolCallEvent):
            if event.name == self.name and not self.answered:
                self.answered = True
                text = event.invalid_arguments if event.invalid_arguments is not None else json.dumps(event.arguments)
                return [TextDelta(delta=text)]
            self.held.append(event)
            return []
        if isinstance(event, CompletionDone):
            if self.answered:
                return [event.model_copy(update={"finish_reason": "stop"})]
            held, self.held = self.held, []
            return [*held, event]
        return [event]
