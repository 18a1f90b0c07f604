"""The generation controls (``reasoning``, ``verbosity``): which model takes which, each adapter's exact request
fields for every value (whole and streamed), the warnings of the controls a model cannot take, and the reasoning
tokens of the usage."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from completion_service.catalog import CatalogModel
from completion_service.controls import (
    THINKING_BUDGETS,
    ModelControls,
    controls_by_name,
    fitted,
    with_warnings,
    without_reasoning_text,
)
from completion_service.providers import bedrock, gemini, openai
from completion_service.providers._anthropic_shape import DEFAULT_MAX_TOKENS
from completion_service.providers._openai_wire import reasons, temperature_warnings
from completion_service.providers.anthropic import AnthropicProvider
from completion_service.providers.base import events_of
from completion_service.providers.demo import DemoProvider
from completion_service.providers.openai_responses import ResponsesProvider
from completion_service.providers.tool_turns import repaired
from completion_service.routing import ModelRouter
from suite_common.wire import (
    CompletionDone,
    CompletionRequest,
    CompletionResponse,
    Message,
    ReasoningBlock,
    ReasoningControl,
    ReasoningEffort,
    ToolSpec,
    Usage,
    Verbosity,
)
from support.fake_anthropic import request_problem

EFFORTS: list[ReasoningEffort] = ["minimal", "low", "medium", "high"]
VERBOSITIES: list[Verbosity] = ["low", "medium", "high"]
STREAM = [False, True]
QUESTION = [Message(role="user", content="Why does the loop stop?")]
SEARCH = ToolSpec(name="search_documents", description="Search the documents.")


def _request(model: str, **fields: Any) -> CompletionRequest:
    return CompletionRequest(model=model, messages=QUESTION, **fields)


# --- which model takes which control -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "model", "expected"),
    [
        ("openai", "gpt-5", ModelControls(reasoning=True, verbosity=True)),
        ("openai", "gpt-5-mini-2025-08-07", ModelControls(reasoning=True, verbosity=True)),
        ("openai", "o3-mini", ModelControls(reasoning=True)),
        ("openai", "o4-mini", ModelControls(reasoning=True)),
        ("openai", "o1", ModelControls(reasoning=True)),
        ("openai", "openai/gpt-oss-20b", ModelControls(reasoning=True)),
        ("openai", "gpt-4o", ModelControls()),
        ("openai", "gpt-4.1-mini", ModelControls()),
        ("openai", "llama3.1", ModelControls()),
        ("anthropic", "claude-3-7-sonnet-20250219", ModelControls(reasoning=True)),
        ("anthropic", "claude-sonnet-4-5", ModelControls(reasoning=True)),
        ("anthropic", "claude-opus-4-1-20250805", ModelControls(reasoning=True)),
        ("anthropic", "claude-haiku-4-5", ModelControls(reasoning=True)),
        ("anthropic", "claude-3-5-sonnet-20241022", ModelControls()),
        ("anthropic", "claude-3-haiku-20240307", ModelControls()),
        ("bedrock", "us.anthropic.claude-sonnet-4-20250514-v1:0", ModelControls(reasoning=True)),
        ("bedrock", "anthropic.claude-3-7-sonnet-20250219-v1:0", ModelControls(reasoning=True)),
        ("bedrock", "amazon.nova-pro-v1:0", ModelControls()),
        ("gemini", "gemini-2.5-flash", ModelControls(reasoning=True)),
        ("gemini", "gemini-3-pro-preview", ModelControls(reasoning=True)),
        ("vertex", "gemini-2.5-pro", ModelControls(reasoning=True)),
        ("gemini", "gemini-2.0-flash", ModelControls()),
    ],
)
def test_a_model_outside_the_catalog_takes_the_controls_of_its_family(
    kind: str, model: str, expected: ModelControls
) -> None:
    assert controls_by_name(kind, model) == expected


def test_a_catalog_entry_says_what_its_model_takes_over_its_family() -> None:
    demo = DemoProvider()
    entries = {
        "house-reasoner": CatalogModel(name="house-reasoner", provider="openai", model="qwen3-32b", reasoning=True),
        "plain-five": CatalogModel(name="plain-five", provider="openai", model="gpt-5", verbosity=False),
        "sonnet": CatalogModel(name="sonnet", provider="anthropic", model="claude-sonnet-4-5"),
    }
    router = ModelRouter(catalog={name: (entry, demo) for name, entry in entries.items()})
    assert router.route("house-reasoner").controls == ModelControls(reasoning=True)
    assert router.route("plain-five").controls == ModelControls(reasoning=True, verbosity=False)
    assert router.route("sonnet").controls == ModelControls(reasoning=True)


def test_the_demo_model_takes_no_control() -> None:
    assert ModelRouter(demo=DemoProvider()).route("demo").controls == ModelControls()


def test_controls_a_model_cannot_take_are_taken_out_with_a_warning_each() -> None:
    request = _request("gpt-4o", reasoning=ReasoningControl(effort="high"), verbosity="low", temperature=0.3)
    fitted_request, warnings = fitted(request, ModelControls())
    assert fitted_request == _request("gpt-4o", temperature=0.3)
    assert warnings == [
        "reasoning ignored: the model 'gpt-4o' cannot reason.",
        "verbosity ignored: the model 'gpt-4o' does not take it.",
    ]


def test_controls_a_model_takes_stay_without_a_warning() -> None:
    request = _request("gpt-5", reasoning=ReasoningControl(effort="low"), verbosity="high")
    assert fitted(request, ModelControls(reasoning=True, verbosity=True)) == (request, [])


def test_warnings_are_added_to_those_an_answer_already_has() -> None:
    done = CompletionDone(finish_reason="stop", model="m", provider="p", warnings=["first."])
    assert with_warnings(done, ["second."]).warnings == ["first.", "second."]
    assert with_warnings(done, []) is done


def test_a_whole_answer_passed_on_as_a_stream_keeps_its_warnings_on_done() -> None:
    answer = CompletionResponse(
        message=Message(role="assistant", content="Done."),
        finish_reason="stop",
        model="m",
        provider="p",
        warnings=["reasoning ignored: the model 'm' cannot reason."],
    )
    done = events_of(answer)[-1]
    assert isinstance(done, CompletionDone)
    assert done.warnings == answer.warnings


def test_without_reasoning_text_an_answer_keeps_only_the_signed_and_redacted_blocks() -> None:
    signed = ReasoningBlock(text="Search first.", signature="c2ln", provider="anthropic")
    redacted = ReasoningBlock(redacted_data="EmwK", provider="anthropic")
    summary = ReasoningBlock(text="I thought about it.", provider="openai")
    answer = CompletionResponse(
        message=Message(role="assistant", content="Done.", reasoning=[signed, summary, redacted]),
        finish_reason="stop",
        model="m",
        provider="p",
    )
    assert without_reasoning_text(answer).message.reasoning == [signed, redacted]
    bare = answer.model_copy(update={"message": Message(role="assistant", content="Done.", reasoning=[summary])})
    assert without_reasoning_text(bare).message.reasoning is None


# --- OpenAI Chat Completions ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("effort", EFFORTS)
def test_openai_gets_the_effort_as_reasoning_effort(effort: ReasoningEffort, stream: bool) -> None:
    request = _request("gpt-5", reasoning=ReasoningControl(effort=effort, summary="auto"), max_tokens=500)
    body = openai.build_request_body(request, "gpt-5", stream=stream, max_tokens_field="max_completion_tokens")
    expected: dict[str, Any] = {
        "model": "gpt-5",
        "messages": [{"role": "user", "content": "Why does the loop stop?"}],
        "stream": stream,
        "max_completion_tokens": 500,
        "reasoning_effort": effort,
    }
    if stream:
        expected["stream_options"] = {"include_usage": True}
    assert body == expected


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("verbosity", VERBOSITIES)
def test_openai_gets_the_verbosity_as_verbosity(verbosity: Verbosity, stream: bool) -> None:
    body = openai.build_request_body(_request("gpt-5", verbosity=verbosity), "gpt-5", stream=stream)
    expected: dict[str, Any] = {
        "model": "gpt-5",
        "messages": [{"role": "user", "content": "Why does the loop stop?"}],
        "stream": stream,
        "verbosity": verbosity,
    }
    if stream:
        expected["stream_options"] = {"include_usage": True}
    assert body == expected


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("o3-mini", "low"),
        ("o4-mini", "low"),
        ("gpt-oss-20b", "low"),
        ("gpt-5.1", "low"),
        ("gpt-5.2-chat-latest", "low"),
        ("openai/gpt-5.1", "low"),
        ("gpt-5", "minimal"),
        ("gpt-5-mini", "minimal"),
        ("gpt-5-nano", "minimal"),
        ("gpt-5-2025-08-07", "minimal"),
    ],
)
def test_openai_models_without_a_minimal_effort_get_their_least_one(model: str, sent: str) -> None:
    request = _request(model, reasoning=ReasoningControl(effort="minimal"))
    assert openai.build_request_body(request, model, stream=False)["reasoning_effort"] == sent


def test_openai_reasoning_models_get_no_temperature_and_say_so() -> None:
    request = _request("o3", temperature=0.2)
    assert openai.build_request_body(request, "o3", stream=False, reasoning=True) == {
        "model": "o3",
        "messages": [{"role": "user", "content": "Why does the loop stop?"}],
        "stream": False,
    }
    assert openai.build_request_body(request, "gpt-4.1", stream=False, reasoning=False)["temperature"] == 0.2
    assert temperature_warnings(request, True) == [
        "temperature ignored: OpenAI's reasoning models take no temperature."
    ]
    assert temperature_warnings(request, False) == []


@pytest.mark.parametrize(("model", "reasoning"), [("o3", True), ("gpt-5.1", True), ("gpt-4o", False)])
def test_an_openai_model_reasons_by_its_family_or_by_the_reasoning_that_reached_it(model: str, reasoning: bool) -> None:
    assert reasons(_request(model), model) is reasoning
    assert reasons(_request(model, reasoning=ReasoningControl(effort="low")), model) is True


def test_openai_without_an_effort_sends_no_reasoning_effort() -> None:
    body = openai.build_request_body(
        _request("gpt-5", reasoning=ReasoningControl(summary="none")), "gpt-5", stream=False
    )
    assert "reasoning_effort" not in body
    assert "verbosity" not in body


OPENAI_USAGE = {
    "prompt_tokens": 75,
    "completion_tokens": 1186,
    "total_tokens": 1261,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 1024,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}


def test_openai_reasoning_tokens_are_read_from_a_whole_answer_and_stay_in_the_output_tokens() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-5-2025-08-07",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "It stops."}, "finish_reason": "stop"}],
        "usage": OPENAI_USAGE,
    }
    usage = openai.parse_response(body, "gpt-5").usage
    assert usage == Usage(input_tokens=75, output_tokens=1186, reasoning_tokens=1024)


def test_openai_reasoning_tokens_are_read_from_the_usage_chunk_of_a_stream() -> None:
    assembler = openai.StreamAssembler(model="gpt-5")
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-5"}
    assembler.feed({**chunk, "choices": [{"index": 0, "delta": {"content": "It stops."}, "finish_reason": None}]})
    assembler.feed({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    assembler.feed({**chunk, "choices": [], "usage": OPENAI_USAGE})
    done = assembler.finish()[-1]
    assert isinstance(done, CompletionDone)
    assert done.usage == Usage(input_tokens=75, output_tokens=1186, reasoning_tokens=1024)


def test_a_compatible_server_without_details_has_reasoning_tokens_unknown() -> None:
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4, "completion_tokens_details": None},
    }
    assert openai.parse_response(body, "llama3.1").usage.reasoning_tokens is None


# --- Anthropic -----------------------------------------------------------------------------------


def _anthropic() -> AnthropicProvider:
    return AnthropicProvider(httpx.AsyncClient(), base_url="https://api.anthropic.com", api_key="k")


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("effort", EFFORTS)
def test_anthropic_thinks_with_the_budget_of_the_effort_on_top_of_the_answer_tokens(
    effort: ReasoningEffort, stream: bool
) -> None:
    request = _request("sonnet", reasoning=ReasoningControl(effort=effort))
    body, warnings = _anthropic().request_body(repaired(request), "claude-sonnet-4-5", stream=stream)
    budget = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}[effort]
    assert body == {
        "model": "claude-sonnet-4-5",
        "stream": stream,
        "thinking": {"type": "enabled", "budget_tokens": budget},
        "max_tokens": budget + DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Why does the loop stop?"}]}],
    }
    assert request_problem(body) is None  # budget >= 1024 and < max_tokens, as Anthropic requires
    assert warnings == []


def test_anthropic_with_thinking_drops_the_temperature_with_a_warning_and_keeps_max_tokens_for_the_answer() -> None:
    request = _request("sonnet", reasoning=ReasoningControl(effort="low"), temperature=0.2, max_tokens=300)
    body, warnings = _anthropic().request_body(repaired(request), "claude-sonnet-4-5", stream=False)
    assert "temperature" not in body
    assert body["max_tokens"] == 2048 + 300
    assert warnings == ["temperature ignored: Claude takes no temperature with extended thinking."]


@pytest.mark.parametrize("stream", STREAM)
def test_anthropic_does_not_think_when_a_tool_is_forced_and_says_so(stream: bool) -> None:
    request = _request(
        "sonnet", reasoning=ReasoningControl(effort="high"), tools=[SEARCH], tool_choice="required", temperature=0.2
    )
    body, warnings = _anthropic().request_body(repaired(request), "claude-sonnet-4-5", stream=stream)
    assert "thinking" not in body
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["temperature"] == 0.2
    assert body["tool_choice"] == {"type": "any"}
    assert warnings == [
        "reasoning ignored for this call: Claude cannot think when the request forces a tool, or continues a "
        "tool-use turn that began without thinking."
    ]


def test_anthropic_without_an_effort_thinks_with_the_operators_budget_or_not_at_all() -> None:
    request = _request("sonnet", reasoning=ReasoningControl(summary="auto"))
    body, _ = _anthropic().request_body(repaired(request), "claude-sonnet-4-5", stream=False)
    assert "thinking" not in body
    operator = AnthropicProvider(httpx.AsyncClient(), base_url="https://x", api_key="k", thinking_budget_tokens=4000)
    body, _ = operator.request_body(repaired(request), "claude-sonnet-4-5", stream=False)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}


# --- Gemini --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("effort", EFFORTS)
def test_gemini_2_5_gets_the_thinking_budget_of_the_effort_on_top_of_max_output_tokens(
    effort: ReasoningEffort, stream: bool
) -> None:
    # The same body goes to generateContent and streamGenerateContent: only the URL says which.
    del stream
    request = _request("gemini/gemini-2.5-flash", reasoning=ReasoningControl(effort=effort), max_tokens=400)
    body = gemini.build_request_body(request, upstream_model="gemini-2.5-flash")
    assert body == {
        "contents": [{"role": "user", "parts": [{"text": "Why does the loop stop?"}]}],
        "generationConfig": {
            "maxOutputTokens": 400 + THINKING_BUDGETS[effort],
            "thinkingConfig": {"thinkingBudget": THINKING_BUDGETS[effort]},
        },
    }


@pytest.mark.parametrize(
    ("effort", "level"), [("minimal", "low"), ("low", "low"), ("medium", "high"), ("high", "high")]
)
def test_gemini_3_gets_the_effort_as_a_thinking_level_and_no_budget(effort: ReasoningEffort, level: str) -> None:
    request = _request("gemini/gemini-3-pro-preview", reasoning=ReasoningControl(effort=effort, summary="auto"))
    body = gemini.build_request_body(request, upstream_model="gemini-3-pro-preview")
    assert body["generationConfig"] == {"thinkingConfig": {"thinkingLevel": level, "includeThoughts": True}}


@pytest.mark.parametrize(("summary", "include"), [("auto", True), ("none", False)])
def test_gemini_include_thoughts_follows_the_summary_over_the_operators_setting(summary: str, include: bool) -> None:
    request = _request("gemini/gemini-2.5-pro", reasoning=ReasoningControl(summary=summary))  # type: ignore[arg-type]
    for setting in (False, True):
        body = gemini.build_request_body(request, upstream_model="gemini-2.5-pro", include_thoughts=setting)
        assert body["generationConfig"] == {"thinkingConfig": {"includeThoughts": include}}


def test_gemini_reasoning_tokens_of_a_stream_are_the_last_chunks_thoughts_count() -> None:
    assembler = gemini.StreamAssembler(model="gemini/gemini-2.5-flash")
    usage = {"promptTokenCount": 12, "candidatesTokenCount": 3, "thoughtsTokenCount": 310, "totalTokenCount": 325}
    part = {"content": {"role": "model", "parts": [{"text": "It stops."}]}, "index": 0}
    assembler.feed({"candidates": [part], "usageMetadata": {**usage, "candidatesTokenCount": 1}})
    assembler.feed({"candidates": [{**part, "finishReason": "STOP"}], "usageMetadata": usage})
    done = assembler.finish()[-1]
    assert isinstance(done, CompletionDone)
    # candidatesTokenCount leaves the thoughts out; both are billed as output.
    assert done.usage == Usage(input_tokens=12, output_tokens=313, reasoning_tokens=310)


# --- Bedrock -------------------------------------------------------------------------------------


@pytest.mark.parametrize("effort", EFFORTS)
def test_bedrocks_claude_thinks_through_additional_model_request_fields(effort: ReasoningEffort) -> None:
    # Converse and ConverseStream take the same body.
    model = "us.anthropic.claude-sonnet-4-20250514-v1:0"
    request = _request("bedrock/" + model, reasoning=ReasoningControl(effort=effort), temperature=0.5)
    body = bedrock.build_request_body(request, upstream_model=model)
    budget = THINKING_BUDGETS[effort]
    assert body == {
        "messages": [{"role": "user", "content": [{"text": "Why does the loop stop?"}]}],
        "inferenceConfig": {"maxTokens": budget + DEFAULT_MAX_TOKENS},
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": budget}},
    }
    assert json.loads(json.dumps(body)) == body


def test_bedrocks_claude_does_not_think_when_a_tool_is_forced() -> None:
    model = "anthropic.claude-3-7-sonnet-20250219-v1:0"
    request = _request(model, reasoning=ReasoningControl(effort="low"), tools=[SEARCH], tool_choice="required")
    body = bedrock.build_request_body(request, upstream_model=model)
    assert "additionalModelRequestFields" not in body
    assert body["toolConfig"]["toolChoice"] == {"any": {}}


def test_bedrocks_other_models_get_no_thinking_fields() -> None:
    request = _request("amazon.nova-pro-v1:0", reasoning=ReasoningControl(effort="high"))
    body = bedrock.build_request_body(request, upstream_model="amazon.nova-pro-v1:0")
    assert "additionalModelRequestFields" not in body


# --- OpenAI's reasoning models and temperature, through the adapters ----------------------------


CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "o3",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}
RESPONSES_ANSWER = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "model": "o3",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
}


@pytest.mark.anyio
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_openai_reasoning_model_is_sent_no_temperature_and_the_answer_warns_of_it(api: str) -> None:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=CHAT_ANSWER if api == "chat" else RESPONSES_ANSWER)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        provider = (
            openai.OpenAIProvider(http, "https://api.openai.com/v1", "k")
            if api == "chat"
            else ResponsesProvider(http, "https://api.openai.com/v1", "k")
        )
        answer = await provider.complete(_request("o3", temperature=0.2), "o3", 10)
    assert "temperature" not in sent[0]
    assert answer.warnings == ["temperature ignored: OpenAI's reasoning models take no temperature."]
