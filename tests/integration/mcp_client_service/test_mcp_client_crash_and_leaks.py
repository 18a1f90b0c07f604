"""A server that dies in the middle of a call, and what misbehaving servers leave behind.

A call cut off by a crash has an unknown outcome and is not retried. Each test has a gateway
of its own, so that what it leaves behind (child processes, tasks) can be counted once it has
shut down.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from support.mcp_gateway import FAST_RETRIES, WAIT_SECONDS, Gateway, echo_http_server, running_gateway
from support.misbehaving_mcp_server import misbehaving_server

pytestmark = pytest.mark.anyio

CALL = "/mcp/v1/tools/call-tool"


def _child_processes() -> set[int]:
    """This process's children, zombies included (an unreaped child is a leak too)."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while being looked at
        if int(fields[1]) == os.getpid():
            children.add(int(stat.parent.name))
    return children


async def _call(gateway: Gateway, name: str, arguments: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = await gateway.http.post(CALL, json={"name": name, "arguments": arguments}, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_a_server_that_crashes_mid_call_gives_an_unknown_outcome_the_tool_ran_once_and_nothing_leaks(
    transport: str, tmp_path: Path
) -> None:
    side_effects = tmp_path / "calls.txt"
    children_before = _child_processes()
    tasks_before = asyncio.all_tasks()

    async with (
        misbehaving_server(transport, ["crash-mid-call"], side_effects=side_effects) as entry,
        echo_http_server("steady") as steady_url,
        running_gateway({"crashy": entry, "steady": {"url": steady_url}}, **FAST_RETRIES) as gateway,
    ):
        await gateway.wait_until_ready("crashy", "steady")

        result = await _call(gateway, "crash_mid_call", {"note": "charge the card"})

        assert result["isError"] is True
        assert result["server"] == "crashy"
        assert result["content"][0]["text"] == (
            'The connection to the MCP server "crashy" dropped during the call to "crash_mid_call", so its outcome '
            "is unknown: the tool may or may not have run. The call was not retried, so that it cannot run twice; "
            "check before calling it again. The gateway reconnects by itself."
        )
        # The other server is not disturbed.
        assert (await _call(gateway, "whoami", {}))["content"] == [{"type": "text", "text": "steady"}]
        if transport == "stdio":
            # The gateway starts the child again; even then the call is not replayed.
            crashy = gateway.registry.connections["crashy"]
            with anyio.fail_after(WAIT_SECONDS):
                await gateway.registry.wait_until(lambda _: crashy.attempts >= 2 and crashy.state == "ready")
            assert (await _call(gateway, "echo", {"text": "back"}))["content"] == [{"type": "text", "text": "back"}]

    assert side_effects.read_text().splitlines() == ["charge the card"]
    assert _child_processes() == children_before
    assert asyncio.all_tasks() - tasks_before == set()


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_a_gateway_shut_down_amid_misbehaving_calls_leaves_no_process_and_no_task(
    transport: str, tmp_path: Path
) -> None:
    children_before = _child_processes()
    tasks_before = asyncio.all_tasks()
    modes = ["hang", "hang-ignoring-cancel", "bad-output", "huge-result"]

    async with (
        misbehaving_server(transport, modes, side_effects=tmp_path / "calls.txt") as entry,
        running_gateway({"trouble": entry}, max_result_chars=1000, **FAST_RETRIES) as gateway,
    ):
        await gateway.wait_until_ready("trouble")
        pid = (await _call(gateway, "pid", {}))["structuredContent"]["pid"]
        deadline = {"X-Deadline-Ms": "200"}
        outcomes = [
            await _call(gateway, "hang", {"tag": "a"}, **deadline),
            await _call(gateway, "wrong_output", {}),
            await _call(gateway, "huge_result", {"chars": 20_000}),
        ]
        assert [result["isError"] for result in outcomes] == [True, True, False]

        async with anyio.create_task_group() as tg:
            # Still running on the server (it ignores cancellation) when the gateway shuts down.
            tg.start_soon(_call, gateway, "hang_ignoring_cancel", {"tag": "b", "seconds": 600})
            await _call(gateway, "hang_status", {"tag": "b", "event": "started"})
            tg.cancel_scope.cancel()

    children_after = _child_processes()
    assert pid not in children_after  # the server the gateway (or the test) started is gone, reaped
    assert children_after == children_before
    assert asyncio.all_tasks() - tasks_before == set()
