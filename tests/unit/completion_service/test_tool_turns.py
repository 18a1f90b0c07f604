"""The one conversation repair every provider adapter gets: tool calls answered, results where they belong."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from completion_service.providers.tool_turns import NOT_RUN_RESULT, repaired
from suite_common.wire import CompletionRequest, Message, ToolCall


def _request(*messages: Message) -> CompletionRequest:
    return CompletionRequest(model="m", messages=list(messages))


def _calls(*ids: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=call_id, name="web_search") for call_id in ids])


def _result(call_id: str, content: str = "ok", *, is_error: bool | None = None) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=content, is_error=is_error)


def test_a_conversation_that_keeps_the_rules_is_passed_on_as_the_same_object() -> None:
    request = _request(
        Message(role="user", content="go"), _calls("a", "b"), _result("a"), _result("b"), _calls("a"), _result("a")
    )
    assert repaired(request) is request


def test_results_move_right_after_their_calls_in_call_order_before_user_text() -> None:
    request = _request(_calls("a", "b"), _result("b", "B"), Message(role="user", content="hurry"), _result("a", "A"))
    assert repaired(request).messages == [
        _calls("a", "b"),
        _result("a", "A"),
        _result("b", "B"),
        Message(role="user", content="hurry"),
    ]


def test_a_call_never_answered_gets_an_error_result_before_the_next_assistant_message() -> None:
    request = _request(_calls("a"), Message(role="assistant", content="moving on"))
    assert repaired(request).messages == [
        _calls("a"),
        Message(role="tool", tool_call_id="a", content=NOT_RUN_RESULT, is_error=True),
        Message(role="assistant", content="moving on"),
    ]


def test_a_conversation_ending_with_unanswered_calls_gets_their_error_results() -> None:
    assert repaired(_request(_calls("a", "b"), _result("b"))).messages == [
        _calls("a", "b"),
        Message(role="tool", tool_call_id="a", content=NOT_RUN_RESULT, is_error=True),
        _result("b"),
    ]


def test_results_that_answer_no_call_become_user_text_quoting_them() -> None:
    request = _request(
        Message(role="user", content="go"),
        _result("zz", "42"),  # before any call
        _calls("a"),
        _result("a"),
        _result("a", "again"),  # an id already answered
        _result("other", "boom", is_error=True),  # an unknown id
    )
    assert repaired(request).messages == [
        Message(role="user", content="go"),
        Message(role="user", content="Result of tool call zz:\n42"),
        _calls("a"),
        _result("a"),
        Message(role="user", content="Result of tool call a:\nagain"),
        Message(role="user", content="Result of tool call other (the tool failed):\nboom"),
    ]


def test_an_id_reused_within_one_message_is_answered_once_per_call() -> None:
    request = _request(_calls("x", "x"), _result("x", "first"))
    assert repaired(request).messages == [
        _calls("x", "x"),
        _result("x", "first"),
        Message(role="tool", tool_call_id="x", content=NOT_RUN_RESULT, is_error=True),
    ]


_ids = st.sampled_from(["a", "b", "c"])


@st.composite
def _messages(draw: st.DrawFn) -> list[Message]:
    kinds = draw(st.lists(st.sampled_from(["user", "assistant", "calls", "tool"]), min_size=1, max_size=10))
    messages = []
    for kind in kinds:
        if kind == "user":
            messages.append(Message(role="user", content=draw(st.text(max_size=5))))
        elif kind == "assistant":
            messages.append(Message(role="assistant", content="said"))
        elif kind == "calls":
            messages.append(_calls(*draw(st.lists(_ids, min_size=1, max_size=3))))
        else:
            messages.append(_result(draw(_ids), draw(st.text(max_size=5))))
    return messages


@settings(max_examples=200, deadline=None)
@given(_messages())
def test_any_conversation_comes_out_keeping_the_rules_with_nothing_lost(messages: list[Message]) -> None:
    out = repaired(CompletionRequest(model="m", messages=messages)).messages
    owed: list[str] = []
    for message in out:
        if message.role == "tool":
            assert owed
            assert owed.pop(0) == message.tool_call_id  # answers the next call, in order
        else:
            assert not owed  # nothing comes between calls and their results
            owed = [call.id for call in message.tool_calls or []]
    assert not owed
    again = CompletionRequest(model="m", messages=out)
    assert repaired(again) is again  # mending twice changes nothing
    kept = [m for m in out if m.role != "tool" or m.content != NOT_RUN_RESULT]
    for message in messages:  # every text and result is still there, as itself or quoted
        if message.role == "tool":
            assert any(message == m or (m.role == "user" and (m.text or "").endswith(message.text or "")) for m in kept)
        else:
            assert message in out
