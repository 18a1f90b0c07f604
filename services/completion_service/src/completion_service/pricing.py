"""What a completion cost, at the prices of the catalog entry that answered it.

Priced where the answering route is known (``app``), for whole answers and for a stream's ``done``
alike; providers report tokens only.
"""

from __future__ import annotations

from typing import TypeVar

from suite_common.wire import CompletionDone, CompletionResponse, ModelPrices, Usage

__all__ = ["cost_usd", "priced"]

Answer = TypeVar("Answer", CompletionResponse, CompletionDone)

_MILLION = 1_000_000


def cost_usd(usage: Usage, prices: ModelPrices | None) -> float | None:
    """What ``usage``'s tokens cost at ``prices`` in US dollars; ``None`` without prices."""
    if prices is None:
        return None
    return (
        usage.input_tokens * prices.input_per_million_usd / _MILLION
        + usage.output_tokens * prices.output_per_million_usd / _MILLION
    )


def priced(answer: Answer, prices: ModelPrices | None) -> Answer:
    """``answer`` with ``usage.costUsd`` at ``prices``; unchanged without prices."""
    if prices is None:
        return answer
    usage = answer.usage.model_copy(update={"cost_usd": cost_usd(answer.usage, prices)})
    return answer.model_copy(update={"usage": usage})
