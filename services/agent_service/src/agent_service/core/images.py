"""Images in a run's messages: the URLs a caller may send, and the stored form (by reference). Pure: no I/O.

A caller sends an image as an ``https`` URL or a ``data:image/<png|jpeg|gif|webp>;base64,...`` URL. A stored run keeps
a ``data:`` image once, by content, in its tenant's images (``store``), and its messages say
``/api/v1/agent/images/<sha256>`` instead (``by_reference``): a conversation's JSON stays small, and an image sent
again costs nothing more. Before each LLM call the references become ``data:`` URLs again (``engine.images``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from suite_common.errors import ApiError
from suite_common.wire import ImagePart, ImageUrl, Message

__all__ = [
    "DEFAULT_RUN_IMAGES_MAX_BYTES",
    "IMAGE_MEDIA_TYPES",
    "IMAGE_PATH",
    "DecodedImage",
    "by_reference",
    "check_images",
    "data_url",
    "decode_data_url",
    "has_images",
    "image_reference",
    "messages_by_reference",
    "referenced_sha",
]

IMAGE_PATH = "/api/v1/agent/images/"
"""Where a stored image is served (``GET``, its tenant's keys only), and the prefix of its reference in messages."""

DEFAULT_RUN_IMAGES_MAX_BYTES = 20 * 1024 * 1024
"""``AGENT_RUN_IMAGES_MAX_BYTES``'s default: what one run's images may hold together."""

IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types every provider with images takes."""

_DATA_URL = re.compile(r"data:(image/[a-z0-9.+-]+);base64,(.*)", re.DOTALL)
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class DecodedImage:
    media_type: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def decode_data_url(url: str) -> DecodedImage | None:
    """The image of a ``data:`` URL; ``None`` for another URL. Raises ``ValueError`` (saying why) for a ``data:`` URL
    that is not a base64 image of an accepted type."""
    if not url.startswith("data:"):
        return None
    match = _DATA_URL.fullmatch(url)
    if match is None:
        raise ValueError("a data: URL must be data:image/<type>;base64,<data>")
    media_type = match.group(1)
    if media_type not in IMAGE_MEDIA_TYPES:
        raise ValueError(f"image type {media_type} is not accepted ({', '.join(sorted(IMAGE_MEDIA_TYPES))})")
    try:
        data = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the data: URL's data is not valid base64") from None
    if not data:
        raise ValueError("the data: URL holds no data")
    return DecodedImage(media_type, data)


def data_url(image: DecodedImage) -> str:
    return f"data:{image.media_type};base64,{base64.b64encode(image.data).decode('ascii')}"


def image_reference(sha256: str) -> str:
    return f"{IMAGE_PATH}{sha256}"


def referenced_sha(url: str) -> str | None:
    """The sha256 a stored reference names; ``None`` for any other URL."""
    if not url.startswith(IMAGE_PATH):
        return None
    sha = url[len(IMAGE_PATH) :]
    return sha if _SHA256.fullmatch(sha) else None


def has_images(messages: Iterable[Message]) -> bool:
    """Cheap: no message with content parts, no image (a run without images pays this scan only)."""
    return any(not isinstance(message.content, str | None) and message.images for message in messages)


def check_images(messages: list[Message], max_bytes: int) -> None:
    """The request's images: each an ``https`` or ``data:image`` URL (400 ``invalid_request`` naming the message),
    together at most ``max_bytes`` decoded (413 ``images_too_large``)."""
    total = 0
    for index, message in enumerate(messages):
        for part in message.images:
            url = part.image_url.url
            where = f"messages.{index}: image_url"
            try:
                image = decode_data_url(url)
            except ValueError as error:
                raise ApiError(400, "invalid_request", f"{where}: {error}.") from None
            if image is None and not url.startswith("https://"):
                raise ApiError(
                    400, "invalid_request", f"{where}: the URL must be https:// or data:image/<type>;base64,<data>."
                )
            total += len(image.data) if image is not None else 0
    if total > max_bytes:
        raise ApiError(
            413,
            "images_too_large",
            f"The run's images hold {total} bytes, more than the {max_bytes} a run may have "
            "(AGENT_RUN_IMAGES_MAX_BYTES).",
        )


def by_reference(message: Message) -> tuple[Message, list[DecodedImage]]:
    """``message`` as stored: each ``data:`` image replaced by its reference; the images to keep. A message without
    ``data:`` images is returned as it is."""
    if isinstance(message.content, str | None):
        return message, []
    images: list[DecodedImage] = []
    parts = []
    for part in message.content:
        if isinstance(part, ImagePart) and (image := _decoded(part.image_url.url)) is not None:
            images.append(image)
            reference = ImageUrl(url=image_reference(image.sha256), detail=part.image_url.detail)
            part = ImagePart(image_url=reference)
        parts.append(part)
    if not images:
        return message, []
    return message.model_copy(update={"content": parts}), images


def messages_by_reference(messages: list[Message]) -> tuple[list[Message], list[DecodedImage]]:
    """``by_reference`` of each message: the messages as stored, and the images to keep."""
    stored, kept = [], []
    for message in messages:
        message, images = by_reference(message)
        stored.append(message)
        kept += images
    return stored, kept


def _decoded(url: str) -> DecodedImage | None:
    try:
        return decode_data_url(url)
    except ValueError:  # checked when it came in; kept as it is rather than lost
        return None
