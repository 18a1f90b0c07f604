"""An LLM call counted however it ends: its usage as the provider reports it, or an estimate when it is cut off.

A provider reports a call's usage at its end (completion-service's ``done``). A call cut off before that (its run's
client gone, the run cancelled, its deadline passed, the stream failing midway) still cost what the provider
generated, and what it streamed may already be in the caller's hands: such a call is counted all the same, with an
estimate, ``CHARS_PER_TOKEN`` characters to a token, of its prompt (the request's messages and tools) and of its
output streamed so far, its cost at the catalog prices of the model asked for (a fallback that answered may cost
otherwise; a run taken over after a crash has no prices at hand, so no cost). The estimate is marked as one
(``LlmCall.estimated``, the usage log's ``estimated``).
completion-service says nothing after a cut (the connection is gone), so no partial usage of the provider's is
ever at hand here.

A call under a monthly budget is streamed from completion-service even when its run is not: its output so far is
then known when it is cut off (a non-streamed call cut off would count its prompt only).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import anyio

from agent_service.infra.peers import CompletionClient, DeltaSink
from suite_common.deadline import Deadline
from suite_common.logging import get_logger
from suite_common.wire import (
    CompletionRequest,
    CompletionResponse,
    ModelPrices,
    ReasoningDelta,
    TextDelta,
    Usage,
    dump,
)

__all__ = ["CHARS_PER_TOKEN", "CutOff", "complete_counted"]

_log = get_logger("agent_service.metering")

CHARS_PER_TOKEN = 4
"""The usual rule of thumb for English text with the tokenizers of current models."""

_COUNT_SECONDS = 5.0
"""How long counting a cut-off call may hold up the cancellation it is shielded from (one Redis add, one note)."""

CutOff = Callable[[Usage], Awaitable[None]]
"""Where a cut-off call's estimated usage goes (the run's usage, the budgets, the usage log)."""


def _tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


async def complete_counted(
    completions: CompletionClient,
    request: CompletionRequest,
    deadline: Deadline,
    on_delta: DeltaSink | None,
    *,
    on_cut_off: CutOff,
    stream: bool,
    prices: ModelPrices | None = None,
) -> CompletionResponse:
    """``completions.complete``; a call cut off after it was sent hands its estimated usage to ``on_cut_off``,
    shielded from the cancellation that cut it, before the cancellation (or failure) goes on. ``stream``: stream it
    from completion-service even without ``on_delta``, so that its output so far is known. ``prices``: the model's,
    which the estimate's cost is reckoned at (``None``: it has none)."""
    prompt = len(dump(request.model_copy(update={"model": ""})))
    output = 0

    async def seen(delta: TextDelta | ReasoningDelta) -> None:
        nonlocal output
        output += len(delta.delta)
        if on_delta is not None:
            await on_delta(delta)

    streamed = seen if on_delta is not None or stream else None
    try:
        return await completions.complete(request, deadline, streamed)
    except anyio.get_cancelled_exc_class():
        await _count(on_cut_off, _estimate(prompt, output, prices))
        raise
    except Exception:
        # Failed midway, whatever failed (completion-service's stream, or the delta sink when the client has gone):
        # what was streamed was generated. A failure before any output costs nothing.
        if output:
            await _count(on_cut_off, _estimate(prompt, output, prices))
        raise


def _estimate(prompt_chars: int, output_chars: int, prices: ModelPrices | None) -> Usage:
    usage = Usage(input_tokens=_tokens(prompt_chars), output_tokens=_tokens(output_chars))
    if prices is None:
        return usage
    cost = usage.input_tokens * prices.input_per_million_usd + usage.output_tokens * prices.output_per_million_usd
    return usage.model_copy(update={"cost_usd": cost / 1_000_000})


async def _count(on_cut_off: CutOff, usage: Usage) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(_COUNT_SECONDS) as bounded:
        await on_cut_off(usage)
    if bounded.cancelled_caught:
        _log.warning("cut_off_call_not_counted", input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
