"""Server-sent events from a response body's bytes, as they arrive; no I/O.

``httpx-sse`` reads a body line by line through four nested async generators (lines, text,
bytes, raw), with a trip through each per line. Parsing each network chunk at once instead lets
a reader (completion-service's ``Upstream.iter_sse``, agent-service's client of completion-service)
apply its deadline and error translation once per read, however many events the read carries.
The events are the same as ``httpx_sse.EventSource`` gives (tested against it).
"""

from __future__ import annotations

import codecs
import contextlib
from typing import NamedTuple

__all__ = ["EventStreamParser", "ServerSentEvent"]


class ServerSentEvent(NamedTuple):
    """One event, with the attributes of ``httpx_sse.ServerSentEvent``; a tuple because one is built for every event
    of every stream, and a tuple is built in a fraction of the time that class takes."""

    event: str
    """``message`` when the event names none."""
    data: str
    id: str
    retry: int | None


class EventStreamParser:
    """The WHATWG event-stream interpretation: UTF-8; lines end with ``\\r\\n``, ``\\n`` or ``\\r`` in any mix;
    ``:`` starts a comment; fields ``event``, ``data``, ``id`` (kept across events), ``retry``; a blank line
    dispatches. Like ``httpx-sse``, an event with only an ``event``, ``id`` or ``retry`` is dispatched too."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial_line = ""
        self._after_cr = False
        """The last text ended with ``\\r``: a ``\\n`` that starts the next one ends the same line."""
        self._event = ""
        self._data: list[str] = []
        self._last_id = ""
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` completes (an event may span chunks, a chunk hold many events)."""
        text = self._decoder.decode(chunk)
        if self._after_cr and text:
            self._after_cr = False
            if text[0] == "\n":
                text = text[1:]
        if "\r" in text:
            self._after_cr = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if "\n" not in text:
            self._partial_line += text
            return []
        lines = text.split("\n")
        lines[0] = self._partial_line + lines[0]
        self._partial_line = lines.pop()
        # One loop over the lines, the frequent ones (``data:``, the blank line that dispatches) first and inline:
        # a method call per line was most of the parser's cost, paid for every event of every stream.
        events: list[ServerSentEvent] = []
        data = self._data
        for line in lines:
            if not line:
                if data or self._event or self._last_id or self._retry is not None:
                    events.append(self._dispatch(data))
                    data = self._data = []
            elif line.startswith("data:"):
                data.append(line[6:] if line[5:6] == " " else line[5:])
            elif line.startswith("event:"):
                self._event = line[7:] if line[6:7] == " " else line[6:]
            elif line[0] != ":":
                self._field(line)
        return events

    def _field(self, line: str) -> None:
        """A line other than ``data``, a comment or a blank one."""
        field, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if field == "data":  # a bare ``data`` line (no colon): an empty value
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
        elif field == "retry":
            with contextlib.suppress(ValueError):
                self._retry = int(value)

    def _dispatch(self, data: list[str]) -> ServerSentEvent:
        joined = data[0] if len(data) == 1 else "\n".join(data)
        event = ServerSentEvent(self._event or "message", joined, self._last_id, self._retry)
        self._event, self._retry = "", None
        return event
