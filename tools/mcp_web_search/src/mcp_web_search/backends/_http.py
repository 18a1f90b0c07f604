"""What the HTTP search APIs (Brave, Tavily) share: sending with failures explained, reading JSON."""

from __future__ import annotations

from typing import Any

import httpx

from mcp_web_search.backends.base import SearchBackendError

__all__ = ["detail", "json_body", "send", "wait_hint"]

_MAX_DETAIL_CHARS = 300


async def send(http: httpx.AsyncClient, request: httpx.Request, *, backend: str, service: str) -> httpx.Response:
    """The response (read), or a ``SearchBackendError`` saying why ``service`` could not be reached."""
    try:
        return await http.send(request)
    except httpx.TimeoutException as exc:
        raise SearchBackendError(
            backend, f"{service} did not answer in time; raise WEB_SEARCH_TIMEOUT_SECONDS or try again later."
        ) from exc
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise SearchBackendError(backend, f"could not reach {service} ({reason[:_MAX_DETAIL_CHARS]}).") from exc


def json_body(response: httpx.Response) -> Any:
    """The JSON body, or ``None`` when there is none (an error page, an empty body)."""
    try:
        return response.json()
    except ValueError:
        return None


def wait_hint(response: httpx.Response) -> str:
    """``", retry after N s"`` from ``Retry-After`` (or Brave's ``X-RateLimit-Reset``), else ``""``."""
    retry_after = response.headers.get("retry-after")
    if retry_after:
        return f", retry after {retry_after.strip()} s"
    reset = response.headers.get("x-ratelimit-reset")
    if reset:
        # Brave: one value per window, the per-second window first ("1, 1419704").
        return f", the limit resets in {reset.split(',')[0].strip()} s"
    return ""


def detail(text: object) -> str:
    """An upstream's error text, shortened for a message."""
    return text.strip()[:_MAX_DETAIL_CHARS] if isinstance(text, str) else ""
