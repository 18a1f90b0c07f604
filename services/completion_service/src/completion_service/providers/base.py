"""What every provider adapter offers: one completion, whole or streamed, in the neutral shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from suite_common.wire import CompletionEvent, CompletionRequest, CompletionResponse

__all__ = ["Provider"]


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
