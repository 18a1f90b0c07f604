"""The call path over real MCP servers that misbehave, over stdio and over streamable HTTP.

Each transport gets one gateway with two servers: "trouble" (tests/support/misbehaving_mcp_server.py,
a call timeout of its own of 2 s) and "steady" (the echo server), which must keep serving
whatever "trouble" does. Results are capped at 1,000 characters.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from suite_common.echo import MAX_ECHO_CHARS
from support.mcp_gateway import FAST_RETRIES, Gateway, echo_http_server, running_gateway
from support.misbehaving_mcp_server import misbehaving_server

pytestmark = pytest.mark.anyio

CALL = "/mcp/v1/tools/call-tool"

SERVER_CALL_TIMEOUT = 2.0

VALID_TRIP: dict[str, Any] = {
    "traveller": {"name": "Ada", "age": 36},
    "legs": [{"from": "LHR", "to": "JFK", "when": "2026-03-01"}],
}


@dataclass
class Trouble:
    gateway: Gateway
    side_effects: Path

    def calls_that_reached_the_tool(self) -> list[str]:
        return self.side_effects.read_text().splitlines() if self.side_effects.exists() else []


@pytest.fixture(scope="module", params=["stdio", "streamable-http"])
async def trouble(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Trouble]:
    side_effects = tmp_path_factory.mktemp("trouble") / "calls.txt"
    modes = ["hang", "hang-ignoring-cancel", "bad-output", "huge-result", "strict-schemas"]
    async with (
        misbehaving_server(
            request.param, modes, side_effects=side_effects, callTimeoutSeconds=SERVER_CALL_TIMEOUT
        ) as entry,
        echo_http_server("steady", tool_prefix="steady_") as steady_url,
        running_gateway(
            {"trouble": entry, "steady": {"url": steady_url}},
            **FAST_RETRIES,
            max_result_chars=1000,
        ) as gateway,
    ):
        await gateway.wait_until_ready("trouble", "steady")
        yield Trouble(gateway=gateway, side_effects=side_effects)


async def _call(gateway: Gateway, name: str, arguments: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = await gateway.http.post(CALL, json={"name": name, "arguments": arguments}, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _text(result: dict[str, Any]) -> str:
    text: str = result["content"][0]["text"]
    return text


async def _steady_still_serves(gateway: Gateway) -> None:
    result = await _call(gateway, "steady_echo", {"text": "still here"})
    assert (result["isError"], _text(result)) == (False, "still here")


async def test_arguments_that_break_the_input_schema_are_refused_naming_each_field(trouble: Trouble) -> None:
    trip = {
        "traveller": {"name": "Ada", "age": "36"},
        "legs": [{"from": "LHR", "to": "JFK", "when": "next tuesday"}],
        "cabin": "first",
    }

    result = await _call(trouble.gateway, "plan_trip", trip)

    assert result["isError"] is True
    assert result["server"] == "trouble"
    text = _text(result)
    assert text.startswith('The arguments do not match the inputSchema of the tool "plan_trip", so it was not called: ')
    assert '$.cabin: must be one of "economy", "business"; got string "first"' in text
    assert "$.legs[0].when: matches none of the allowed alternatives" in text
    assert '$.traveller.age: expected integer, got string "36"' in text
    assert text.endswith("Correct the arguments and call it again.")
    assert trouble.calls_that_reached_the_tool() == []


async def test_an_unknown_argument_with_a_huge_name_is_named_clipped(trouble: Trouble) -> None:
    key = "k" * 10_000
    trip = {"traveller": {"name": "Ada", "age": 36}, "legs": [], key: 1}

    text = _text(await _call(trouble.gateway, "plan_trip", trip))

    assert f'$["{key[: MAX_ECHO_CHARS - 1]}…"]: is not an accepted property' in text
    assert key not in text
    assert trouble.calls_that_reached_the_tool() == []


async def test_arguments_that_fit_the_schema_reach_the_tool_once(trouble: Trouble) -> None:
    before = len(trouble.calls_that_reached_the_tool())

    result = await _call(trouble.gateway, "plan_trip", VALID_TRIP)

    assert (result["isError"], _text(result), result["structuredContent"]) == (False, "1 legs planned", {"legs": 1})
    assert len(trouble.calls_that_reached_the_tool()) == before + 1


async def test_a_result_that_breaks_its_output_schema_is_an_error_naming_the_field(trouble: Trouble) -> None:
    wrong = await _call(trouble.gateway, "wrong_output", {})
    missing = await _call(trouble.gateway, "missing_output", {})

    assert wrong["isError"] is True
    assert "structuredContent" not in wrong
    assert _text(wrong).startswith(
        'The tool "wrong_output" broke its own contract: its structuredContent does not match the outputSchema '
        'it declares ($.count: expected integer, got string "many")'
    )
    assert missing["isError"] is True
    assert _text(missing).startswith(
        'The tool "missing_output" broke its own contract: it declares an outputSchema but sent no structuredContent.'
    )
    await _steady_still_serves(trouble.gateway)


async def test_a_huge_result_is_cut_with_markers(trouble: Trouble) -> None:
    huge = await _call(trouble.gateway, "huge_result", {"chars": 50_000})
    image = await _call(trouble.gateway, "huge_image", {"size": 20_000})

    text, marker = huge["content"]
    kept = 1000 - len('{"type":"text","text":""}')  # the block's own JSON counts against the limit too
    assert text["text"].startswith("y" * kept + f"\n[... cut here: {50_000 - kept} more characters left out of this")
    assert marker["text"].startswith("[... cut here: structuredContent of 50012 characters left out")
    assert "structuredContent" not in huge
    assert huge["isError"] is False
    assert image["content"][0] == {"type": "text", "text": "an image"}
    assert image["content"][1]["type"] == "text"
    assert image["content"][1]["text"].startswith("[... cut here: an image block of ")
    await _steady_still_serves(trouble.gateway)


async def test_a_hung_call_ends_at_the_servers_own_timeout_and_the_server_gets_the_cancellation(
    trouble: Trouble,
) -> None:
    started = time.monotonic()
    result = await _call(trouble.gateway, "hang", {"tag": "server-timeout"})
    elapsed = time.monotonic() - started

    assert result["isError"] is True
    assert _text(result) == (
        'The tool "hang" did not finish within 2 s, so the gateway gave up on it and told the MCP server '
        '"trouble" to cancel it. It may have partly run; it was not retried.'
    )
    assert SERVER_CALL_TIMEOUT <= elapsed < SERVER_CALL_TIMEOUT + 3  # not the gateway's default of 60 s
    # The server saw its handler for that request cancelled (stdio: notifications/cancelled;
    # streamable HTTP at protocol 2026: the request's POST aborted).
    with anyio.fail_after(10):
        cancelled = await _call(trouble.gateway, "hang_status", {"tag": "server-timeout", "event": "cancelled"})
    assert _text(cancelled).startswith("server-timeout cancelled: request ")


async def test_the_callers_deadline_shortens_the_servers_timeout(trouble: Trouble) -> None:
    started = time.monotonic()
    result = await _call(trouble.gateway, "hang", {"tag": "caller-deadline"}, **{"X-Deadline-Ms": "300"})
    elapsed = time.monotonic() - started

    assert "did not finish within 0.3 s" in _text(result)
    assert elapsed < SERVER_CALL_TIMEOUT
    with anyio.fail_after(10):
        cancelled = await _call(trouble.gateway, "hang_status", {"tag": "caller-deadline", "event": "cancelled"})
    assert _text(cancelled).startswith("caller-deadline cancelled: request ")


async def test_a_deadline_beyond_the_servers_timeout_does_not_lengthen_it(trouble: Trouble) -> None:
    with anyio.fail_after(SERVER_CALL_TIMEOUT + 5):
        result = await _call(trouble.gateway, "hang", {"tag": "long-deadline"}, **{"X-Deadline-Ms": "60000"})

    assert "did not finish within 2 s" in _text(result)


async def test_a_tool_that_ignores_cancellation_still_ends_at_the_deadline_and_the_session_keeps_serving(
    trouble: Trouble,
) -> None:
    started = time.monotonic()
    result = await _call(
        trouble.gateway, "hang_ignoring_cancel", {"tag": "stubborn", "seconds": 60}, **{"X-Deadline-Ms": "300"}
    )

    assert time.monotonic() - started < SERVER_CALL_TIMEOUT
    assert result["isError"] is True
    assert "did not finish within 0.3 s" in _text(result)
    # The tool is still running on the server; the same session answers other calls meanwhile.
    assert _text(await _call(trouble.gateway, "echo", {"text": "next"})) == "next"
    await _steady_still_serves(trouble.gateway)


async def test_a_slow_call_does_not_hold_up_a_fast_one_on_the_same_session(trouble: Trouble) -> None:
    finished: list[str] = []

    async def slow_caller() -> None:
        await _call(trouble.gateway, "hang", {"tag": "head-of-line"})
        finished.append("slow")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_caller)
            await _call(trouble.gateway, "hang_status", {"tag": "head-of-line", "event": "started"})

            fast = await _call(trouble.gateway, "echo", {"text": "fast"})
            finished.append("fast")

            assert _text(fast) == "fast"
            assert finished == ["fast"]  # the slow call is still in flight on the same session
            tg.cancel_scope.cancel()  # its caller goes away, which cancels it on the server

        cancelled = await _call(trouble.gateway, "hang_status", {"tag": "head-of-line", "event": "cancelled"})

    assert _text(cancelled).startswith("head-of-line cancelled: request ")
