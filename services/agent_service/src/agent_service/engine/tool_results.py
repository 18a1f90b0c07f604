"""How an MCP tool result becomes what a model reads: its text, and its images as image parts."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from agent_service.core.images import IMAGE_MEDIA_TYPES, DecodedImage, data_url
from suite_common.wire import CallToolResponse, ContentPart, ImagePart, ImageUrl, TextPart

__all__ = ["tool_result_content", "truncate"]


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


def _image(block: dict[str, Any]) -> DecodedImage | None:
    """An MCP ``image`` block (base64 ``data``, ``mimeType``) of a type every provider takes; ``None`` otherwise."""
    media_type, data = block.get("mimeType"), block.get("data")
    if block.get("type") != "image" or media_type not in IMAGE_MEDIA_TYPES or not isinstance(data, str):
        return None
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return DecodedImage(str(media_type), decoded) if decoded else None


def tool_result_content(
    result: CallToolResponse, max_chars: int, *, image_room: int
) -> tuple[str | list[ContentPart], int]:
    """The tool message's content and its images' bytes. The content: the text (text blocks joined; structured
    content when there is none; never empty), or, when the result has images that fit in ``image_room`` bytes
    together, content parts (the text, then the images as ``data:`` URLs). An image past the room, or of a type not
    passed on, is said in the text (``[image ... omitted]``)."""
    texts: list[str] = []
    images: list[DecodedImage] = []
    used = 0
    for block in result.content:
        image = _image(block)
        if image is not None and used + len(image.data) <= image_room:
            images.append(image)
            used += len(image.data)
        else:
            texts.append(_block_text(block))
    text = "\n".join(texts).strip()
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if not images:
        return truncate(text or "(the tool returned no content)", max_chars), 0
    parts: list[ContentPart] = [TextPart(text=truncate(text, max_chars))] if text else []
    parts += [ImagePart(image_url=ImageUrl(url=data_url(image))) for image in images]
    return parts, used
