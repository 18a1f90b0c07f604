"""The generation controls a model can take (``reasoning``, ``verbosity``), and what happens to those it cannot.

Which model takes what is said by its catalog entry (``reasoning``, ``verbosity``) or, for a model outside the
catalog, by its name's family (``controls_by_name``, documented in docs/providers.md). A control the answering model
cannot take is taken out of the request before its adapter sees it, and the answer says so in ``warnings``: never
a failed call. This is done per model of a fallback chain, so a fallback that cannot reason gets its own warning.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    ReasoningEffort,
)

__all__ = [
    "NO_CONTROLS",
    "THINKING_BUDGETS",
    "ModelControls",
    "controls_by_name",
    "fitted",
    "hides_reasoning_text",
    "thinking_budget",
    "with_warnings",
    "without_reasoning_text",
    "without_reasoning_text_events",
]

Answer = TypeVar("Answer", CompletionResponse, CompletionDone)

THINKING_BUDGETS: dict[ReasoningEffort, int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
"""Tokens of thinking budget per effort, for the providers that take a budget rather than an effort (Anthropic's
``budget_tokens``, Gemini's ``thinkingBudget``). 1024 is Anthropic's least budget; 24576 is within every Gemini 2.5
model's range (Pro 128-32768, Flash 0-24576, Flash-Lite 512-24576)."""


@dataclass(frozen=True)
class ModelControls:
    """What one model takes of the generation controls."""

    reasoning: bool = False
    """It can reason: ``reasoning`` reaches its adapter."""
    verbosity: bool = False
    """It takes OpenAI's ``verbosity``."""


NO_CONTROLS = ModelControls()

# Families by the model's own id, with or without a vendor prefix (Bedrock's ``us.anthropic.claude-...``, an
# OpenAI-compatible server's ``openai/gpt-oss-20b``).
_OPENAI_REASONING = re.compile(r"(^|[/.])(o1|o3|o4|gpt-5|gpt-oss)")
_OPENAI_VERBOSITY = re.compile(r"(^|[/.])gpt-5")
_CLAUDE_REASONING = re.compile(r"claude-(3-7-|[a-z]+-4|[a-z]+-[5-9]|4|[5-9])")
_GEMINI_REASONING = re.compile(r"(^|/)gemini-(2\.5|[3-9])")


def controls_by_name(kind: str, upstream_model: str) -> ModelControls:
    """The controls of a model outside the catalog, by its provider kind and its family: OpenAI's o1, o3, o4,
    gpt-5 and gpt-oss reason and gpt-5 takes verbosity; Anthropic's (and Bedrock's) Claude 3.7 and 4 or later
    reason; Gemini 2.5 and later reason. Others take neither."""
    model = upstream_model.lower()
    if kind in ("openai", "openai-responses"):  # one model family, whichever OpenAI wire format it is asked through
        return ModelControls(
            reasoning=bool(_OPENAI_REASONING.search(model)), verbosity=bool(_OPENAI_VERBOSITY.search(model))
        )
    if kind in ("anthropic", "bedrock"):
        return ModelControls(reasoning=bool(_CLAUDE_REASONING.search(model)))
    if kind in ("gemini", "vertex"):
        return ModelControls(reasoning=bool(_GEMINI_REASONING.search(model)))
    return NO_CONTROLS


def fitted(request: CompletionRequest, controls: ModelControls) -> tuple[CompletionRequest, list[str]]:
    """``request`` without the controls the model cannot take, and a sentence for each one taken out."""
    warnings: list[str] = []
    update: dict[str, object] = {}
    if request.reasoning is not None and not controls.reasoning:
        update["reasoning"] = None
        warnings.append(f"reasoning ignored: the model {request.model!r} cannot reason.")
    if request.verbosity is not None and not controls.verbosity:
        update["verbosity"] = None
        warnings.append(f"verbosity ignored: the model {request.model!r} does not take it.")
    return (request.model_copy(update=update) if update else request), warnings


def with_warnings(answer: Answer, warnings: list[str]) -> Answer:
    """``answer`` with ``warnings`` added to its own."""
    if not warnings:
        return answer
    return answer.model_copy(update={"warnings": [*(answer.warnings or []), *warnings]})


def thinking_budget(request: CompletionRequest, default: int | None) -> int | None:
    """The thinking budget of a provider that takes one: the effort's (``THINKING_BUDGETS``), else ``default``
    (the operator's setting); ``None``: no thinking."""
    effort = request.reasoning.effort if request.reasoning is not None else None
    return THINKING_BUDGETS[effort] if effort is not None else default


def hides_reasoning_text(request: CompletionRequest) -> bool:
    """``summary: "none"``: no reasoning text back."""
    return request.reasoning is not None and request.reasoning.summary == "none"


def _kept(block: ReasoningBlock) -> bool:
    # Signed and redacted blocks go back to the provider in the next round of a tool loop (Anthropic requires
    # it): they are kept, the rest of the reasoning text is not.
    return block.signature is not None or block.redacted_data is not None


def without_reasoning_text(response: CompletionResponse) -> CompletionResponse:
    """The answer of a request with ``summary: "none"``: without the reasoning it need not carry back
    (see ``_kept``)."""
    if not response.message.reasoning:
        return response
    kept = [block for block in response.message.reasoning if _kept(block)]
    message = response.message.model_copy(update={"reasoning": kept or None})
    return response.model_copy(update={"message": message})


async def without_reasoning_text_events(events: AsyncIterator[CompletionEvent]) -> AsyncIterator[CompletionEvent]:
    """The stream of a request with ``summary: "none"``: no ``reasoning`` deltas, only the blocks that must go back
    (see ``_kept``)."""
    try:
        async for event in events:
            if isinstance(event, ReasoningDelta) or (isinstance(event, ReasoningBlockEvent) and not _kept(event.block)):
                continue
            yield event
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
