"""What a completion costs at its catalog entry's prices."""

from __future__ import annotations

import pytest

from completion_service.pricing import cost_usd, priced
from suite_common.wire import CompletionDone, CompletionResponse, Message, ModelPrices, Usage

GPT_4O = ModelPrices(input_per_million_usd=2.5, output_per_million_usd=10)


def test_the_cost_is_each_direction_at_its_own_price_per_million() -> None:
    usage = Usage(input_tokens=1_000, output_tokens=200)
    assert cost_usd(usage, GPT_4O) == pytest.approx(1_000 * 2.5 / 1e6 + 200 * 10 / 1e6)  # 0.0045
    assert cost_usd(Usage(input_tokens=1_000_000), GPT_4O) == pytest.approx(2.5)
    assert cost_usd(Usage(output_tokens=1_000_000), GPT_4O) == pytest.approx(10)


def test_no_tokens_cost_nothing_and_no_prices_give_no_cost() -> None:
    assert cost_usd(Usage(), GPT_4O) == 0
    assert cost_usd(Usage(input_tokens=5, output_tokens=5), None) is None
    free = ModelPrices(input_per_million_usd=0, output_per_million_usd=0)
    assert cost_usd(Usage(input_tokens=5, output_tokens=5), free) == 0


def test_a_whole_answer_and_a_done_event_carry_their_cost_and_keep_everything_else() -> None:
    usage = Usage(input_tokens=400, output_tokens=100)
    response = CompletionResponse(
        message=Message(role="assistant", content="hi"), finish_reason="stop", usage=usage, model="m", provider="p"
    )
    done = CompletionDone(finish_reason="stop", usage=usage, model="m", provider="p")
    priced_response, priced_done = priced(response, GPT_4O), priced(done, GPT_4O)
    for before, after in ((response, priced_response), (done, priced_done)):
        assert after.usage.cost_usd == pytest.approx(0.002)
        assert after.model_dump(exclude={"usage"}) == before.model_dump(exclude={"usage"})
        assert (after.usage.input_tokens, after.usage.output_tokens) == (400, 100)
    assert priced(response, None) is response
    assert priced(done, None) is done
    assert usage.cost_usd is None  # the provider's own usage is not changed
