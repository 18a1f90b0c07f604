"""Images of a completion request at the edge: every URL checked before any call, remote images fetched where a
provider needs the bytes.

``ImageFetcher`` is the service's one outbound client for images: a ``suite_common.ssrf_httpx.guarded_client`` over
the settings' egress policy (``COMPLETION_SSRF_*``), so every connection, redirects included, reaches only an address
the policy allows; a fetch is bounded in time (``COMPLETION_IMAGE_FETCH_TIMEOUT_SECONDS``) and size
(``COMPLETION_IMAGE_FETCH_MAX_BYTES``) and must answer an image type every provider takes. ``admit_images`` checks a
request's images before any provider is called; ``with_image_bytes`` turns its ``https`` images into ``data:`` URLs
for a provider whose ``image_input`` is ``bytes`` (Gemini, Bedrock, the demo); the others get the URLs as they came.
A request carries at most ``COMPLETION_IMAGE_MAX_COUNT`` images, its fetches bring at most ``_TOTAL_FACTOR`` times
the one-image cap together, and its checks and fetches run a few at a time within the request's deadline.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import anyio
import httpx

from completion_service.providers._images import IMAGE_MEDIA_TYPES, DataImage, data_image
from completion_service.settings import CompletionSettings
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.ssrf import EgressBlocked, EgressPolicy, HostNotResolved, Resolver, check_url
from suite_common.ssrf_httpx import guarded_client, stream_following_redirects
from suite_common.wire import CompletionRequest, ImagePart, Message

__all__ = ["ImageFetcher", "admit_images", "has_images", "with_image_bytes"]

_log = get_logger("completion_service.images")

_ACCEPT = ", ".join(sorted(IMAGE_MEDIA_TYPES))
_TOTAL_FACTOR = 4
"""The https images of one request together bring at most this many times the one-image cap."""
_AT_ONCE = 4
"""The image URLs of one request checked or fetched at the same time."""


def has_images(request: CompletionRequest) -> bool:
    return any(message.images for message in request.messages)


def _image_urls(request: CompletionRequest) -> Iterator[str]:
    for message in request.messages:
        for part in message.images:
            yield part.image_url.url


def _not_allowed(url: str, why: str) -> ApiError:
    return ApiError(400, "image_url_not_allowed", f"The image URL {clip(url)!r} is not allowed: {why}")


def _too_large(size: int, limit: int) -> ApiError:
    return ApiError(
        413,
        "image_too_large",
        f"An image of {size} bytes is larger than this service takes "
        f"({limit} bytes, COMPLETION_IMAGE_FETCH_MAX_BYTES).",
    )


@contextmanager
def _refusals(url: str, late: str) -> Iterator[None]:
    """The guard's refusals as the caller's errors: a blocked address 400 ``image_url_not_allowed``, an unknown
    name or running out of time (``late`` says which wait) 400 ``image_fetch_failed``."""
    try:
        yield
    except EgressBlocked as error:
        _log.warning("image_url_refused", host=error.host, reason=error.reason, address=error.address)
        raise _not_allowed(url, error.message) from None
    except HostNotResolved as error:
        raise ApiError(400, "image_fetch_failed", error.message) from None
    except TimeoutError:
        raise ApiError(400, "image_fetch_failed", late) from None


class ImageFetcher:
    """The guarded client that checks and fetches image URLs (see the module); ``aclose`` it when done."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        max_bytes: int,
        timeout_seconds: float,
        max_redirects: int,
        max_count: int = 20,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.policy = policy
        self.max_bytes = max_bytes
        self.max_count = max_count
        self.max_total_bytes = _TOTAL_FACTOR * max_bytes
        self._resolver = resolver
        self._timeout = timeout_seconds
        self._max_redirects = max_redirects
        self._client = guarded_client(
            policy, timeout=timeout_seconds, resolver=resolver, verify=verify, headers={"Accept": _ACCEPT}
        )

    @classmethod
    def from_settings(cls, settings: CompletionSettings, *, verify: ssl.SSLContext | bool = True) -> ImageFetcher:
        """The fetcher of the settings' egress policy and image limits; ``verify``: a CA of the caller's (tests)."""
        return cls(
            settings.egress_policy(),
            resolver=settings.egress_resolver(),
            max_bytes=settings.image_fetch_max_bytes,
            timeout_seconds=settings.image_fetch_timeout_seconds,
            max_redirects=settings.image_fetch_max_redirects,
            max_count=settings.image_max_count,
            verify=verify,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def check(self, url: str) -> None:
        """400 ``image_url_not_allowed`` unless ``url`` is ``https`` and its host resolves only to allowed addresses."""
        if not url.lower().startswith("https://"):
            raise _not_allowed(url, "an image is an https:// URL or a data:image/...;base64 URL.")
        with _refusals(url, f"Resolving the host of {clip(url)!r} took too long."), anyio.fail_after(self._timeout):
            await check_url(url, self.policy, resolver=self._resolver)

    async def fetch(self, url: str, *, within: float) -> DataImage:
        """The image at ``url`` (checked at each connection and redirect), within ``within`` seconds at most."""
        late = f"{clip(url)!r} did not answer within {self._timeout:g} s."
        try:
            with _refusals(url, late), anyio.fail_after(min(within, self._timeout)):
                return await self._fetch(url)
        except httpx.TooManyRedirects:
            raise ApiError(
                400, "image_fetch_failed", f"{clip(url)!r} redirected more than {self._max_redirects} times."
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            reason = str(error) or type(error).__name__
            raise ApiError(400, "image_fetch_failed", f"Could not fetch {clip(url)!r}: {clip(reason)}.") from None

    async def _fetch(self, url: str) -> DataImage:
        async with stream_following_redirects(self._client, url, max_redirects=self._max_redirects) as response:
            if not 200 <= response.status_code < 300:
                raise ApiError(400, "image_fetch_failed", f"{clip(url)!r} answered HTTP {response.status_code}.")
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if media_type not in IMAGE_MEDIA_TYPES:
                raise ApiError(
                    400,
                    "image_fetch_failed",
                    f"{clip(url)!r} answered {media_type or 'no content type'}, not an image of "
                    "PNG, JPEG, GIF or WebP.",
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise _too_large(int(declared), self.max_bytes)  # refused before any byte is read
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self.max_bytes:
                    raise _too_large(len(body), self.max_bytes)
        _log.info("image_fetched", host=response.url.host, bytes=len(body), media_type=media_type)
        return DataImage.of(media_type, bytes(body))


async def admit_images(request: CompletionRequest, fetcher: ImageFetcher, *, within: float) -> None:
    """Every image of ``request`` acceptable before any call: at most ``max_count`` of them (else 400
    ``too_many_images``), a ``data:`` URL a well-formed image within the size cap (else 400 ``invalid_request``, 413
    ``image_too_large``), an ``https`` URL allowed by the egress policy (else 400 ``image_url_not_allowed``), nothing
    else (agent-service's stored ``/api/v1/agent/images/...`` are resolved by agent-service before it calls). The
    https URLs are checked a few at a time, all within ``within`` seconds (else 504 ``upstream_timeout``)."""
    count = sum(len(message.images) for message in request.messages)
    if count > fetcher.max_count:
        raise ApiError(
            400,
            "too_many_images",
            f"The request carries {count} images; this service takes at most {fetcher.max_count} "
            "(COMPLETION_IMAGE_MAX_COUNT).",
        )
    remote = []
    for url in dict.fromkeys(_image_urls(request)):
        try:
            image = data_image(url)
        except ValueError as error:
            raise ApiError(400, "invalid_request", f"An image is not valid: {error}.") from None
        if image is None:
            remote.append(url)
        elif image.size > fetcher.max_bytes:
            raise _too_large(image.size, fetcher.max_bytes)
    await _few_at_a_time([_bound(fetcher.check, url) for url in remote], within, "its image URLs were checked")


async def with_image_bytes(
    request: CompletionRequest, fetcher: ImageFetcher, fetched: dict[str, str], *, within: float
) -> CompletionRequest:
    """``request`` with its ``https`` images fetched into ``data:`` URLs, a few at a time within ``within`` seconds,
    at most ``max_total_bytes`` together (else 413 ``image_too_large``); ``fetched`` keeps them by URL for the other
    models of a fallback chain (each image is fetched once per request)."""
    wanted = [url for url in dict.fromkeys(_image_urls(request)) if url not in fetched and data_image(url) is None]
    total = 0

    async def fetch(url: str) -> None:
        nonlocal total
        image = await fetcher.fetch(url, within=within)
        total += image.size
        if total > fetcher.max_total_bytes:
            raise ApiError(
                413,
                "image_too_large",
                f"The request's https images hold more than {fetcher.max_total_bytes} bytes together "
                f"({_TOTAL_FACTOR} times COMPLETION_IMAGE_FETCH_MAX_BYTES).",
            )
        fetched[url] = image.url

    await _few_at_a_time([_bound(fetch, url) for url in wanted], within, "its images were fetched")
    if not fetched:
        return request
    return request.model_copy(update={"messages": [_with_data_urls(message, fetched) for message in request.messages]})


def _bound(work: Callable[[str], Awaitable[object]], url: str) -> Callable[[], Awaitable[object]]:
    return lambda: work(url)


async def _few_at_a_time(works: list[Callable[[], Awaitable[object]]], within: float, while_: str) -> None:
    """Each of ``works``, ``_AT_ONCE`` at a time, all within ``within`` seconds (else 504 ``upstream_timeout``
    saying what was ``while_`` under way); the first refusal stops the others and is raised as it is."""
    if not works:
        return
    refusals: list[ApiError] = []
    limiter = anyio.CapacityLimiter(_AT_ONCE)

    async def one(work: Callable[[], Awaitable[object]]) -> None:
        async with limiter:
            try:
                await work()
            except ApiError as refusal:
                refusals.append(refusal)
                group.cancel_scope.cancel()

    with anyio.move_on_after(within) as deadline:
        async with anyio.create_task_group() as group:
            for work in works:
                group.start_soon(one, work)
    if refusals:
        raise refusals[0]
    if deadline.cancelled_caught:
        raise ApiError(504, "upstream_timeout", f"The request's time ran out while {while_}.", retryable=True)


def _with_data_urls(message: Message, fetched: dict[str, str]) -> Message:
    if not message.images or isinstance(message.content, str) or message.content is None:
        return message
    content = [
        part.model_copy(update={"image_url": part.image_url.model_copy(update={"url": fetched[part.image_url.url]})})
        if isinstance(part, ImagePart) and part.image_url.url in fetched
        else part
        for part in message.content
    ]
    return message.model_copy(update={"content": content})
