"""A run's images on their way to the model: stored references made ``data:`` URLs again before each LLM call, the
room left for its tool results' images, and what a ``tool_result`` event says of them.

completion-service never sees a reference (``/api/v1/agent/images/<sha256>``, ``core.images``): before each LLM call
``RunImages.resolve`` puts the bytes back, read from the store once per run. A run without images (``RunState.images``
false) reads nothing and never calls it: its messages are scanned once, when it starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from agent_service.core.errors import UpstreamError
from agent_service.core.images import DecodedImage, data_url, decode_data_url, has_images, referenced_sha
from agent_service.store import StoreError
from suite_common.wire import ContentPart, ImagePart, ImageUrl, Message, TextPart, ToolResultImage

__all__ = ["ImageSource", "RunImages", "image_room", "image_summaries"]

MISSING_IMAGE = "[an image of this conversation is no longer stored]"
"""What the model reads instead of a referenced image the store does not have (any more)."""


class ImageSource(Protocol):
    """Where stored images are read (``RunStore.images``)."""

    async def images(self, tenant: str, shas: Iterable[str]) -> dict[str, DecodedImage]: ...


class RunImages:
    """One run's stored images, as ``data:`` URLs, each read from ``source`` once."""

    def __init__(self, source: ImageSource | None, tenant: str) -> None:
        self.source = source
        self.tenant = tenant
        self.urls: dict[str, str | None] = {}
        """sha256 → its ``data:`` URL (``None``: not stored)."""

    async def resolve(self, messages: list[Message]) -> list[Message]:
        """``messages`` with every reference replaced by its image (``MISSING_IMAGE`` when the store has none); the
        same list when there is none. A store that fails is the run's ``store_unavailable`` (503)."""
        if not has_images(messages):
            return messages
        referenced = _referenced(messages)
        if not referenced:
            return messages  # images, all inline
        await self._load(referenced)
        return [self._resolved(message) for message in messages]

    async def held(self, messages: list[Message], *, resumed: bool) -> int:
        """What the run's own images hold as it starts, which its cap counts with its tool results': the request's
        ``data:`` images; and for a run taken over (its images stored by reference by then) the referenced images
        from its last user message on, read in one store query (and kept for ``resolve``)."""
        held = sum(len(image.data) for message in messages for image in _inline(message))
        if not resumed or not (referenced := _referenced(messages)):
            return held
        sizes = await self._load(referenced)  # all of them, the earlier runs' too: ``resolve`` needs them next
        start = max((i for i, message in enumerate(messages) if message.role == "user"), default=0)
        return held + sum(sizes.get(sha, 0) for sha in _referenced(messages[start:]))

    async def _load(self, referenced: set[str]) -> dict[str, int]:
        """Read the images of ``referenced`` not read yet (one store query); the sizes of those it read."""
        sizes: dict[str, int] = {}
        if wanted := referenced - self.urls.keys():
            found = await self._read(wanted)
            for sha in wanted:
                image = found.get(sha)
                self.urls[sha] = data_url(image) if image is not None else None
                if image is not None:
                    sizes[sha] = len(image.data)
        return sizes

    async def _read(self, wanted: set[str]) -> dict[str, DecodedImage]:
        if self.source is None:
            return {}
        try:
            return await self.source.images(self.tenant, wanted)
        except StoreError:
            raise UpstreamError(
                "store_unavailable",
                "The run's images could not be read: the run store is unavailable.",
                status=503,
                headers={"Retry-After": "1"},
            ) from None

    def _resolved(self, message: Message) -> Message:
        if isinstance(message.content, str | None) or not message.images:
            return message
        parts: list[ContentPart] = []
        for part in message.content:
            if isinstance(part, ImagePart) and (sha := referenced_sha(part.image_url.url)) is not None:
                url = self.urls.get(sha)
                image = ImageUrl(url=url, detail=part.image_url.detail) if url is not None else None
                parts.append(ImagePart(image_url=image) if image is not None else TextPart(text=MISSING_IMAGE))
            else:
                parts.append(part)
        return message.model_copy(update={"content": parts})


def _referenced(messages: list[Message]) -> set[str]:
    return {
        sha
        for message in messages
        for part in message.images
        if (sha := referenced_sha(part.image_url.url)) is not None
    }


def _inline(message: Message) -> list[DecodedImage]:
    images = []
    for part in message.images:
        try:
            image = decode_data_url(part.image_url.url)
        except ValueError:
            continue
        if image is not None:
            images.append(image)
    return images


def image_room(used: int, max_bytes: int) -> int:
    """What a run's tool results may still bring in images: ``max_bytes`` less the ``used`` bytes of the run's own
    images (``RunImages.held`` and its earlier results')."""
    return max(0, max_bytes - used)


def image_summaries(message: Message) -> list[ToolResultImage] | None:
    """What a ``tool_result`` event says of its images: type and size, never the bytes (``None``: no image)."""
    summaries = [ToolResultImage(mime_type=image.media_type, size_bytes=len(image.data)) for image in _inline(message)]
    return summaries or None
