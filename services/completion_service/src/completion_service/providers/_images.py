"""Images in messages as every adapter reads them (pure): a ``data:`` URL's media type and base64 payload.

The neutral shape is OpenAI's (``{"type": "image_url", "image_url": {"url"}}``); the URL is ``https://`` or
``data:image/<png|jpeg|gif|webp>;base64,<data>``. By the time an adapter that needs bytes sees a request, its
``https`` images were fetched into ``data:`` URLs (``completion_service.images``), so each adapter only splits a
``data:`` URL into what its wire format names ``media_type``/``mimeType``/``format`` and the base64 text.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from suite_common.wire import ContentPart, Message

__all__ = [
    "IMAGE_MEDIA_TYPES",
    "DataImage",
    "ImageInput",
    "data_image",
    "parts_of",
    "tool_images_note",
    "with_tool_images",
]

ImageInput = Literal["url", "bytes", "none"]
"""How an adapter takes images: ``url`` (``https`` URLs and ``data:`` URLs as they are: OpenAI, Anthropic),
``bytes`` (only the bytes: ``https`` images are fetched first: Gemini, Bedrock, the demo), ``none``."""

IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types every provider takes (OpenAI, Anthropic, Gemini and Bedrock's Converse share these four)."""

_DATA_URL = re.compile(r"data:(?P<type>[a-zA-Z0-9.+/-]+);base64,(?P<data>.*)", re.DOTALL)


@dataclass(frozen=True)
class DataImage:
    """A ``data:`` URL's image: its media type (``image/png``) and its bytes in base64, as in the URL."""

    media_type: str
    base64_data: str

    @property
    def format(self) -> str:
        """The media type's subtype (``png``, ``jpeg``): Bedrock's ``format``."""
        return self.media_type.partition("/")[2]

    @property
    def size(self) -> int:
        """The image's size in bytes (from the base64 length: nothing decoded)."""
        return len(self.base64_data) * 3 // 4 - self.base64_data[-2:].count("=")

    @property
    def url(self) -> str:
        """The image as a ``data:`` URL."""
        return f"data:{self.media_type};base64,{self.base64_data}"

    @classmethod
    def of(cls, media_type: str, content: bytes) -> DataImage:
        return cls(media_type, base64.b64encode(content).decode("ascii"))

    def decoded(self) -> bytes:
        return base64.b64decode(self.base64_data, validate=True)


def data_image(url: str) -> DataImage | None:
    """The image of a ``data:image/...;base64,`` URL; ``None`` for any other URL.

    Raises ``ValueError`` (its message fit for a caller) for a ``data:`` URL that is not a base64 image of
    ``IMAGE_MEDIA_TYPES`` or whose base64 does not decode.
    """
    if not url.startswith("data:"):
        return None
    match = _DATA_URL.fullmatch(url)
    if match is None:
        raise ValueError("an image data: URL is data:image/<png|jpeg|gif|webp>;base64,<data>")
    media_type = match["type"].lower()
    if media_type not in IMAGE_MEDIA_TYPES:
        raise ValueError(f"image type {media_type} is not taken; send PNG, JPEG, GIF or WebP")
    data = "".join(match["data"].split())  # line breaks some encoders put in base64
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the image data: URL's base64 does not decode") from None
    return DataImage(media_type, data)


def parts_of(message: Message) -> list[ContentPart]:
    """A message's content parts, text and images in order (none for plain text content)."""
    return message.content if isinstance(message.content, list) else []


def tool_images_note(message: Message) -> str:
    """The text that introduces a tool result's images where the format has no images in tool results (OpenAI):
    they follow in a user message, which says whose they are."""
    return f"Images returned by the tool call {message.tool_call_id}:"


def with_tool_images(messages: Sequence[Message]) -> Iterator[Message | list[Message]]:
    """The messages in order and, right after each run of tool messages, the list of those that carry images: where
    a format takes no images in tool results (OpenAI) or pairs results with calls by position (Gemini), the images
    follow the round's results together, never between them."""
    held: list[Message] = []
    for message in messages:
        if held and message.role != "tool":
            yield held
            held = []
        yield message
        if message.role == "tool" and message.images:
            held.append(message)
    if held:
        yield held
