"""What every provider adapter offers: one completion, whole or streamed, in the neutral shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from completion_service.providers._images import ImageInput
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

__all__ = ["Provider", "events_of"]


class Provider(Protocol):
    """One provider wire format behind the neutral completion contract.

    Failures are raised as ``suite_common.errors.ApiError``, translated once by the adapter.
    ``timeout_seconds`` is the whole budget of the call in seconds, retries and streaming included.
    """

    @property
    def name(self) -> str:
        """Reported as ``provider`` in responses and ``done`` events."""
        ...

    @property
    def image_input(self) -> ImageInput:
        """How the provider takes images in messages (``ImageInput``): ``bytes`` ones get their ``https``
        images as ``data:`` URLs (fetched before the call), ``none`` ones no images at all."""
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
    if message.text:
        events.append(TextDelta(delta=message.text))
    events.extend(ToolCallEvent(**dict(call)) for call in message.tool_calls or [])  # the same fields
    events.append(
        CompletionDone(
            finish_reason=response.finish_reason,
            usage=response.usage,
            model=response.model,
            provider=response.provider,
            warnings=response.warnings,
        )
    )
    return events
