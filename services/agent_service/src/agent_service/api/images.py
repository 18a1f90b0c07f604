"""``GET /api/v1/agent/images/{sha256}``: an image of a stored run, as its messages refer to it (``core.images``)."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agent_service.api.auth import caller_of
from agent_service.api.services import services_of
from agent_service.core.images import IMAGE_PATH
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.openapi import ApiRoute, Operation

__all__ = ["images_routes"]

_SHA256 = re.compile(r"[0-9a-f]{64}")


async def get_image(request: Request) -> Response:
    sha: str = request.path_params["sha256"]
    tenant = caller_of(request).tenant
    # Another tenant's image is answered exactly as one never stored: whether it exists is not said.
    image = await services_of(request).runs.image(sha, tenant=tenant) if _SHA256.fullmatch(sha) else None
    if image is None:
        raise ApiError(404, "image_not_found", f"No image {clip(sha)} is stored.")
    # Named by its content: it never changes, so a client may keep it (its own copy: the key's tenant's).
    headers = {"Cache-Control": "private, max-age=31536000, immutable", "X-Content-Type-Options": "nosniff"}
    return Response(image.data, media_type=image.media_type, headers=headers)


_GET_IMAGE = Operation(
    "An image of a stored run's messages (they refer to it as /api/v1/agent/images/<sha256>): its bytes, as its type",
    media_type="image/*",
    errors={
        404: "The caller's tenant has no image of that sha256 (image_not_found), or runs are not stored.",
        503: "The run store is unavailable (Retry-After).",
    },
)


def images_routes() -> list[BaseRoute]:
    return [ApiRoute(IMAGE_PATH + "{sha256}", get_image, method="GET", operation=_GET_IMAGE)]
