"""Counting a call cut off: an estimate of what it streamed, however the call failed after output."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio
import pytest

from agent_service.engine.metering import complete_counted
from agent_service.infra.peers import CompletionClient, DeltaSink
from suite_common.deadline import Deadline
from suite_common.wire import CompletionRequest, CompletionResponse, Message, TextDelta, Usage

pytestmark = pytest.mark.anyio


class _StreamsThenFails:
    """A completion client that streams one delta and then fails with ``error`` (or fails before any output)."""

    def __init__(self, error: Exception, *, streams: bool = True) -> None:
        self.error, self.streams = error, streams

    async def complete(
        self, request: CompletionRequest, deadline: Deadline, on_delta: DeltaSink | None
    ) -> CompletionResponse:
        if self.streams and on_delta is not None:
            await on_delta(TextDelta(delta="x" * 40))
        raise self.error


async def _counted(
    client: _StreamsThenFails, on_delta: Callable[[Any], Awaitable[None]] | None, *, expected: type[Exception]
) -> list[Usage]:
    counted: list[Usage] = []

    async def on_cut_off(usage: Usage) -> None:
        counted.append(usage)

    request = CompletionRequest(model="fake/model", messages=[Message(role="user", content="Hello?")])
    with anyio.fail_after(5), pytest.raises(expected):
        await complete_counted(
            cast(CompletionClient, client),
            request,
            Deadline.never(),
            cast(DeltaSink | None, on_delta),
            on_cut_off=on_cut_off,
            stream=True,
        )
    return counted


async def test_a_call_whose_delta_sink_fails_after_output_is_counted_then_the_failure_goes_on() -> None:
    async def client_gone(delta: object) -> None:
        raise OSError("the client has gone")

    [usage] = await _counted(_StreamsThenFails(RuntimeError("never reached")), client_gone, expected=OSError)

    assert usage.output_tokens == 10  # 40 characters streamed, 4 to a token


async def test_a_call_failing_otherwise_after_output_is_counted() -> None:
    [usage] = await _counted(_StreamsThenFails(ValueError("bad frame")), None, expected=ValueError)

    assert usage.output_tokens == 10


async def test_a_call_failing_before_any_output_is_not_counted() -> None:
    assert await _counted(_StreamsThenFails(OSError("refused"), streams=False), None, expected=OSError) == []
