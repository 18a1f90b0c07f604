"""Draining on SIGTERM: in-flight accounting, readiness, the interrupt of work past the grace period."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from suite_common.health import health_routes
from suite_common.lifecycle import Lifecycle, LifecycleMiddleware, until_interrupted
from suite_common.serve import DrainingServer
from support.servers import serve_app

pytestmark = pytest.mark.anyio


def _draining_server(grace_seconds: float) -> DrainingServer:
    return DrainingServer(uvicorn.Config(Starlette()), Lifecycle(grace_seconds=grace_seconds))


# --- the drain, tick by tick -------------------------------------------------------------------


def test_a_first_sigterm_only_starts_draining_and_a_second_one_exits_at_once() -> None:
    server = _draining_server(grace_seconds=30)
    server.handle_exit(signal.SIGTERM, None)
    assert server.lifecycle.draining
    assert not server.should_exit
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit


def test_ctrl_c_exits_the_uvicorn_way_without_draining() -> None:
    server = _draining_server(grace_seconds=30)
    server.handle_exit(signal.SIGINT, None)
    assert server.should_exit
    assert not server.lifecycle.draining


def test_a_drain_with_nothing_in_flight_exits_on_the_next_tick() -> None:
    server = _draining_server(grace_seconds=30)
    server.handle_exit(signal.SIGTERM, None)
    server._drain(now=100.0)
    assert server.should_exit
    assert not server.lifecycle.interrupted


def test_work_in_flight_runs_through_the_grace_period_then_is_interrupted_then_the_server_exits() -> None:
    server = _draining_server(grace_seconds=5)
    lifecycle = server.lifecycle
    lifecycle.in_flight = 1
    server.handle_exit(signal.SIGTERM, None)
    server._drain(now=100.0)
    server._drain(now=104.9)
    assert (server.should_exit, lifecycle.interrupted) == (False, False)
    server._drain(now=105.0)
    assert (server.should_exit, lifecycle.interrupted) == (False, True)
    # Interrupted work has a moment to send its last words; work that ignores the interrupt is cut then.
    server._drain(now=106.0)
    assert not server.should_exit
    server._drain(now=107.0)
    assert server.should_exit


def test_work_that_ends_after_the_interrupt_lets_the_server_exit_at_once() -> None:
    server = _draining_server(grace_seconds=1)
    server.lifecycle.in_flight = 1
    server.handle_exit(signal.SIGTERM, None)
    server._drain(now=10.0)
    server._drain(now=11.0)
    assert server.lifecycle.interrupted
    server.lifecycle.in_flight = 0
    server._drain(now=11.1)
    assert server.should_exit


# --- interrupting work ----------------------------------------------------------------------------


async def test_until_interrupted_returns_the_result_of_work_that_finishes() -> None:
    async def work() -> str:
        await anyio.lowlevel.checkpoint()
        return "done"

    assert await until_interrupted(Lifecycle(grace_seconds=1), work()) == (True, "done")


async def test_until_interrupted_cancels_the_work_when_the_lifecycle_interrupts() -> None:
    lifecycle = Lifecycle(grace_seconds=1)
    started, cancelled = anyio.Event(), anyio.Event()

    async def hung() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    async def interrupt_once_started() -> None:
        await started.wait()
        lifecycle.interrupt()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupt_once_started)
            assert await until_interrupted(lifecycle, hung()) == (False, None)
    assert cancelled.is_set()


async def test_until_interrupted_raises_the_works_own_error_not_a_group() -> None:
    async def failing() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await until_interrupted(Lifecycle(grace_seconds=1), failing())


async def test_work_started_after_the_interrupt_is_stopped_at_once() -> None:
    lifecycle = Lifecycle(grace_seconds=1)
    lifecycle.interrupt()
    with anyio.fail_after(5):
        assert await until_interrupted(lifecycle, anyio.sleep_forever()) == (False, None)


# --- in-flight accounting and readiness, over real HTTP ------------------------------------------


def _app(lifecycle: Lifecycle, release: anyio.Event, streaming: anyio.Event) -> Starlette:
    async def stream(_: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"first\n"
            streaming.set()
            await release.wait()
            yield b"last\n"

        return StreamingResponse(body())

    async def ping(_: Request) -> Response:
        return JSONResponse({"in_flight": lifecycle.in_flight})

    app = Starlette(
        routes=[Route("/stream", stream), Route("/ping", ping), *health_routes(lambda _: _ready(), lifecycle)]
    )
    app.add_middleware(LifecycleMiddleware, lifecycle=lifecycle)
    return app


async def _ready() -> dict[str, str]:
    return {"dependency": "ok"}


async def test_a_streamed_response_counts_as_in_flight_until_its_last_byte_and_probes_never_do() -> None:
    lifecycle = Lifecycle(grace_seconds=30)
    release, streaming = anyio.Event(), anyio.Event()
    async with serve_app(_app(lifecycle, release, streaming)) as url, httpx.AsyncClient(base_url=url) as http:
        with anyio.fail_after(10):
            async with http.stream("GET", "/stream") as response:
                await streaming.wait()
                assert lifecycle.in_flight == 1
                assert (await http.get("/readyz")).status_code == 200
                assert (await http.get("/ping")).json() == {"in_flight": 2}  # itself, and the stream
                release.set()
                assert await response.aread() == b"first\nlast\n"
    assert lifecycle.in_flight == 0


async def test_readiness_answers_503_shutting_down_once_draining_while_liveness_stays_ok() -> None:
    lifecycle = Lifecycle(grace_seconds=30)
    async with (
        serve_app(_app(lifecycle, anyio.Event(), anyio.Event())) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        ready = await http.get("/readyz")
        assert (ready.status_code, ready.json()["status"]) == (200, "ready")
        lifecycle.begin_draining()
        ready = await http.get("/readyz")
        assert (ready.status_code, ready.json()) == (503, {"status": "shutting_down", "checks": {}})
        assert (await http.get("/healthz")).status_code == 200
