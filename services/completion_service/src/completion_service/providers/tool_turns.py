"""One conversation, whatever the provider answers it: every tool call answered, every tool result answering one.

Every provider refuses an assistant turn whose tool calls are not all answered before the next turn
(OpenAI and Bedrock with a 400 / ValidationException, Anthropic and Gemini likewise), and a tool
result that answers no call of the turn before it. A caller's conversation breaks these rules when
a run was cut between a call and its result, or was edited. ``repaired`` mends it once, in the
neutral shape, before any wire format sees it, so one conversation means the same to every
provider:

- the results of an assistant message's calls come right after it, in the order of the calls
  (a user message written in between moves after them);
- a call with no result before the next assistant message gets one: ``NOT_RUN_RESULT``, an error;
- a result that answers no call of the assistant message before it (an unknown id, one already
  answered) becomes a user message quoting it, so the model still reads what it says.

A conversation that keeps the rules is returned as it is, after one pass over its messages.
Adapters rely on it: after an assistant message with ``n`` calls come exactly ``n`` tool messages,
answering them in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from suite_common.wire import CompletionRequest, Message, TextPart, ToolCall

__all__ = ["NOT_RUN_RESULT", "repaired"]

NOT_RUN_RESULT = "No result: this tool call was not run."
"""The answer given to a tool call the conversation never answered."""


def repaired(request: CompletionRequest) -> CompletionRequest:
    """``request`` with its conversation mended (see the module); ``request`` itself when nothing needs it."""
    if _keeps_the_rules(request.messages):
        return request
    return request.model_copy(update={"messages": _mended(request.messages)})


def _keeps_the_rules(messages: Sequence[Message]) -> bool:
    """The hot path: one pass, no allocation beyond the pending ids of the current turn."""
    pending: Sequence[ToolCall] = ()
    answered = 0
    for message in messages:
        if message.role == "tool":
            if answered >= len(pending) or pending[answered].id != message.tool_call_id:
                return False
            answered += 1
            continue
        if answered < len(pending):
            return False  # a message between a call and its result, or a call left unanswered
        if message.role == "assistant":
            pending, answered = message.tool_calls or (), 0
    return answered == len(pending)


def _mended(messages: Sequence[Message]) -> list[Message]:
    mended: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role == "tool":  # no assistant message with calls before it
            mended.append(_quoted(message))
            continue
        mended.append(message)
        calls = message.tool_calls if message.role == "assistant" else None
        if not calls:
            continue
        end = index
        while end < len(messages) and messages[end].role != "assistant":
            end += 1
        results: list[Message | None] = [None] * len(calls)
        after: list[Message] = []
        for later in messages[index:end]:
            slot = _slot(calls, results, later) if later.role == "tool" else None
            if slot is not None:
                results[slot] = later
            else:
                after.append(_quoted(later) if later.role == "tool" else later)
        mended.extend(result or _not_run(call) for result, call in zip(results, calls, strict=True))
        mended.extend(after)
        index = end
    return mended


def _slot(calls: Sequence[ToolCall], results: Sequence[Message | None], result: Message) -> int | None:
    """The first call with the result's id still unanswered (a caller may reuse an id in one message)."""
    for position, call in enumerate(calls):
        if results[position] is None and call.id == result.tool_call_id:
            return position
    return None


def _not_run(call: ToolCall) -> Message:
    return Message(role="tool", tool_call_id=call.id, content=NOT_RUN_RESULT, is_error=True)


def _quoted(result: Message) -> Message:
    failed = " (the tool failed)" if result.is_error else ""
    text = f"Result of tool call {result.tool_call_id}{failed}:\n{result.text or ''}"
    # The images of a result quoted as a user message stay with it, after its text.
    return Message(role="user", content=[TextPart(text=text), *result.images] if result.images else text)
