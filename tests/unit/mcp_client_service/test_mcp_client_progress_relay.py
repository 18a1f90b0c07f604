"""``ProgressRelay``: a call's progress reaches its caller before the answer, never after it."""

from __future__ import annotations

import anyio
import pytest

from mcp_client_service.calls.progress import ProgressRelay

pytestmark = pytest.mark.anyio


async def test_progress_is_forwarded_as_it_comes() -> None:
    forwarded: list[tuple[float, float | None, str | None]] = []

    async def sink(progress: float, total: float | None, message: str | None) -> None:
        forwarded.append((progress, total, message))

    relay = ProgressRelay(sink)
    await relay(1, 3, "one")
    await relay(2, None, None)

    assert forwarded == [(1, 3, "one"), (2, None, None)]


async def test_the_answer_waits_for_a_notification_still_being_written() -> None:
    release = anyio.Event()
    order: list[str] = []

    async def slow_sink(progress: float, total: float | None, message: str | None) -> None:
        await release.wait()
        order.append(f"progress {progress:g}")

    relay = ProgressRelay(slow_sink)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay, 1.0, None, None)  # as the SDK hands it over: in a task of its own

            async def answer() -> None:
                await relay.close()
                order.append("result")

            tg.start_soon(answer)
            await anyio.wait_all_tasks_blocked()
            release.set()

    assert order == ["progress 1", "result"]


async def test_progress_after_the_answer_is_dropped() -> None:
    forwarded: list[float] = []

    async def sink(progress: float, total: float | None, message: str | None) -> None:
        forwarded.append(progress)

    relay = ProgressRelay(sink)
    await relay(1, None, None)
    await relay.close()
    await relay(2, None, None)

    assert forwarded == [1]
