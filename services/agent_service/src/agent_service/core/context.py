"""A conversation's summary as the context fitter makes it and the store keeps it (``conversation_summaries``).

No I/O: ``SummaryStore`` is where a run reads and writes its conversation's summary (the runs layer binds it to the
run store, the run's tenant and conversation); the fitter (``agent_service.engine.context``) makes the summaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from suite_common.wire import ToolSpec

__all__ = ["ContextSummary", "FitMemo", "SummaryStore"]


@dataclass(frozen=True)
class ContextSummary:
    """The summary of a conversation's first ``covers`` messages, sent in their place once they no longer fit."""

    covers: int
    """How many of the conversation's messages, from its first, it stands for."""
    summary: str
    tokens: int
    """Its own size in tokens, as counted when it was made."""
    model: str
    """The model that made it."""


class SummaryStore(Protocol):
    """The stored summary of one conversation: read once by a run that needs it, written when a fold makes one."""

    async def load(self) -> ContextSummary | None: ...

    async def save(self, summary: ContextSummary) -> None: ...


@dataclass
class FitMemo:
    """What a run knows of its conversation's fitting, kept in its ``RunState`` from round to round."""

    summary: ContextSummary | None = None
    loaded: bool = False
    """The stored summary was read (once per run)."""
    told: tuple[int, int] = (0, 0)
    """The messages folded and tool results trimmed the last compaction event told of: each round that sends the
    same does not tell it again."""
    summary_window: int | None = None
    """The summary model's window, when it is not the run's model (asked once)."""
    counted: int = 0
    """How many of the conversation's first messages ``tokens`` counts: a run's conversation only grows, so each
    round counts only its new messages."""
    tokens: int = 0
    tools: list[ToolSpec] | None = None
    """The tool definitions ``tools_tokens`` counts (the loop sends the same ones each round: counted once a run;
    kept by reference, so the same objects are recognised however the request copied its list)."""
    tools_tokens: int = 0
