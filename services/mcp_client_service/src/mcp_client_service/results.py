"""A tool's result as the ``call-tool`` answer, within the size cap.

Text beyond ``max_chars`` (a text block, an embedded text resource) is cut where the budget
ends, with a marker saying how much was left out; a block that cannot be cut (an image, audio,
a binary resource) and does not fit is replaced by a marker; ``structuredContent`` larger than
``max_chars`` is left out whole (a cut JSON object would be invalid), with a marker, as the
text content carries the same result.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types import CallToolResult, EmbeddedResource, TextContent, TextResourceContents

from suite_common.wire import CallToolResponse

__all__ = ["dump_content", "error_result", "to_response"]


def _marker(left_out: str, max_chars: int) -> str:
    return f"[... cut here: {left_out} left out of this tool result (limit {max_chars} characters)]"


def dump_content(result: CallToolResult, max_chars: int) -> list[dict[str, Any]]:
    """The content blocks as JSON, within ``max_chars`` in total, each cut marked as such.

    Text (a text block, an embedded text resource) is cut where the budget ends. A block that
    cannot be cut (an image, audio, a binary resource) and does not fit is replaced by a text
    block saying what was left out.
    """
    blocks: list[dict[str, Any]] = []
    budget = max_chars
    for block in result.content:
        dumped = block.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(block, TextContent):
            text = block.text
            if len(text) > budget:
                dumped["text"] = text[:budget] + "\n" + _marker(f"{len(text) - budget} more characters", max_chars)
            budget = max(0, budget - len(text))
        elif isinstance(block, EmbeddedResource) and isinstance(block.resource, TextResourceContents):
            text = block.resource.text
            if len(text) > budget:
                dumped["resource"]["text"] = (
                    text[:budget] + "\n" + _marker(f"{len(text) - budget} more characters", max_chars)
                )
            budget = max(0, budget - len(text))
        else:
            size = len(json.dumps(dumped))
            if size > budget:
                what = f"{'an' if block.type[0] in 'aeiou' else 'a'} {block.type} block of {size} characters"
                dumped = {"type": "text", "text": _marker(what, max_chars)}
            budget = max(0, budget - size)
        blocks.append(dumped)
    return blocks


def _structured(result: CallToolResult) -> dict[str, Any] | None:
    structured = result.structured_content
    if structured is None or isinstance(structured, dict):
        return structured
    # 2026-07-28 allows any JSON value; the wire carries an object, as MCPServer wraps one.
    return {"result": structured}


def to_response(result: CallToolResult, *, server: str, duration_ms: float, max_chars: int) -> CallToolResponse:
    content = dump_content(result, max_chars)
    structured = _structured(result)
    if structured is not None:
        size = len(json.dumps(structured, default=str))
        if size > max_chars:
            # A cut JSON object would be invalid, so it is left out whole; servers send the same
            # result as text too (the spec asks them to), and that text is cut with a marker.
            structured = None
            content.append({"type": "text", "text": _marker(f"structuredContent of {size} characters", max_chars)})
    return CallToolResponse(
        content=content, structured_content=structured, is_error=result.is_error, server=server, duration_ms=duration_ms
    )


def error_result(text: str, *, server: str, duration_ms: float) -> CallToolResponse:
    return CallToolResponse(
        content=[{"type": "text", "text": text}], is_error=True, server=server, duration_ms=duration_ms
    )
