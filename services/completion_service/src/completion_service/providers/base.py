"""What every provider adapter offers: one completion, whole or streamed, in the neutral shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from completion_service.providers.tool_names import NameRule, ToolNames
from completion_service.providers.tool_turns import repaired
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallEvent,
)

__all__ = ["Prepared", "Provider", "events_of"]


class Provider(Protocol):
    """One provider wire format behind the neutral completion contract.

    Failures are raised as ``suite_common.errors.ApiError``, translated once by the adapter.
    ``timeout_seconds`` is the whole budget of the call in seconds, retries and streaming included.
    """

    @property
    def name(self) -> str:
        """Reported as ``provider`` in responses and ``done`` events."""
        ...

    async def complete(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> CompletionResponse:
        """The whole answer of one model turn."""
        ...

    def stream(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> AsyncIterator[CompletionEvent]:
        """Text deltas as they come, each tool call once complete, then one ``done``."""
        ...


def events_of(response: CompletionResponse) -> list[CompletionEvent]:
    """A whole answer as the events a stream of it would have given: reasoning, text, tool calls, ``done``.

    For servers that answer a streamed request with one JSON body where their format allows it.
    """
    message = response.message
    events: list[CompletionEvent] = []
    for block in message.reasoning or []:
        if block.text:
            events.append(ReasoningDelta(delta=block.text))
        events.append(ReasoningBlockEvent(block=block))
    if message.content:
        events.append(TextDelta(delta=message.content))
    events.extend(ToolCallEvent(**dict(call)) for call in message.tool_calls or [])  # the same fields
    events.append(
        CompletionDone(
            finish_reason=response.finish_reason, usage=response.usage, model=response.model, provider=response.provider
        )
    )
    return events


class Prepared:
    """``provider`` behind the steps every request takes before any wire format, so that one conversation
    means the same to every provider: its tool calls answered and its results placed (``tool_turns``), and
    tool names ``rule`` accepts (``tool_names``: the model's calls come back under the caller's names).
    A request that needs neither goes straight through: no copy, no extra stream layer."""

    def __init__(self, provider: Provider, rule: NameRule) -> None:
        self.provider = provider
        self.rule = rule

    @property
    def name(self) -> str:
        return self.provider.name

    async def complete(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> CompletionResponse:
        request = repaired(request)
        names = ToolNames.plan(request, self.rule)
        if names is None:
            return await self.provider.complete(request, upstream_model, timeout_seconds)
        response = await self.provider.complete(names.outbound(request), upstream_model, timeout_seconds)
        return names.inbound(response)

    def stream(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> AsyncIterator[CompletionEvent]:
        request = repaired(request)
        names = ToolNames.plan(request, self.rule)
        if names is None:
            return self.provider.stream(request, upstream_model, timeout_seconds)
        return _renamed(self.provider.stream(names.outbound(request), upstream_model, timeout_seconds), names)


async def _renamed(events: AsyncIterator[CompletionEvent], names: ToolNames) -> AsyncIterator[CompletionEvent]:
    try:
        async for event in events:
            yield names.inbound_event(event)
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:  # the provider's stream holds a connection: close it with this one
            await aclose()
