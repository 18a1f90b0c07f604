"""A tool's result as the ``call-tool`` answer, within the size cap.

The cap (``max_chars``) bounds the content as it goes out: every block costs its JSON (its type,
its other fields), not only its text, so that a result of 100,000 tiny blocks is bounded too.
Text (a text block, an embedded text resource) is cut where the budget ends, with a marker saying
how much was left out; a block that cannot be cut (an image, audio, a binary resource) and does
not fit is replaced by a marker. Once the budget is spent, the blocks left are dropped and ONE
marker says how many. ``structuredContent`` larger than ``max_chars`` is left out whole (a cut
JSON object would be invalid), with a marker, as the text content carries the same result.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types import CallToolResult, ContentBlock, EmbeddedResource, TextContent, TextResourceContents

from suite_common.wire import CallToolResponse

__all__ = ["dump_content", "error_result", "to_response"]


def _marker(left_out: str, max_chars: int) -> str:
    return f"[... cut here: {left_out} left out of this tool result (limit {max_chars} characters)]"


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _cut_text(
    dumped: dict[str, Any], path: tuple[str, ...], budget: int, max_chars: int
) -> tuple[dict[str, Any], int] | None:
    """``dumped`` with the text at ``path`` cut to what ``budget`` leaves after the block's own JSON.

    Returns the block and what it cost (a block that fits is returned as it is), or ``None``
    when not a character of its text fits.
    """
    holder = dumped
    for key in path[:-1]:
        holder = holder[key]
    text: str = holder[path[-1]]
    holder[path[-1]] = ""
    overhead = _json_size(dumped)
    holder[path[-1]] = text
    room = budget - overhead
    if len(text) <= room:
        return dumped, overhead + len(text)
    if room <= 0:
        return None
    holder[path[-1]] = text[:room] + "\n" + _marker(f"{len(text) - room} more characters", max_chars)
    return dumped, budget


def _fit(block: ContentBlock, budget: int, max_chars: int) -> tuple[dict[str, Any], int] | None:
    """The block as JSON within ``budget`` and what it costs, or ``None`` when nothing of it fits."""
    dumped = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(block, TextContent):
        return _cut_text(dumped, ("text",), budget, max_chars)
    if isinstance(block, EmbeddedResource) and isinstance(block.resource, TextResourceContents):
        return _cut_text(dumped, ("resource", "text"), budget, max_chars)
    # A block that cannot be cut (an image, audio, a binary resource) fits whole, or a marker takes its place.
    size = _json_size(dumped)
    if size <= budget:
        return dumped, size
    what = f"{'an' if block.type[0] in 'aeiou' else 'a'} {block.type} block of {size} characters"
    marker = {"type": "text", "text": _marker(what, max_chars)}
    return marker, _json_size(marker)


def dump_content(result: CallToolResult, max_chars: int) -> list[dict[str, Any]]:
    """The content blocks as JSON, within ``max_chars`` in total, each cut marked as such."""
    blocks: list[dict[str, Any]] = []
    budget = max_chars
    content = result.content
    for index, block in enumerate(content):
        fitted = _fit(block, budget, max_chars) if budget > 0 else None
        if fitted is None:
            left = len(content) - index
            what = "1 more content block" if left == 1 else f"{left} more content blocks"
            blocks.append({"type": "text", "text": _marker(what, max_chars)})
            break
        dumped, cost = fitted
        budget -= cost + 1  # and the comma between blocks
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
