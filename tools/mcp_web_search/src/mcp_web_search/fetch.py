"""``fetch_url``: download one page through the SSRF guard, within size and time caps, and read it.

The HTTP client is a ``suite_common.ssrf_httpx.guarded_client``: every connection, redirects
included, goes to an address checked against the egress policy at connect time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import anyio
import httpx
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from mcp_web_search.extract import UnsupportedContent, content_kind, extract
from suite_common.logging import get_logger
from suite_common.ssrf import EgressBlocked, HostNotResolved, parse_http_url
from suite_common.ssrf_httpx import stream_following_redirects

__all__ = ["FetchLimits", "FetchUrlOutput", "fetch_page", "format_page"]

_ACCEPT = "text/html,application/xhtml+xml,text/markdown;q=0.9,text/plain;q=0.8,application/json;q=0.8,*/*;q=0.1"
_MAX_URL_CHARS = 4096

_logger = get_logger(__name__)


@dataclass(frozen=True)
class FetchLimits:
    """The caps of one fetch (from the settings)."""

    timeout_seconds: float
    max_bytes: int
    max_redirects: int


class FetchUrlOutput(BaseModel):
    """The structured result of ``fetch_url`` (its declared output schema)."""

    url: str = Field(description="The URL that was asked for.")
    final_url: str = Field(description="The URL the content came from, after redirects.")
    title: str | None = Field(description="Title of the page, when it has one.")
    content_type: str = Field(description="Media type the server declared, e.g. text/html.")
    content: str = Field(description="Main text of the page as Markdown (HTML) or as served (text, Markdown, JSON).")
    truncated: bool = Field(description="True when the page was longer than max_chars (or the size cap) and was cut.")


def _status_problem(status: int, reason: str, url: str) -> str:
    said = f"HTTP {status} {reason}".strip()
    if status in (404, 410):
        return f"{url} answered {said}: the page does not exist. Check the URL, or find the page with web_search."
    if status in (401, 403, 407):
        return (
            f"{url} answered {said}: the site refuses access (login required, or automated clients blocked). "
            "Use another source."
        )
    if status == 429:
        return f"{url} answered {said}: the site is rate limiting this server. Use another source, or try later."
    if status >= 500:
        return f"{url} answered {said}: the site failed. Try again later, or use another source."
    if 300 <= status < 400:
        return f"{url} answered {said} without a usable Location header. Use another URL."
    return f"{url} answered {said}. Check the URL."


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """At most ``max_bytes`` of the body, and whether there was more (left unread, the connection closed)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


async def fetch_page(client: httpx.AsyncClient, url: str, max_chars: int, limits: FetchLimits) -> FetchUrlOutput:
    """The page at ``url`` as readable text; a ``ToolError`` telling the model what to do otherwise."""
    url = url.strip()
    if len(url) > _MAX_URL_CHARS:
        raise ToolError(f"The URL is {len(url)} characters long; the limit is {_MAX_URL_CHARS}.")
    try:
        parse_http_url(url)
        with anyio.fail_after(limits.timeout_seconds):
            return await _fetch(client, url, max_chars, limits)
    except EgressBlocked as exc:
        _logger.warning("fetch_url_refused", host=exc.host, reason=exc.reason, address=exc.address)
        raise ToolError(f"{exc.message} fetch_url only reads public web pages; do not retry this URL.") from exc
    except HostNotResolved as exc:
        raise ToolError(f"{exc.message} Or find the right address with web_search.") from exc
    except httpx.InvalidURL as exc:
        # Not an HTTPError: httpx refuses some URLs that urlsplit takes (an octal IPv4 address such as
        # 0177.0.0.1, full-width digits, a control character in the host). Say so, as for any refusal.
        raise ToolError(
            f"Refused: {url!r} is not a valid URL ({exc}). Write the host as a plain name or dotted-decimal "
            "address; do not retry this URL as it is."
        ) from exc
    except TimeoutError as exc:
        raise ToolError(
            f"{url} did not answer within {limits.timeout_seconds:g} s (WEB_SEARCH_FETCH_TIMEOUT_SECONDS). "
            "Use another source, or try later."
        ) from exc
    except httpx.TooManyRedirects as exc:
        raise ToolError(f"{url} redirected more than {limits.max_redirects} times. Use another URL.") from exc
    except httpx.TimeoutException as exc:
        raise ToolError(f"{url} did not answer in time. Use another source, or try later.") from exc
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise ToolError(f"Could not fetch {url}: {reason[:300]}. Check the URL, or use another source.") from exc


async def _fetch(client: httpx.AsyncClient, url: str, max_chars: int, limits: FetchLimits) -> FetchUrlOutput:
    async with stream_following_redirects(
        client, url, max_redirects=limits.max_redirects, headers={"Accept": _ACCEPT}
    ) as response:
        final_url = str(response.url)
        if not 200 <= response.status_code < 300:
            raise ToolError(_status_problem(response.status_code, response.reason_phrase, final_url))
        content_type = response.headers.get("content-type")
        try:
            if content_type:  # refuse a wrong type before reading the body; a missing one is sniffed below
                content_kind(content_type, b"")
            body, cut = await _read_capped(response, limits.max_bytes)
        except UnsupportedContent as exc:
            raise ToolError(f"{exc.message} (URL: {final_url})") from exc
    try:
        page = await anyio.to_thread.run_sync(partial(extract, body, content_type, final_url), abandon_on_cancel=True)
    except UnsupportedContent as exc:
        raise ToolError(f"{exc.message} (URL: {final_url})") from exc
    text = page.text
    truncated = cut or len(text) > max_chars
    if len(text) > max_chars:
        text = text[:max_chars].rstrip()
    _logger.info(
        "fetch_url_fetched",
        host=response.url.host,
        status=response.status_code,
        bytes=len(body),
        chars=len(text),
        truncated=truncated,
    )
    media_type = (content_type or "").split(";")[0].strip().lower() or "unknown"
    return FetchUrlOutput(
        url=url, final_url=final_url, title=page.title, content_type=media_type, content=text, truncated=truncated
    )


def format_page(page: FetchUrlOutput, max_chars: int, max_chars_cap: int, max_bytes: int) -> str:
    """The page as the model reads it: title, final URL, then the text, and a note when it was cut."""
    lines = [f"# {page.title}" if page.title else "# (untitled page)", f"URL: {page.final_url}"]
    if page.final_url != page.url:
        lines.append(f"(redirected from {page.url})")
    lines.append("")
    lines.append(page.content or "(The page has no readable text.)")
    if page.truncated:
        if len(page.content) >= max_chars and max_chars < max_chars_cap:
            advice = f"call fetch_url again with a larger max_chars (up to {max_chars_cap}) to read more."
        else:
            advice = f"the page is larger than this server reads ({max_bytes} bytes or {max_chars_cap} characters)."
        lines.append("")
        lines.append(f"[Truncated: {advice}]")
    return "\n".join(lines)
