"""What is known of a provider's model by its id: its context window, and whether it takes images.

One table for every provider (``KNOWN_MODELS``), read by ``facts_by_name``; a catalog entry's own ``contextTokens`` or
``images`` wins over it (``with_overrides``). A model the table does not know has ``None`` for both: unknown, so
agent-service does not fit its conversations to a window, and images are sent for the provider to decide.
Documented in docs/providers.md ("Context windows").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

__all__ = ["DEMO_FACTS", "KNOWN_MODELS", "UNKNOWN", "ModelFacts", "facts_by_name", "with_overrides"]


@dataclass(frozen=True)
class ModelFacts:
    context_tokens: int | None = None
    """The context window in tokens, input and output together; ``None``: unknown."""
    images: bool | None = None
    """The model takes images in user and tool messages; ``None``: unknown."""


UNKNOWN = ModelFacts()

DEMO_FACTS = ModelFacts(context_tokens=32_768, images=True)
"""The ``demo`` model: a small window, so that fitting a long conversation can be seen without a provider."""

# (provider kinds, pattern searched in the lower-cased model id, facts). The first match wins, so a narrower
# pattern comes before a wider one. Patterns allow a vendor prefix (Bedrock's ``us.anthropic.claude-...``, an
# OpenAI-compatible server's ``openai/gpt-4o``). Windows as the providers' model pages give them.
_OPENAI = ("openai", "openai-responses")
_ANTHROPIC = ("anthropic", "bedrock", "vertex")
_GEMINI = ("gemini", "vertex")
KNOWN_MODELS: tuple[tuple[tuple[str, ...], re.Pattern[str], ModelFacts], ...] = (
    (_OPENAI, re.compile(r"(^|[/.])gpt-5"), ModelFacts(400_000, True)),
    (_OPENAI, re.compile(r"(^|[/.])gpt-4\.1"), ModelFacts(1_047_576, True)),
    (_OPENAI, re.compile(r"(^|[/.])gpt-4\.5"), ModelFacts(128_000, True)),
    (_OPENAI, re.compile(r"(^|[/.])(chatgpt-)?gpt-4o|(^|[/.])chatgpt-4o"), ModelFacts(128_000, True)),
    (_OPENAI, re.compile(r"(^|[/.])gpt-4-(turbo|vision)"), ModelFacts(128_000, True)),
    (_OPENAI, re.compile(r"(^|[/.])gpt-4-32k"), ModelFacts(32_768, False)),
    (_OPENAI, re.compile(r"(^|[/.])gpt-4(-\d|$)"), ModelFacts(8_192, False)),
    (_OPENAI, re.compile(r"(^|[/.])gpt-3\.5-turbo"), ModelFacts(16_385, False)),
    (_OPENAI, re.compile(r"(^|[/.])o1-(mini|preview)"), ModelFacts(128_000, False)),
    (_OPENAI, re.compile(r"(^|[/.])o3-mini"), ModelFacts(200_000, False)),
    (_OPENAI, re.compile(r"(^|[/.])(o1|o3|o4)"), ModelFacts(200_000, True)),
    (_OPENAI, re.compile(r"(^|[/.])gpt-oss"), ModelFacts(131_072, False)),
    (_ANTHROPIC, re.compile(r"claude-(2|instant)|claude-v2"), ModelFacts(100_000, False)),
    (_ANTHROPIC, re.compile(r"claude-(3|[a-z]+-[3-9]|[4-9])"), ModelFacts(200_000, True)),
    (_ANTHROPIC, re.compile(r"claude-"), ModelFacts(None, True)),  # a newer Claude: images, its window unknown
    (_GEMINI, re.compile(r"(^|/)gemini-(1\.0-)?pro$"), ModelFacts(32_760, False)),
    (_GEMINI, re.compile(r"(^|/)gemini-1\.5-pro"), ModelFacts(2_097_152, True)),
    (_GEMINI, re.compile(r"(^|/)gemini-"), ModelFacts(1_048_576, True)),
    (("bedrock",), re.compile(r"amazon\.nova-micro"), ModelFacts(128_000, False)),
    (("bedrock",), re.compile(r"amazon\.nova-(lite|pro)"), ModelFacts(300_000, True)),
    (("bedrock",), re.compile(r"amazon\.nova-premier"), ModelFacts(1_000_000, True)),
    (("bedrock",), re.compile(r"amazon\.titan-text"), ModelFacts(None, False)),
    (("bedrock",), re.compile(r"meta\.llama3-2-(11|90)b"), ModelFacts(128_000, True)),
    (("bedrock",), re.compile(r"meta\.llama4"), ModelFacts(None, True)),
    (("bedrock",), re.compile(r"mistral\.pixtral"), ModelFacts(128_000, True)),
    (("bedrock",), re.compile(r"meta\.llama3-[1-3]"), ModelFacts(128_000, False)),
    (("bedrock",), re.compile(r"meta\.llama|mistral\.|cohere\.command|ai21\.|deepseek\."), ModelFacts(None, False)),
)


def facts_by_name(kind: str, upstream_model: str) -> ModelFacts:
    """The known facts of a provider's model by its provider kind and id; ``UNKNOWN`` for a model not in the table."""
    if kind == "demo":
        return DEMO_FACTS
    model = upstream_model.lower()
    for kinds, pattern, facts in KNOWN_MODELS:
        if kind in kinds and pattern.search(model):
            return facts
    return UNKNOWN


def with_overrides(facts: ModelFacts, *, context_tokens: int | None, images: bool | None) -> ModelFacts:
    """``facts`` with what a catalog entry says itself (``None``: the entry says nothing of it)."""
    if context_tokens is not None:
        facts = replace(facts, context_tokens=context_tokens)
    if images is not None:
        facts = replace(facts, images=images)
    return facts
