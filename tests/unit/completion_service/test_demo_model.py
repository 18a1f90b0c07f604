"""The `demo` model: deterministic, not an LLM, and useful enough to drive a whole agent run."""

from __future__ import annotations

from typing import Any

import pytest

from completion_service.providers.demo import DemoProvider, demo_completion, fitting_tools, schema_arguments
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionDone,
    CompletionRequest,
    Message,
    NamedToolChoice,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
)

QUESTION = "Search the documents: how does the agent loop stop?"

SEARCH_DOCUMENTS = ToolSpec(
    name="search_documents",
    description="Find the passages of the indexed documents that answer a query.",
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}},
        "required": ["query"],
    },
)
GET_WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def _request(messages: list[Message] | None = None, **fields: Any) -> CompletionRequest:
    return CompletionRequest(
        model="demo",
        messages=messages or [Message(role="user", content=QUESTION)],
        tools=fields.pop("tools", [SEARCH_DOCUMENTS, GET_WEATHER]),
        **fields,
    )


def test_it_calls_the_tool_that_fits_the_question_with_arguments_from_its_schema() -> None:
    response = demo_completion(_request())
    assert response.finish_reason == "tool_calls"
    assert response.message.content is None
    assert response.message.tool_calls == [
        ToolCall(id="call_demo_1", name="search_documents", arguments={"query": QUESTION})
    ]
    assert (response.model, response.provider) == ("demo", "demo")
    assert response.usage.input_tokens == len(QUESTION.split())


def test_the_tools_that_fit_equally_well_are_called_at_once_in_one_turn() -> None:
    search_notes = ToolSpec(name="search_notes", description="Search the notes for documents.")
    search_mail = ToolSpec(name="search_mail", description="Search the mail for documents.")
    response = demo_completion(
        _request([Message(role="user", content="search documents")], tools=[search_notes, search_mail, GET_WEATHER])
    )
    assert [(c.id, c.name) for c in response.message.tool_calls or []] == [
        ("call_demo_1", "search_notes"),
        ("call_demo_2", "search_mail"),
    ]


# The tools make run starts, as the gateway lists them (names, descriptions, required arguments).
WEB_SEARCH = ToolSpec(
    name="web_search",
    description="Search the web and return the top results, best first: title, URL, a short snippet.",
    input_schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
FETCH_URL = ToolSpec(
    name="fetch_url",
    description="Fetch one public web page and return its main text. Use it to read a result of web_search.",
    input_schema={
        "type": "object",
        "properties": {"url": {"type": "string", "description": "The http:// or https:// URL of the page."}},
        "required": ["url"],
    },
)
LIST_SOURCES = ToolSpec(
    name="list_sources",
    description="List the indexed documents. Use it to find a source_prefix for a search_documents filter.",
    input_schema={"type": "object", "properties": {"limit": {"type": "integer", "default": 100}}},
)


def test_the_readmes_question_calls_search_documents_only_among_every_tool_make_run_offers() -> None:
    # Sharing "search" with the question, web_search (no internet) and fetch_url (the question as its URL) were
    # called too, and failed in red: on a fresh console, with every tool switched on.
    question = "Search the documents: how does the agent loop decide when to stop?"
    tools = [LIST_SOURCES, SEARCH_DOCUMENTS, FETCH_URL, WEB_SEARCH]
    response = demo_completion(_request([Message(role="user", content=question)], tools=tools))
    assert [(c.name, c.arguments) for c in response.message.tool_calls or []] == [
        ("search_documents", {"query": question})
    ]


def test_a_question_naming_the_web_calls_web_search_rather_than_the_documents() -> None:
    question = "Search the web for the latest MCP specification"
    response = demo_completion(_request([Message(role="user", content=question)], tools=[SEARCH_DOCUMENTS, WEB_SEARCH]))
    assert [c.name for c in response.message.tool_calls or []] == ["web_search"]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
        {"type": "object", "properties": {"pageUrl": {"type": "string"}}, "required": ["pageUrl"]},
        {"type": "object", "properties": {"target": {"type": "string", "format": "uri"}}, "required": ["target"]},
        {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}}, "required": ["when"]},
        {
            "type": "object",
            "properties": {"page": {"$ref": "#/$defs/Page"}},
            "required": ["page"],
            "$defs": {"Page": {"type": "object", "properties": {"link": {"type": "string"}}, "required": ["link"]}},
        },
    ],
)
def test_a_tool_needing_an_argument_the_question_cannot_be_is_not_called(schema: dict[str, Any]) -> None:
    fetch = ToolSpec(name="fetch_page", description="Fetch the page the question names.", input_schema=schema)
    assert fitting_tools("fetch the page about deadlines", [fetch]) == []


def test_an_optional_url_or_a_url_with_a_default_choice_does_not_stop_a_call() -> None:
    schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "url": {"type": "string"},
            "site": {"type": "string", "enum": ["https://example.org"]},
        },
        "required": ["query", "site"],
    }
    fetch = ToolSpec(name="fetch_page", description="Fetch the page the question names.", input_schema=schema)
    assert fitting_tools("fetch the page about deadlines", [fetch]) == [fetch]


def test_a_required_or_named_tool_choice_still_calls_a_tool_needing_a_url() -> None:
    for choice in ("required", NamedToolChoice(name="fetch_url")):
        response = demo_completion(_request(tools=[FETCH_URL], tool_choice=choice))
        assert [c.name for c in response.message.tool_calls or []] == ["fetch_url"]


def test_arguments_cover_every_required_property_by_type() -> None:
    schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": 10},
            "top_k": {"type": "integer"},
            "page": {"type": "integer", "minimum": 2, "maximum": 9},
            "temperature": {"type": "number", "default": 0.5},
            "exact": {"type": "boolean"},
            "fresh": {"type": "boolean", "default": True},
            "mode": {"type": "string", "enum": ["fast", "deep"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "filter": {"$ref": "#/$defs/Filter"},
            "since": {"anyOf": [{"type": "null"}, {"type": "integer", "default": 3}]},
            "optional": {"type": "string"},
        },
        "required": ["query", "top_k", "page", "temperature", "exact", "fresh", "mode", "tags", "filter", "since"],
        "$defs": {
            "Filter": {
                "type": "object",
                "properties": {"lang": {"type": "string"}, "year": {"type": "integer"}},
                "required": ["lang"],
            }
        },
    }
    assert schema_arguments(schema, "what is new in python") == {
        "query": "what is ne",
        "top_k": 5,
        "page": 2,
        "temperature": 0.5,
        "exact": False,
        "fresh": True,
        "mode": "fast",
        "tags": ["what is new in python"],
        "filter": {"lang": "what is new in python"},
        "since": 3,
    }


def test_given_tool_results_it_answers_citing_what_each_tool_returned() -> None:
    long_result = "architecture.md: the loop stops on a final answer, 15 iterations or the deadline. " + "x" * 1000
    messages = [
        Message(role="user", content=QUESTION),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="call_demo_1", name="search_documents", arguments={"query": QUESTION}),
                ToolCall(id="call_demo_2", name="get_weather", arguments={"city": "x"}),
            ],
        ),
        Message(role="tool", tool_call_id="call_demo_1", content=long_result),
        Message(role="tool", tool_call_id="call_demo_2", content="unknown city", is_error=True),
    ]
    response = demo_completion(_request(messages))
    assert response.finish_reason == "stop"
    assert response.message.tool_calls is None
    answer = response.message.content or ""
    assert "not an LLM" in answer
    assert "[1] search_documents: architecture.md: the loop stops on a final answer" in answer
    assert "[2] get_weather (failed): unknown city" in answer
    assert "x" * 500 not in answer  # each result is quoted, not pasted whole


def test_when_no_tool_fits_it_answers_by_echoing_the_question_and_how_to_configure_a_model() -> None:
    response = demo_completion(_request([Message(role="user", content="hello there")]))
    assert response.finish_reason == "stop"
    answer = response.message.content or ""
    assert 'You asked: "hello there"' in answer
    assert "not an LLM" in answer
    assert "COMPLETION_OPENAI_API_KEY" in answer


def test_tool_choice_none_answers_even_when_a_tool_fits() -> None:
    response = demo_completion(_request(tool_choice="none"))
    assert response.finish_reason == "stop"
    assert response.message.tool_calls is None


def test_tool_choice_required_calls_every_offered_tool() -> None:
    response = demo_completion(_request([Message(role="user", content="hello")], tool_choice="required"))
    assert [(c.name, c.arguments) for c in response.message.tool_calls or []] == [
        ("search_documents", {"query": "hello"}),
        ("get_weather", {"city": "hello"}),
    ]


def test_a_named_tool_choice_calls_that_tool_even_when_it_does_not_fit() -> None:
    response = demo_completion(_request(tool_choice=NamedToolChoice(name="get_weather")))
    assert [c.name for c in response.message.tool_calls or []] == ["get_weather"]


def test_a_named_tool_choice_that_is_not_offered_is_a_400() -> None:
    with pytest.raises(ApiError) as caught:
        demo_completion(_request(tool_choice=NamedToolChoice(name="rm_rf")))
    assert caught.value.status == 400


def test_tool_call_ids_stay_unique_over_a_conversation_of_several_questions() -> None:
    messages = [
        Message(role="user", content=QUESTION),
        Message(role="assistant", tool_calls=[ToolCall(id="call_demo_1", name="search_documents")]),
        Message(role="tool", tool_call_id="call_demo_1", content="result"),
        Message(role="assistant", content="answer"),
        Message(role="user", content="And search the documents for the deadline?"),
    ]
    response = demo_completion(_request(messages))
    assert [c.id for c in response.message.tool_calls or []] == ["call_demo_2"]


@pytest.mark.parametrize("choice", ["auto", "required", NamedToolChoice(name="search_documents")])
def test_the_same_request_always_gets_the_same_answer(choice: ToolChoice) -> None:
    assert demo_completion(_request(tool_choice=choice)) == demo_completion(_request(tool_choice=choice))


@pytest.mark.anyio
async def test_streamed_answer_is_the_same_text_in_several_deltas_then_done() -> None:
    request = _request([Message(role="user", content="hello there, what can you do for me today?")])
    events = [event async for event in DemoProvider().stream(request, "demo", 10)]
    deltas = [event.delta for event in events if isinstance(event, TextDelta)]
    assert len(deltas) > 3
    assert "".join(deltas) == demo_completion(request).message.content
    assert events[-1] == CompletionDone(
        finish_reason="stop", usage=demo_completion(request).usage, model="demo", provider="demo"
    )


@pytest.mark.anyio
async def test_streamed_tool_calls_come_as_tool_call_events_then_done() -> None:
    events = [event async for event in DemoProvider().stream(_request(), "demo", 10)]
    assert events[0] == ToolCallEvent(id="call_demo_1", name="search_documents", arguments={"query": QUESTION})
    assert isinstance(events[1], CompletionDone)
    assert events[1].finish_reason == "tool_calls"
    assert len(events) == 2


def test_the_demo_never_calls_a_tool_whose_name_says_it_changes_something() -> None:
    tools = [
        ToolSpec(name="search_documents", description="Search the documents."),
        ToolSpec(name="add_documents", description="Add documents to the index."),
        ToolSpec(name="deleteDocuments", description="Delete documents."),
    ]
    assert [tool.name for tool in fitting_tools("search the documents please", tools)] == ["search_documents"]
