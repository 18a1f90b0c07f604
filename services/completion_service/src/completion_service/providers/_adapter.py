"""What every HTTP provider adapter does around its wire format, written once.

A call goes: the conversation repaired (``tool_turns``) and tool names made ones the provider
accepts (``tool_names``); one deadline for the whole call; the request opened through
``Upstream`` (retries, ``Retry-After``, secrets scrubbed); then the whole answer read and parsed,
or the stream read piece by piece and assembled, the model's calls back under the caller's
names. A subclass is only its wire translation: ``_outbound`` (the request), ``_parse`` (a whole
answer), ``_decoder`` (a stream's assembler), and its error translation inside ``_outbound``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import httpx

from completion_service.controls import with_warnings
from completion_service.providers._images import ImageInput
from completion_service.providers._transport import ErrorTranslator, Upstream, media_type, parse_json
from completion_service.providers.answer_tool import AnswerTool
from completion_service.providers.tool_names import NameRule, ToolNames
from completion_service.providers.tool_turns import repaired
from suite_common.deadline import Deadline
from suite_common.wire import CompletionDone, CompletionEvent, CompletionRequest, CompletionResponse

__all__ = ["SSE", "HttpAdapter", "Outbound", "StreamDecoder"]

SSE = "text/event-stream"


@dataclass(frozen=True)
class Outbound:
    """One call's request as ``Upstream.open`` sends it: ``build`` makes each attempt afresh (a signature may
    depend on the time), ``translate`` reads the provider's error bodies, ``upstream`` scrubs the call's secrets;
    ``warnings`` say which controls of the request the provider could not take in this call (the answer's
    ``warnings``)."""

    upstream: Upstream
    build: Callable[[], httpx.Request]
    translate: ErrorTranslator
    warnings: list[str] = field(default_factory=list)


class StreamDecoder(Protocol):
    """One streamed answer's wire events (decoded JSON for SSE, raw chunks otherwise) as neutral events."""

    ended: bool
    """The answer is complete and nothing more is read: set from the wire's own last event, or by the
    adapter at ``SSE_END`` (OpenAI's ``[DONE]``)."""

    def feed(self, piece: Any) -> list[CompletionEvent]: ...

    def finish(self) -> list[CompletionEvent]:
        """What is still held, then ``done``; raises when the stream ended before the answer did."""
        ...


class HttpAdapter:
    """The neutral ``Provider`` of one HTTP wire format; see the module."""

    name: str
    tool_names: NameRule
    image_input: ClassVar[ImageInput] = "url"
    """How the provider takes images (``providers._images.ImageInput``)."""
    """The tool names the provider accepts; others go out under safe names and come back under the caller's."""
    stream_media_type: ClassVar[str] = SSE
    """The Content-Type of a streamed answer: server-sent events, or a binary framing the decoder reads."""
    sse_end: ClassVar[str | None] = None
    """An SSE ``data`` that ends the stream without being an event (OpenAI's ``[DONE]``)."""
    ignored_sse_events: ClassVar[frozenset[str]] = frozenset()
    """SSE ``event:`` names that tell the decoder nothing: skipped unread (their JSON never parsed)."""
    answers_through_tool: ClassVar[bool] = False
    """The wire format has no JSON mode: a ``response_format`` is asked for as a forced final tool
    (``answer_tool``), whose call comes back as the answer's text."""

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        raise NotImplementedError

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        raise NotImplementedError

    def _decoder(self, model: str) -> StreamDecoder:
        raise NotImplementedError

    async def _whole_stream(
        self, upstream: Upstream, response: httpx.Response, deadline: Deadline, model: str
    ) -> list[CompletionEvent]:
        """A stream answered with one JSON body (compatible servers do): the events of that whole answer."""
        return await upstream.whole_answer(response, deadline, lambda body: self._parse(body, model))

    # --- the neutral Provider ---------------------------------------------------------------------

    async def complete(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> CompletionResponse:
        request = repaired(request)
        answer_tool = AnswerTool.plan(request) if self.answers_through_tool else None
        if answer_tool is not None:
            request = answer_tool.outbound(request)
        names = ToolNames.plan(request, self.tool_names)
        deadline = Deadline.after(timeout_seconds)
        call, response = await self._open(
            request if names is None else names.outbound(request), upstream_model, deadline, stream=False
        )
        answer = self._parse(await call.upstream.read_json(response, deadline), request.model)
        answer = with_warnings(answer, call.warnings)
        answer = answer if names is None else names.inbound(answer)
        return answer if answer_tool is None else answer_tool.inbound(answer)

    def stream(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> AsyncGenerator[CompletionEvent]:
        request = repaired(request)
        answer_tool = AnswerTool.plan(request) if self.answers_through_tool else None
        if answer_tool is None:
            return self._stream(request, upstream_model, timeout_seconds)
        return self._answered(answer_tool, request, upstream_model, timeout_seconds)

    async def _answered(
        self, answer_tool: AnswerTool, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> AsyncGenerator[CompletionEvent]:
        """A stream asked for through the answer tool, its call given back as text (one more layer, for these
        calls only)."""
        answered = answer_tool.inbound_events()
        async with aclosing(self._stream(answer_tool.outbound(request), upstream_model, timeout_seconds)) as events:
            async for event in events:
                for kept in answered(event):
                    yield kept

    async def _stream(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> AsyncGenerator[CompletionEvent]:
        names = ToolNames.plan(request, self.tool_names)
        deadline = Deadline.after(timeout_seconds)
        call, response = await self._open(
            request if names is None else names.outbound(request), upstream_model, deadline, stream=True
        )
        upstream = call.upstream
        if self.stream_media_type == SSE and media_type(response) == "application/json":
            for event in await self._whole_stream(upstream, response, deadline, request.model):
                event = _warned(event, call.warnings)
                yield event if names is None else names.inbound_event(event)
            return
        decoder = self._decoder(request.model)
        # Written out rather than in a helper generator: one layer fewer for every event of every stream.
        # ``aclosing``: the connection goes back to the pool at once, even after a ``break``.
        with upstream.scrubbed():
            if self.stream_media_type != SSE:
                media = self.stream_media_type
                async with aclosing(upstream.iter_bytes(response, deadline, content_type=media)) as chunks:
                    async for chunk in chunks:
                        for event in decoder.feed(chunk):
                            yield event if names is None else names.inbound_event(event)
                        if decoder.ended:
                            break
            else:
                async with aclosing(upstream.iter_sse(response, deadline)) as sse_events:
                    ignored = self.ignored_sse_events
                    async for sse in sse_events:
                        if sse.event in ignored:
                            continue
                        data = sse.data.strip()
                        if not data:
                            continue
                        if data == self.sse_end:
                            decoder.ended = True
                            break
                        for event in decoder.feed(parse_json(data)):
                            yield event if names is None else names.inbound_event(event)
                        if decoder.ended:
                            break  # the answer is complete: nothing more belongs to it
            for event in decoder.finish():
                event = _warned(event, call.warnings)
                yield event if names is None else names.inbound_event(event)

    async def _open(
        self, request: CompletionRequest, upstream_model: str, deadline: Deadline, *, stream: bool
    ) -> tuple[Outbound, httpx.Response]:
        call = await self._outbound(request, upstream_model, stream=stream)
        return call, await call.upstream.open(call.build, call.translate, deadline)


def _warned(event: CompletionEvent, warnings: list[str]) -> CompletionEvent:
    """``done`` with the call's warnings; other events as they are."""
    return with_warnings(event, warnings) if warnings and isinstance(event, CompletionDone) else event
