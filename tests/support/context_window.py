"""The prompt size the scripted providers compare with a context window (``context_window=`` of each fake).

A provider counts with its own tokenizer; the fakes count a token per 4 characters of the request's text (every
string of its messages, system prompt and tools), about what OpenAI's and Anthropic's tokenizers give for English
prose (3.8 characters a token). It decides only when a fake refuses a prompt as too long, each in its provider's words.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHARS_PER_TOKEN", "prompt_tokens"]

CHARS_PER_TOKEN = 4


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_chars(item) for item in value.values())
    if isinstance(value, list):
        return sum(_chars(item) for item in value)
    return 0


def prompt_tokens(*parts: Any) -> int:
    """The tokens of ``parts`` (a request's messages, system prompt, tools: any JSON values)."""
    return sum(_chars(part) for part in parts) // CHARS_PER_TOKEN
