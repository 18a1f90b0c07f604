"""Fitting a run's conversation into its model's context window, before each LLM call.

The loop hands each round's call to ``ContextFitter.answered``. A conversation that clearly fits is sent as it is (one
sum of string lengths: ``agent_service.engine.tokens``). One that does not is cut down in what is SENT, never in what
is stored: first the results of old tool calls are trimmed (the run's own earlier rounds' too: only the current
round's stay whole, and each call keeps its result message); then the oldest turns are folded into a summary made by
the run's summary model through completion-service, sent first as "Summary of the earlier conversation: ...". The
system prompt, the last user message and the current round are never folded. A summary is kept in the run's state and
in the store (``RunPlan.summaries``), so the next run of the conversation starts from it: it is made once per growth
step, a later fold summarising the previous summary and the messages newly folded. A provider that still answers
``context_length_exceeded`` gets one harder fold and the call once more; then the run fails with that code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from agent_service.core.context import ContextSummary
from agent_service.core.errors import UpstreamError
from agent_service.core.run import LlmCall, RunPlan, RunRecorder
from agent_service.engine.state import RunState
from agent_service.engine.tokens import CHARS_PER_TOKEN, message_tokens, messages_tokens, tools_tokens
from agent_service.infra.peers import CompletionClient
from suite_common.logging import get_logger
from suite_common.wire import CompletionRequest, Message, RunContextCompacted, RunEvent, ToolSpec

__all__ = ["CONTEXT_LENGTH_EXCEEDED", "SUMMARY_PREFIX", "ContextFitter"]

_log = get_logger("agent_service.context")

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
SUMMARY_PREFIX = "Summary of the earlier conversation: "

_MARGIN = 0.9
"""The share of the window's room the estimate may fill: its error on prose and code is on the safe side, on dense
JSON not (``agent_service.engine.tokens``)."""
_HARDER = 0.6
"""The share after the provider refused a prompt as too long: the estimate was wrong by a lot, so aim low."""
_DEFAULT_ANSWER_TOKENS = 4_096
"""The room kept for the answer when the run sets no ``maxTokens`` (at most a quarter of the window)."""
_SUMMARY_TOKENS = 1_024
"""The most a summary may take (``maxTokens`` of the summary call; at most an eighth of the window)."""
_TRIMMED = "[This tool result was removed to fit the model's context window; it was {chars} characters long.]"
_SUMMARISE = (
    "You summarise the earlier part of a conversation between a user and an AI assistant that uses tools, so that "
    "the assistant can go on without it. Keep every fact, name, number, decision, open question and the user's "
    "goals and preferences; drop pleasantries. Answer with the summary only, in at most {words} words."
)

T = TypeVar("T")
Emit = Callable[[RunEvent], Awaitable[None]]


@dataclass
class _Fit:
    messages: list[Message]
    folded: int
    trimmed: int
    tokens: int


class ContextFitter:
    def __init__(self, completions: CompletionClient) -> None:
        self.completions = completions

    async def answered(
        self,
        plan: RunPlan,
        state: RunState,
        emit: Emit,
        recorder: RunRecorder | None,
        request: CompletionRequest,
        call: Callable[[CompletionRequest], Awaitable[T]],
    ) -> T:
        """``call(request)`` with the request's messages fitted to the window; once more, fitted harder, when the
        provider says they were too long anyway."""
        if plan.context_tokens is None:
            return await call(request)
        fitted = await self._fitted(plan, state, emit, recorder, request, _MARGIN)
        try:
            return await call(fitted)
        except UpstreamError as error:
            if error.code != CONTEXT_LENGTH_EXCEEDED:
                raise
            _log.info("context_refused_fold_harder", error=error.message)
        return await call(await self._fitted(plan, state, emit, recorder, request, _HARDER))

    async def _fitted(
        self,
        plan: RunPlan,
        state: RunState,
        emit: Emit,
        recorder: RunRecorder | None,
        request: CompletionRequest,
        share: float,
    ) -> CompletionRequest:
        window = plan.context_tokens
        assert window is not None
        answer = min(plan.max_tokens or _DEFAULT_ANSWER_TOKENS, window // 4)
        room = int((window - answer - _tools_tokens(state, request.tools or [])) * share)
        messages = request.messages
        # The system prompt the loop put first (``with_system_prompt``), which the conversation does not hold.
        offset = max(len(messages) - len(state.conversation), 0)
        memo = state.context
        before = messages_tokens(messages[:offset]) + _conversation_tokens(state)
        if before <= room and share == _MARGIN:
            return request
        if not memo.loaded and plan.summaries is not None:
            memo.loaded = True
            memo.summary = await plan.summaries.load()
        fit = await self._fold(plan, state, recorder, messages[:offset], room, share)
        if (fit.folded, fit.trimmed) != memo.told or share != _MARGIN:
            memo.told = (fit.folded, fit.trimmed)
            await emit(
                RunContextCompacted(
                    run_id=plan.run_id,
                    iteration=state.iterations,
                    messages_folded=fit.folded,
                    tokens_before=before,
                    tokens_after=fit.tokens,
                )
            )
        return request.model_copy(update={"messages": fit.messages})

    async def _fold(
        self,
        plan: RunPlan,
        state: RunState,
        recorder: RunRecorder | None,
        prompt: list[Message],
        room: int,
        share: float,
    ) -> _Fit:
        conversation = state.conversation
        head = 0
        while head < len(conversation) and conversation[head].role == "system":
            head += 1
        last_user = max((i for i, m in enumerate(conversation) if m.role == "user"), default=head)
        keep_from = max(last_user, head)
        current = _current_round(conversation, keep_from)
        fixed = messages_tokens(prompt) + messages_tokens(conversation[:head])
        memo = state.context
        summary = memo.summary
        covers = summary.covers if summary is not None and head <= summary.covers <= keep_from else head
        if summary is not None and covers == head:
            summary = None  # a summary of another conversation's length (the stored one outran this one): unused
        summary_room = min(_SUMMARY_TOKENS, room // 8)
        # Trim old tool results, then fold the oldest turns, until what is sent fits.
        tail = list(conversation[covers:])
        tail, trimmed = _trimmed(tail, current - covers, room - fixed - summary_room)
        if fixed + summary_room + messages_tokens(tail) > room or share != _MARGIN:
            cut = _cut(conversation, covers, keep_from, room - fixed - summary_room, share != _MARGIN)
            if cut > covers:
                summary = await self._summarise(plan, state, recorder, summary, conversation[covers:cut], cut, room)
                covers = cut
                tail, trimmed = _trimmed(list(conversation[covers:]), current - covers, room - fixed - summary_room)
        sent = [*prompt, *conversation[:head]]
        if summary is not None:
            sent.append(Message(role="user", content=SUMMARY_PREFIX + summary.summary))
        sent += tail
        return _Fit(sent, folded=covers - head, trimmed=trimmed, tokens=messages_tokens(sent))

    async def _summarise(
        self,
        plan: RunPlan,
        state: RunState,
        recorder: RunRecorder | None,
        previous: ContextSummary | None,
        folded: list[Message],
        covers: int,
        room: int,
    ) -> ContextSummary:
        """The summary of ``previous`` and ``folded``, made in as many calls as the messages need to fit the summary
        model's window (each call folds the summary so far and the next chunk), stored and kept in the run's state."""
        model = plan.summary_model or plan.model
        limit = min(_SUMMARY_TOKENS, room // 8)
        window = await self._summary_window(plan, state, model)
        chunk_room = int((window - limit - 600) * _MARGIN) if window is not None else room
        text = previous.summary if previous is not None else ""
        for chunk in _chunks(folded, max(chunk_room - limit, 512)):
            text = await self._summary_call(plan, state, recorder, model, text, chunk, limit)
        tokens = message_tokens(Message(role="user", content=text))
        made = ContextSummary(covers=covers, summary=text, tokens=tokens, model=model)
        state.context.summary = made
        if plan.summaries is not None:
            await plan.summaries.save(made)
        _log.info("context_summarised", covers=covers, tokens=made.tokens, model=model)
        return made

    async def _summary_window(self, plan: RunPlan, state: RunState, model: str) -> int | None:
        if model == plan.model:
            return plan.context_tokens
        if state.context.summary_window is None:
            resolved = await self.completions.check_model(model, plan.limits.deadline)
            state.context.summary_window = resolved.context_tokens or plan.context_tokens
        return state.context.summary_window

    async def _summary_call(
        self,
        plan: RunPlan,
        state: RunState,
        recorder: RunRecorder | None,
        model: str,
        previous: str,
        chunk: list[Message],
        limit: int,
    ) -> str:
        words = max(50, int(limit * 0.7))
        earlier = f"The summary of what came before:\n{previous}\n\n" if previous else ""
        request = CompletionRequest(
            model=model,
            messages=[
                Message(role="system", content=_SUMMARISE.format(words=words)),
                Message(role="user", content=f"{earlier}The conversation to summarise:\n\n{_transcript(chunk)}"),
            ],
            tool_choice="none",
            max_tokens=limit,
        )
        response = await self.completions.complete(request, plan.limits.deadline)
        state.usage += response.usage
        if plan.spending is not None:
            await plan.spending.spent(response.usage)
        if recorder is not None:  # logged with the run's next step, as the round's own call is
            call = LlmCall(model, response.provider, response.usage, answered_model=response.model)
            await recorder.cut_off(call, usage=state.usage)
        return (response.message.text or "").strip() or previous


def _conversation_tokens(state: RunState) -> int:
    """The conversation's tokens, counting only the messages added since the last round."""
    memo, conversation = state.context, state.conversation
    if len(conversation) < memo.counted:  # cut back (a resumed round): count it again
        memo.counted = memo.tokens = 0
    memo.tokens += messages_tokens(conversation[memo.counted :])
    memo.counted = len(conversation)
    return memo.tokens


def _tools_tokens(state: RunState, tools: list[ToolSpec]) -> int:
    """``tools_tokens(tools)``, counted once a run: the loop offers the same tool definitions every round."""
    memo = state.context
    known = memo.tools
    if known is None or len(known) != len(tools) or any(a is not b for a, b in zip(known, tools, strict=True)):
        memo.tools, memo.tools_tokens = list(tools), tools_tokens(tools)
    return memo.tools_tokens


def _current_round(conversation: list[Message], keep_from: int) -> int:
    """Where the current round starts: the assistant turn whose tool results end the conversation, else the last
    user message (``keep_from``). Only what comes before it may lose its tool results; the round's stay whole."""
    index = len(conversation) - 1
    while index > keep_from and conversation[index].role == "tool":
        index -= 1
    return max(index, keep_from)


def _trimmed(tail: list[Message], current: int, room: int) -> tuple[list[Message], int]:
    """``tail`` with its oldest tool results (before position ``current``, the current round's start) replaced by a
    note, oldest first, until it fits ``room``; and how many were."""
    total = messages_tokens(tail)
    trimmed = 0
    for index in range(max(current, 0)):
        if total <= room:
            break
        message = tail[index]
        if message.role != "tool" or not message.text:
            continue
        note = message.model_copy(update={"content": _TRIMMED.format(chars=len(message.text))})
        total += message_tokens(note) - message_tokens(message)
        tail[index] = note
        trimmed += 1
    return tail, trimmed


def _cut(conversation: list[Message], covers: int, keep_from: int, room: int, harder: bool) -> int:
    """Where the sent conversation starts after a fold: the first turn boundary (a message that is no tool result)
    from which the rest fits ``room``; ``keep_from`` at the latest. Harder: at least half of what is left."""
    sizes = [message_tokens(message) for message in conversation]
    rest = sum(sizes[covers:])
    least = covers + (keep_from - covers) // 2 if harder else covers
    for index in range(covers, keep_from + 1):
        if index >= least and rest <= room and conversation[index].role != "tool":
            return index
        rest -= sizes[index]
    return keep_from


def _chunks(messages: list[Message], room: int) -> list[list[Message]]:
    """``messages`` in consecutive chunks of at most ``room`` tokens each (a longer message alone, cut short)."""
    chunks: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for message in messages:
        tokens = message_tokens(message)
        if tokens > room:
            message = message.model_copy(
                update={"content": (message.text or "")[: int(room * CHARS_PER_TOKEN)] + " [...]"}
            )
            tokens = message_tokens(message)
        if current and size + tokens > room:
            chunks.append(current)
            current, size = [], 0
        current.append(message)
        size += tokens
    if current:
        chunks.append(current)
    return chunks


def _transcript(messages: list[Message]) -> str:
    lines = []
    for message in messages:
        text = message.text or ""
        for call in message.tool_calls or ():
            text += f"\n[calls {call.name} with {call.arguments}]"
        lines.append(f"{message.role}: {text}")
    return "\n\n".join(lines)
