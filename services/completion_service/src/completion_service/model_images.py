"""Which models take images in messages, by provider and model id (a catalog entry's ``images`` overrides it).

``True``: the model takes images; ``False``: it does not, and a request with images gets 400
``images_not_supported`` before any call; ``None``: unknown (a compatible server's model): images are sent and the
provider decides. The first pattern of the provider's list that matches the model id (searched, lower case) wins.
"""

from __future__ import annotations

import re

__all__ = ["takes_images"]

_Rules = tuple[tuple[re.Pattern[str], bool], ...]


def _rules(*rows: tuple[str, bool]) -> _Rules:
    return tuple((re.compile(pattern), images) for pattern, images in rows)


_OPENAI = _rules(
    (r"(^|/)(gpt-3\.5|o1-mini|o1-preview|o3-mini|gpt-4-32k|gpt-4-0613|gpt-4-0314|gpt-4$)", False),
    (r"(^|/)(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|o1|o3|o4)", True),
)
_CLAUDE = _rules(
    (r"claude-(2|instant)", False),
    (r"claude-", True),  # Claude 3 and later all take images
)
_GEMINI = _rules(
    (r"(^|/)gemini-(1\.0-)?pro$", False),  # Gemini 1.0 Pro: text only (gemini-pro-vision took images)
    (r"(^|/)gemini-", True),
)
_BEDROCK = _rules(
    (r"anthropic\.claude-(v2|instant)", False),
    (r"anthropic\.claude-", True),
    (r"amazon\.nova-micro", False),
    (r"amazon\.nova-(lite|pro|premier)", True),
    (r"amazon\.titan-text", False),
    (r"meta\.llama3-2-(11|90)b", True),
    (r"meta\.llama4", True),
    (r"mistral\.pixtral", True),
    (r"(meta\.llama|mistral\.|cohere\.command|ai21\.|deepseek\.)", False),
)

_BY_KIND: dict[str, _Rules] = {
    "openai": _OPENAI,
    "openai-responses": _OPENAI,
    "anthropic": _CLAUDE,
    "gemini": _GEMINI,
    "vertex": _GEMINI,
    "bedrock": _BEDROCK,
}


def takes_images(kind: str, model: str) -> bool | None:
    """Whether ``model`` (the provider's id) of the provider ``kind`` (``openai``, ``anthropic``, ...; ``demo``)
    takes images: ``None`` when the table does not know it."""
    if kind == "demo":
        return True
    model = model.lower()
    for pattern, images in _BY_KIND.get(kind, ()):
        if pattern.search(model):
            return images
    return None
