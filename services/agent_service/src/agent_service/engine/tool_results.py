"""How an MCP tool result becomes the text a model reads."""

from __future__ import annotations

import json
from typing import Any

from suite_common.wire import CallToolResponse

__all__ = ["render_tool_result", "truncate"]


def truncate(text: str, max_chars: int) -> str:
    """Cut ``text`` to ``max_chars`` with a marker the model (and the user) can see."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[... truncated: {len(text) - max_chars} more characters]"


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource":
        resource = block.get("resource") or {}
        return str(resource.get("text") or f"[resource {resource.get('uri', '')}]")
    if kind == "resource_link":
        return f"[link {block.get('uri', '')}]"
    if kind in ("image", "audio"):
        return f"[{kind} {block.get('mimeType', '')} omitted]"
    return f"[{kind} content omitted]"


def render_tool_result(result: CallToolResponse, max_chars: int) -> str:
    """Text blocks joined; structured content when there is no text; never empty."""
    text = "\n".join(_block_text(block) for block in result.content).strip()
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if not text:
        text = "(the tool returned no content)"
    return truncate(text, max_chars)
