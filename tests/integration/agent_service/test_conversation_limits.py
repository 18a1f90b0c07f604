"""What one conversation may hold, through the real services: its size and its runs are capped, a run refused before
the model answered adds nothing to it, and it is read in pages.

agent-service stores in SQLite (the store's own tests run both backends) with small limits (2 KiB of messages, four
runs); the tools are the echo MCP server's behind a real mcp-client-service; only the LLM is scripted.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from support import fake_openai
from support.stacks import AgentStack, running_stack

pytestmark = pytest.mark.anyio

MAX_BYTES = 2048
MAX_RUNS = 4


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentStack]:
    database_url = f"sqlite:///{tmp_path_factory.mktemp('conversations')}/agent.db"
    async with running_stack(
        database_url=database_url, conversation_max_bytes=MAX_BYTES, conversation_max_runs=MAX_RUNS
    ) as stack:
        yield stack


def _conversation_id() -> str:
    return "conv_" + uuid.uuid4().hex


async def _run(stack: AgentStack, conversation: str, content: str) -> httpx.Response:
    body = {"model": "gpt-4o", "conversationId": conversation, "messages": [{"role": "user", "content": content}]}
    return await stack.http.post("/api/v1/agent/run", json=body)


async def _answered(stack: AgentStack, conversation: str, content: str, answer: str = "done") -> None:
    stack.llm.push(fake_openai.text(answer))
    response = await _run(stack, conversation, content)
    assert response.status_code == 200, response.text


async def _conversation(stack: AgentStack, conversation: str, **params: Any) -> httpx.Response:
    return await stack.http.get(f"/api/v1/agent/conversations/{conversation}", params=params)


async def test_a_run_the_model_refused_leaves_its_conversation_as_it_was(stack: AgentStack) -> None:
    conversation = _conversation_id()
    await _answered(stack, conversation, "first question")
    before = (await _conversation(stack, conversation)).json()
    stack.llm.push(fake_openai.error(413, fake_openai.openai_error_body(413, "Request too large.")))

    refused = await _run(stack, conversation, "a question the provider refuses")

    assert refused.status_code == 400, refused.text
    after = (await _conversation(stack, conversation)).json()
    assert (after["messages"], after["runs"]) == (before["messages"], before["runs"])
    sent = len(stack.llm.requests)
    await _answered(stack, conversation, "second question")
    contents = [message.get("content") for message in stack.llm.requests[sent]["messages"]]
    assert contents == ["first question", "done", "second question"], "the refused input is not sent again"


async def test_a_run_that_would_take_its_conversation_past_its_size_is_a_413_naming_the_limit(
    stack: AgentStack,
) -> None:
    conversation = _conversation_id()
    await _answered(stack, conversation, "short")
    before = (await _conversation(stack, conversation)).json()
    sent = len(stack.llm.requests)

    refused = await _run(stack, conversation, "x" * MAX_BYTES)

    assert refused.status_code == 413, refused.text
    error = refused.json()["error"]
    assert error["code"] == "conversation_too_large"
    assert f"its limit of {MAX_BYTES} bytes" in error["message"]
    assert len(stack.llm.requests) == sent, "no LLM call"
    assert (await _conversation(stack, conversation)).json()["messages"] == before["messages"]
    new = _conversation_id()
    assert (await _run(stack, new, "y" * MAX_BYTES)).status_code == 413
    assert (await _conversation(stack, new)).status_code == 404, "nothing stored"


async def test_a_run_past_its_conversations_count_of_runs_is_a_409_naming_the_limit(stack: AgentStack) -> None:
    conversation = _conversation_id()
    for index in range(MAX_RUNS):
        await _answered(stack, conversation, f"question {index}")

    refused = await _run(stack, conversation, "one more")

    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "conversation_full"
    assert f"has {MAX_RUNS} runs, its limit" in error["message"]
    assert len((await _conversation(stack, conversation)).json()["runs"]) == MAX_RUNS


async def test_a_conversation_is_read_in_pages_newest_first_each_in_order(stack: AgentStack) -> None:
    conversation = _conversation_id()
    for index in range(3):
        await _answered(stack, conversation, f"question {index}", f"answer {index}")
    whole = await _conversation(stack, conversation)
    assert whole.status_code == 200
    assert "earlier" not in whole.json(), "one page: answered as before paging"
    assert len(whole.json()["messages"]) == 6

    latest = (await _conversation(stack, conversation, limit=3)).json()
    assert [m["content"] for m in latest["messages"]] == ["answer 1", "question 2", "answer 2"]
    assert [run["runId"] for run in latest["runs"]] == [run["runId"] for run in whole.json()["runs"][1:]]
    middle = (await _conversation(stack, conversation, limit=3, before=latest["earlier"])).json()
    assert [m["content"] for m in middle["messages"]] == ["question 0", "answer 0", "question 1"]
    assert "earlier" not in middle
    assert middle["messages"] + latest["messages"] == whole.json()["messages"]

    for params in (
        {"limit": 0},
        {"limit": 1001},
        {"before": "nonsense"},
        {"before": "run_unknown:0"},
        {"before": "run_x:²"},
    ):
        bad = await _conversation(stack, conversation, **params)
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_request"), params
