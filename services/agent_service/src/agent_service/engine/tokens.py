"""How many tokens a conversation takes, estimated from its characters (no tokenizer).

No tokenizer is used: OpenAI's (tiktoken) downloads its tables at run time, and Anthropic's and Google's are not
published. The estimate is calibrated against OpenAI's ``o200k_base`` encoding: the suite's own docs (English prose
with Markdown) run at 3.76 characters a token, Python at 4.43, dense JSON at 2.26. ``CHARS_PER_TOKEN`` = 3 counts
prose and code high by 20-30% and dense JSON low by about 25%; the fitter keeps a margin (``agent_service.engine
.context``), and a provider that still finds a prompt too long gets a harder fold (docs/agent-api.md, "Long
conversations"). Counting is a sum of string lengths: a conversation of a thousand messages takes well under a
millisecond.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from suite_common.wire import Message, ToolSpec

__all__ = ["CHARS_PER_TOKEN", "IMAGE_TOKENS", "message_tokens", "messages_tokens", "tools_tokens"]

CHARS_PER_TOKEN = 3.0
MESSAGE_TOKENS = 4
"""What a message costs besides its content (its role, the separators of the chat format)."""
IMAGE_TOKENS = 1_000
"""An image part, whatever its size: OpenAI counts 765 for a 1024x1024 image in high detail, Anthropic about 1,600
for the largest it takes unscaled; an image is rarely what fills a window."""


def message_tokens(message: Message) -> int:
    chars = len(message.text or "")
    for call in message.tool_calls or ():
        chars += len(call.name) + len(json.dumps(call.arguments)) + 16
    images = len(message.images) if isinstance(message.content, list) else 0
    return MESSAGE_TOKENS + int(chars / CHARS_PER_TOKEN) + images * IMAGE_TOKENS


def messages_tokens(messages: Iterable[Message]) -> int:
    return sum(message_tokens(message) for message in messages)


def tools_tokens(tools: Iterable[ToolSpec]) -> int:
    """The tool definitions sent with every call (names, descriptions, schemas)."""
    return sum(
        int((len(tool.name) + len(tool.description or "") + len(json.dumps(tool.input_schema))) / CHARS_PER_TOKEN) + 8
        for tool in tools
    )
