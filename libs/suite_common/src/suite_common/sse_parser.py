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

from httpx_sse import ServerSentEvent

__all__ = ["EventStreamParser"]


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
        events = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        field, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
        elif field == "retry":
            with contextlib.suppress(ValueError):
                self._retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._event and not self._data and not self._last_id and self._retry is None:
            return None
        event = ServerSentEvent(event=self._event, data="\n".join(self._data), id=self._last_id, retry=self._retry)
        self._event, self._data, self._retry = "", [], None
        return event
