"""A streamed agent run read as the client sees it: its SSE events, parsed by the suite's own event-stream parser."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx

from suite_common.sse_parser import EventStreamParser

__all__ = ["RunEvents", "events_of", "streamed_run"]

RunEvents = list[tuple[str, dict[str, Any]]]
"""A run's events in order: each one's ``event:`` name and its JSON data."""


async def streamed_run(http: httpx.AsyncClient, url: str, body: dict[str, Any], *, seconds: float = 60) -> RunEvents:
    """``POST url`` (a run, ``stream: true``) and every event of its answer until the stream ends (200 expected),
    within ``seconds``."""
    parser, events = EventStreamParser(), []
    with anyio.fail_after(seconds):
        async with http.stream("POST", url, json={**body, "stream": True}) as response:
            assert response.status_code == 200, await response.aread()
            async for chunk in response.aiter_bytes():
                events += [(event.event, json.loads(event.data)) for event in parser.feed(chunk) if event.data]
    return events


def events_of(events: RunEvents, kind: str) -> list[dict[str, Any]]:
    """The data of the events named ``kind``, in order."""
    return [data for name, data in events if name == kind]
