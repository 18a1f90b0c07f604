"""Work done for a client: cancelled when the client leaves or the service interrupts it, with one watcher."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from starlette.requests import Request
from starlette.types import Message

from suite_common.http import cancel_on_disconnect, run_for_client
from suite_common.lifecycle import Lifecycle

pytestmark = pytest.mark.anyio


class Client:
    """The ASGI ``receive`` of one request whose body has been read: it answers only when the client leaves."""

    def __init__(self) -> None:
        self.leave = anyio.Event()
        self.stopped_listening = anyio.Event()

    async def receive(self) -> Message:
        try:
            await self.leave.wait()
        finally:
            self.stopped_listening.set()
        return {"type": "http.disconnect"}

    def request(self) -> Request:
        return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, self.receive)


async def _hung(started: anyio.Event, cancelled: anyio.Event) -> str:
    started.set()
    try:
        await anyio.sleep_forever()
    finally:
        cancelled.set()
    return "never"


async def test_work_that_finishes_gives_its_result_and_stops_listening_for_the_client() -> None:
    client = Client()

    async def work() -> str:
        await anyio.lowlevel.checkpoint()
        return "done"

    with anyio.fail_after(5):
        outcome = await run_for_client(client.request(), work(), lifecycle=Lifecycle(grace_seconds=1))
        assert (outcome.finished, outcome.result, outcome.client_gone) == (True, "done", False)
        # No watcher outlives the request.
        await client.stopped_listening.wait()


async def test_a_client_that_leaves_cancels_the_work() -> None:
    client = Client()
    started, cancelled = anyio.Event(), anyio.Event()

    async def leave_once_started() -> None:
        await started.wait()
        client.leave.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(leave_once_started)
            outcome = await run_for_client(
                client.request(), _hung(started, cancelled), lifecycle=Lifecycle(grace_seconds=1)
            )
    assert (outcome.finished, outcome.result, outcome.client_gone) == (False, None, True)
    assert cancelled.is_set()


async def test_the_interrupt_of_a_draining_service_cancels_the_work_and_is_not_a_departed_client() -> None:
    client = Client()
    lifecycle = Lifecycle(grace_seconds=1)
    started, cancelled = anyio.Event(), anyio.Event()

    async def interrupt_once_started() -> None:
        await started.wait()
        lifecycle.interrupt()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupt_once_started)
            outcome = await run_for_client(client.request(), _hung(started, cancelled), lifecycle=lifecycle)
        await client.stopped_listening.wait()
    assert (outcome.finished, outcome.result, outcome.client_gone) == (False, None, False)
    assert cancelled.is_set()


async def test_work_started_after_the_interrupt_is_stopped_at_once() -> None:
    lifecycle = Lifecycle(grace_seconds=1)
    lifecycle.interrupt()
    with anyio.fail_after(5):
        outcome = await run_for_client(Client().request(), anyio.sleep_forever(), lifecycle=lifecycle)
    assert (outcome.finished, outcome.client_gone) == (False, False)


async def test_the_works_own_error_is_raised_as_is_not_in_a_group() -> None:
    client = Client()

    async def failing() -> None:
        await anyio.lowlevel.checkpoint()
        raise ValueError("broken")

    with anyio.fail_after(5):
        with pytest.raises(ValueError, match="broken"):
            await run_for_client(client.request(), failing(), lifecycle=Lifecycle(grace_seconds=1))
        await client.stopped_listening.wait()


async def test_cancel_on_disconnect_answers_a_pair() -> None:
    async def work() -> int:
        await anyio.lowlevel.checkpoint()
        return 7

    gone = Client()
    gone.leave.set()
    with anyio.fail_after(5):
        assert await cancel_on_disconnect(Client().request(), work()) == (True, 7)
        assert await cancel_on_disconnect(gone.request(), anyio.sleep_forever()) == (False, None)
