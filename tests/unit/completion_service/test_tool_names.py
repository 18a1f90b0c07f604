"""Tool names mapped to what each provider accepts and back: properties over any names, and examples."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from completion_service.providers import anthropic, bedrock, gemini, openai
from completion_service.providers._adapter import HttpAdapter, Outbound
from completion_service.providers._transport import Upstream
from completion_service.providers.tool_names import NameRule, ToolNames, safe_names
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    Message,
    NamedToolChoice,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
)

RULES = {"openai": openai.TOOL_NAMES, "gemini": gemini.TOOL_NAMES}

# What MCP servers send: mostly plain names, some with dots, spaces, non-ASCII letters, up to 128 characters.
_names = st.one_of(
    st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True),
    st.from_regex(r"[a-z]{1,10}[.: /][a-z]{1,10}", fullmatch=True),
    st.text(min_size=1, max_size=128),
)
_catalogs = st.lists(_names, min_size=1, max_size=12, unique=True)
_rules = st.sampled_from(sorted(RULES))


def _request(names: list[str], choice: str | None = None) -> CompletionRequest:
    history = [
        Message(role="user", content="q"),
        Message(role="assistant", tool_calls=[ToolCall(id=f"c{n}", name=name) for n, name in enumerate(names)]),
        *(Message(role="tool", tool_call_id=f"c{n}", content="r") for n in range(len(names))),
    ]
    return CompletionRequest(
        model="m",
        messages=history,
        tools=[ToolSpec(name=name) for name in names],
        tool_choice=NamedToolChoice(name=choice) if choice else "auto",
    )


@given(_catalogs, _rules)
def test_every_name_sent_is_one_the_provider_accepts(names: list[str], rule_name: str) -> None:
    rule = RULES[rule_name]
    names_map = ToolNames.plan(_request(names, names[0]), rule)
    sent = _request(names, names[0]) if names_map is None else names_map.outbound(_request(names, names[0]))
    assert all(rule.accepts(tool.name) for tool in sent.tools)
    assert all(rule.accepts(call.name) for call in sent.messages[1].tool_calls or [])
    assert isinstance(sent.tool_choice, NamedToolChoice)
    assert rule.accepts(sent.tool_choice.name)


@given(_catalogs, _rules)
def test_valid_names_stay_as_they_are_and_no_two_names_share_a_safe_name(names: list[str], rule_name: str) -> None:
    rule = RULES[rule_name]
    mapping = safe_names(names, rule)
    assert not any(rule.accepts(name) for name in mapping)
    assert set(mapping) == {name for name in names if not rule.accepts(name)}
    sent = [mapping.get(name, name) for name in names]
    assert len(set(sent)) == len(names)


@given(_catalogs, _rules, st.randoms(use_true_random=False))
def test_the_mapping_does_not_depend_on_the_order_of_the_names(
    names: list[str], rule_name: str, rng: random.Random
) -> None:
    shuffled = list(names)
    rng.shuffle(shuffled)
    assert safe_names(shuffled, RULES[rule_name]) == safe_names(names, RULES[rule_name])


@given(_catalogs, _rules)
def test_the_models_calls_come_back_under_the_callers_names(names: list[str], rule_name: str) -> None:
    request = _request(names)
    names_map = ToolNames.plan(request, RULES[rule_name])
    if names_map is None:
        return
    offered = [tool.name for tool in names_map.outbound(request).tools]
    calls = [ToolCall(id=f"r{n}", name=name) for n, name in enumerate(offered)]
    response = CompletionResponse(
        message=Message(role="assistant", tool_calls=calls), finish_reason="tool_calls", model="m", provider="p"
    )
    assert [call.name for call in names_map.inbound(response).message.tool_calls or []] == names
    events = [names_map.inbound_event(ToolCallEvent(id=call.id, name=call.name)) for call in calls]
    assert [event.name for event in events if isinstance(event, ToolCallEvent)] == names


def test_a_request_whose_names_are_all_valid_needs_no_mapping() -> None:
    assert ToolNames.plan(_request(["search_documents", "web-search"], "web-search"), openai.TOOL_NAMES) is None


@pytest.mark.parametrize(
    ("name", "openai_name", "gemini_name"),
    [
        ("web.search", "web_search", "web.search"),
        ("Café Menu", "Cafe_Menu", "Cafe_Menu"),
        ("files/read text", "files_read_text", "files_read_text"),
        ("3d-render", "3d-render", "_3d-render"),
        ("ns:tool", "ns_tool", "ns_tool"),
        ("搜索", "tool", "tool"),
        ("x" * 100, "x" * 64, "x" * 64),
    ],
)
def test_a_safe_name_stays_readable(name: str, openai_name: str, gemini_name: str) -> None:
    assert safe_names([name], openai.TOOL_NAMES).get(name, name) == openai_name
    assert safe_names([name], gemini.TOOL_NAMES).get(name, name) == gemini_name


def test_a_safe_name_that_is_taken_gets_a_hash_of_the_original() -> None:
    mapping = safe_names(["web_search", "web.search", "web search"], openai.TOOL_NAMES)
    # "web_search" is valid and stays: both others would read "web_search", so each gets its own hash.
    assert mapping["web.search"].startswith("web_search_")
    assert len(mapping["web.search"]) == len("web_search_") + 8
    assert mapping["web search"].startswith("web_search_")
    assert mapping["web search"] != mapping["web.search"]


def test_other_events_pass_through_unchanged() -> None:
    names_map = ToolNames.plan(_request(["web.search"]), openai.TOOL_NAMES)
    assert names_map is not None
    delta = TextDelta(delta="web_search")
    assert names_map.inbound_event(delta) is delta


def test_the_providers_rules_are_those_of_their_api_references() -> None:
    for ascii_64 in (openai.TOOL_NAMES, anthropic.TOOL_NAMES, bedrock.TOOL_NAMES):
        assert ascii_64.accepts("a" * 64)
        assert not ascii_64.accepts("a" * 65)
        assert ascii_64.accepts("3d-render_x")
        assert not ascii_64.accepts("web.search")
    assert gemini.TOOL_NAMES.accepts("web.search")
    assert gemini.TOOL_NAMES.accepts("_x")
    assert not gemini.TOOL_NAMES.accepts("3d")
    assert not gemini.TOOL_NAMES.accepts("a" * 65)


class _Recording(HttpAdapter):
    """An adapter whose wire format answers with a call of the first tool offered, and keeps what it was asked."""

    name = "recording"

    def __init__(self, rule: NameRule) -> None:
        self.tool_names = rule
        self.requests: list[CompletionRequest] = []
        self._http = httpx.AsyncClient(transport=httpx.MockTransport(self._answer))
        self._upstream = Upstream(self._http, provider=self.name, base_url="http://model.test")
        self._offered: list[str] = []

    def _answer(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"call": self._offered[0]})

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        self.requests.append(request)
        self._offered = [tool.name for tool in request.tools]

        def build() -> httpx.Request:
            return self._http.build_request("POST", "http://model.test/answer")

        return Outbound(self._upstream, build, lambda status, content, headers: ApiError(400, "x", "x"))

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        call = ToolCall(id="c1", name=body["call"])
        return CompletionResponse(
            message=Message(role="assistant", tool_calls=[call]), finish_reason="tool_calls", model="m", provider="p"
        )


def _calls(events: list[CompletionEvent]) -> list[ToolCallEvent]:
    return [event for event in events if isinstance(event, ToolCallEvent)]


@pytest.mark.anyio
async def test_a_request_with_valid_names_reaches_the_wire_format_as_the_very_same_object() -> None:
    provider = _Recording(openai.TOOL_NAMES)
    request = _request(["search_documents"], "search_documents")
    await provider.complete(request, "m", 1)
    events = [event async for event in provider.stream(request, "m", 1)]  # answered with one JSON body
    assert _calls(events) == [ToolCallEvent(id="c1", name="search_documents")]
    assert provider.requests[0] is request
    assert provider.requests[1] is request


@pytest.mark.anyio
async def test_a_request_with_invalid_names_is_mapped_both_ways() -> None:
    provider = _Recording(bedrock.TOOL_NAMES)
    response = await provider.complete(_request(["web.search"]), "m", 1)
    events = [event async for event in provider.stream(_request(["web.search"]), "m", 1)]
    assert [tool.name for tool in provider.requests[0].tools] == ["web_search"]
    assert [call.name for call in response.message.tool_calls or []] == ["web.search"]
    assert _calls(events) == [ToolCallEvent(id="c1", name="web.search")]
