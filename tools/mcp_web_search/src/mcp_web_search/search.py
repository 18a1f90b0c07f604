"""What ``web_search`` does between the MCP layer and the backends: check the request, try backends in order."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from mcp.server.mcpserver.exceptions import ToolError

from mcp_web_search.backends.base import SearchBackend, SearchBackendError
from mcp_web_search.results import SearchResult
from suite_common.logging import get_logger

__all__ = [
    "MAX_QUERY_CHARS",
    "NO_BACKEND_MESSAGE",
    "search_in_order",
    "validate_search_request",
]

MAX_QUERY_CHARS = 1000

NO_BACKEND_MESSAGE = (
    "No web search backend is configured: set WEB_SEARCH_SEARXNG_URL to a SearXNG instance "
    "with the JSON format enabled."
)

_logger = get_logger(__name__)


def validate_search_request(query: str, max_results: int, max_results_cap: int) -> str:
    """The query to send (trimmed), or a ``ToolError`` that tells the model what to change."""
    query = query.strip()
    if not query:
        raise ToolError("The query is empty: pass a few keywords describing what to search for.")
    if len(query) > MAX_QUERY_CHARS:
        raise ToolError(
            f"The query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}. "
            "Search with a few specific keywords instead of a long text."
        )
    if not 1 <= max_results <= max_results_cap:
        raise ToolError(
            f"max_results must be between 1 and {max_results_cap}, got {max_results}. "
            f"Ask for at most {max_results_cap} results."
        )
    return query


async def search_in_order(
    backends: Sequence[SearchBackend], query: str, max_results: int, deadline_seconds: float
) -> tuple[str, list[SearchResult]]:
    """The name of the first backend that answers, and its results (at most ``max_results``).

    A backend that fails or misses its deadline hands over to the next one; when none answers,
    a ``ToolError`` lists what failed so the model can tell the user and an operator can fix it.
    """
    if not backends:
        raise ToolError(NO_BACKEND_MESSAGE)
    failures: list[str] = []
    for backend in backends:
        try:
            with anyio.fail_after(deadline_seconds):
                results = await backend.search(query, max_results)
        except SearchBackendError as exc:
            _logger.warning("search_backend_failed", backend=exc.backend, reason=exc.message)
            failures.append(f"- {exc.backend}: {exc.message}")
        except TimeoutError:
            _logger.warning("search_backend_timed_out", backend=backend.name, deadline_seconds=deadline_seconds)
            failures.append(f"- {backend.name}: no answer within {deadline_seconds:g} s (WEB_SEARCH_TIMEOUT_SECONDS).")
        except Exception:
            # A bug in one backend must not take web search down while another may still answer.
            _logger.exception("search_backend_crashed", backend=backend.name)
            failures.append(f"- {backend.name}: unexpected error (details in the web search server's log).")
        else:
            return backend.name, results[:max_results]
    raise ToolError(
        "Web search is unavailable: every configured backend failed.\n"
        + "\n".join(failures)
        + "\nThis needs fixing on the server side (the settings named above); retrying the same call will not help "
        "until then."
    )
