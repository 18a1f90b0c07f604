"""Calling the tools that can only run as MCP tasks (``execution.taskSupport: "required"``, MCP 2025-11-25).

Such a tool is called with ``task`` in its ``tools/call``: the server answers at once with the
task it created (``CreateTaskResult``). The gateway follows it with ``tasks/get``, at the poll
interval the server suggests, until it ends, then fetches its result with ``tasks/result``; a
task that waits for input (``input_required``) gets ``tasks/result`` at once, which the server
answers when the task has ended (the gateway has nobody to ask: it declines elicitation, and the
server carries on without). To the gateway's callers it is a call like any other: one result,
within the same time limit, with its progress relayed as it comes:

- the server's ``notifications/progress`` for the call's progress token (valid for the task's
  whole life, also after the ``tools/call`` has been answered), when the caller asked for progress;
- each new ``statusMessage`` of ``tasks/get``, as progress with that message, while the server
  sends no progress of its own (progress only grows: an older value arriving late is dropped).

A call that is given up on before its task has ended (the time limit passed, the caller went
away, an answer the gateway cannot read) sends ``tasks/cancel`` first, shielded and bounded, so
that the task stops rather than running on with nobody waiting for it.

mcp 2.3 has the task types but not their methods: at 2025-11-25 its ``tools/call`` accepts only
a ``CallToolResult`` for an answer. So the task-augmented ``tools/call`` goes out on the
session's dispatcher, stamped as the session stamps its own requests (``_create_task``); the
``tasks/*`` requests go through ``ClientSession.send_request``, which has no table for them and
takes the result type it is given.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import Client
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    CancelTaskRequest,
    CancelTaskRequestParams,
    CancelTaskResult,
    CreateTaskResult,
    GetTaskPayloadRequest,
    GetTaskPayloadRequestParams,
    GetTaskRequest,
    GetTaskRequestParams,
    GetTaskResult,
    ProgressNotificationParams,
    RequestParamsMeta,
    Task,
    TextContent,
)

from mcp_client_service.failures import connection_lost, describe_error, request_timed_out
from suite_common.logging import get_logger

__all__ = ["TASK_PROTOCOL_VERSIONS", "TaskCalls", "runs_tools_as_tasks"]

_log = get_logger("mcp_client_service.connection.tasks")

TASK_PROTOCOL_VERSIONS = frozenset({"2025-11-25"})
"""The protocol versions whose core has tasks (2026-07-28 moved them to an extension)."""

_POLL_SECONDS = (0.05, 1.0, 5.0)
"""The shortest pause between two ``tasks/get`` of one task, the pause when the server suggests
none, and the longest (a server suggesting a minute would hold the answer up that long)."""

_CANCEL_SECONDS = 2.0
"""How long ``tasks/cancel`` may take when a call is given up on (it delays the answer that long at most)."""

_RETENTION_MARGIN_MS = 60_000
"""The task's result is asked to be kept this long beyond the call's time limit (``task.ttl``)."""

_ENDED = frozenset({"completed", "failed", "cancelled"})


def runs_tools_as_tasks(client: Client) -> bool:
    """Whether the gateway can call this server's tools as tasks: at a protocol with tasks, the
    server offering ``tools/call`` as a task (``capabilities.tasks.requests.tools.call``)."""
    if client.protocol_version not in TASK_PROTOCOL_VERSIONS:
        return False
    tasks = client.server_capabilities.tasks
    requests = tasks.requests if tasks is not None else None
    return requests is not None and requests.tools is not None and requests.tools.call is not None


@dataclass
class _Follower:
    """The progress of one task's call, from its notifications and its status messages, only growing."""

    relay: ProgressFnT
    last: float = 0.0
    server_reports: bool = False
    status_message: str | None = None

    async def server_progress(self, progress: float, total: float | None, message: str | None) -> None:
        if progress <= self.last:
            return  # late, or behind a status message already relayed
        self.last, self.server_reports = progress, True
        await self.relay(progress, total, message)

    async def status(self, message: str | None) -> None:
        if message is None or message == self.status_message:
            return
        self.status_message = message
        if not self.server_reports:
            self.last += 1
            await self.relay(self.last, None, message)


class TaskCalls:
    """The task-augmented calls of one server's sessions, and the routing of their progress."""

    def __init__(self, server: str, redact: Callable[[str], str] = lambda text: text) -> None:
        self._server = server
        self._redact = redact
        self._followers: dict[str, _Follower] = {}
        self._tokens = itertools.count(1)

    async def on_progress(self, params: ProgressNotificationParams) -> None:
        """A ``notifications/progress`` the session handed to its message handler (every one is)."""
        token = params.progress_token
        follower = self._followers.get(token) if isinstance(token, str) else None
        if follower is not None:
            await follower.server_progress(params.progress, params.total, params.message)

    async def call(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        *,
        time_limit: float,
        on_progress: ProgressFnT | None = None,
        meta: RequestParamsMeta | None = None,
    ) -> CallToolResult:
        """Run the tool ``name`` (as the server knows it) as a task, its result within ``time_limit`` s.

        Raises ``TimeoutError`` past the time limit, and what the SDK raises for an error answer
        or a lost connection; the task is cancelled on the server first, unless it had ended.
        """
        session = client.session
        params: dict[str, Any] = {
            "name": name,
            "arguments": arguments,
            "task": {"ttl": math.ceil(time_limit * 1000) + _RETENTION_MARGIN_MS},
        }
        request_meta: dict[str, Any] = dict(meta or {})
        token: str | None = None
        if on_progress is not None:
            # A token of our own, unique in the session: the dispatcher only routes progress to a
            # request still waiting for its answer, and a task reports long after that.
            token = f"gateway-task-{next(self._tokens)}"
            self._followers[token] = _Follower(on_progress)
            request_meta["progressToken"] = token
        if request_meta:
            params["_meta"] = request_meta
        task: Task | None = None
        try:
            with anyio.fail_after(time_limit):
                created = await _create_task(session, params, time_limit)
                if isinstance(created, CallToolResult):
                    return created  # the server ran it directly after all
                task = created.task
                follower = self._followers.get(token) if token is not None else None
                task = await self._until_ended(session, task, follower, time_limit)
                return await self._result(session, task, time_limit)
        except BaseException as error:
            if task is not None and task.status not in _ENDED and not connection_lost(error):
                await self._cancel(session, task.task_id, error)
            raise
        finally:
            if token is not None:
                self._followers.pop(token, None)

    async def _until_ended(
        self, session: ClientSession, task: Task, follower: _Follower | None, time_limit: float
    ) -> Task:
        """``tasks/get`` until the task has ended or waits for input (``tasks/result`` then answers when it ends)."""
        while True:
            if follower is not None:
                await follower.status(task.status_message)
            if task.status in _ENDED or task.status == "input_required":
                return task
            await anyio.sleep(_poll_seconds(task.poll_interval))
            task = await session.send_request(
                GetTaskRequest(params=GetTaskRequestParams(task_id=task.task_id)),
                GetTaskResult,
                request_read_timeout_seconds=time_limit,
            )

    async def _result(self, session: ClientSession, task: Task, time_limit: float) -> CallToolResult:
        if task.status == "cancelled":
            return self._ended_without_result(task, "was cancelled")
        try:
            result = await session.send_request(
                GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task.task_id)),
                CallToolResult,
                request_read_timeout_seconds=time_limit,
            )
        except Exception as error:
            # A failed task may have no result to give: its status message is what it said.
            if task.status != "failed" or connection_lost(error) or request_timed_out(error):
                raise
            said = error.message if isinstance(error, MCPError) else describe_error(error)
            return self._ended_without_result(task, "failed", said)
        return result

    def _ended_without_result(self, task: Task, how: str, otherwise: str | None = None) -> CallToolResult:
        """An error result for a task that ended with no result to give, saying what it (or else ``otherwise``) said."""
        reason = task.status_message or otherwise
        said = f": {reason}" if reason else ""
        text = f'The task running this tool {how} on the MCP server "{self._server}"{said}'
        return CallToolResult(content=[TextContent(type="text", text=self._redact(text))], is_error=True)

    async def _cancel(self, session: ClientSession, task_id: str, why: BaseException) -> None:
        """``tasks/cancel``, shielded from the cancellation that may be why, and bounded."""
        reason = "the call was cancelled" if isinstance(why, anyio.get_cancelled_exc_class()) else describe_error(why)
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_SECONDS):
            try:
                await session.send_request(
                    CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id)),
                    CancelTaskResult,
                    request_read_timeout_seconds=_CANCEL_SECONDS,
                )
            except Exception as error:  # it may have ended meanwhile; the call fails for its own reason anyway
                error_text = self._redact(describe_error(error))
                _log.info("mcp_task_cancel_failed", server=self._server, task=task_id, error=error_text)
                return
        _log.info("mcp_task_cancelled", server=self._server, task=task_id, reason=self._redact(reason))


def _poll_seconds(poll_interval_ms: int | None) -> float:
    shortest, default, longest = _POLL_SECONDS
    if poll_interval_ms is None:
        return default
    return min(longest, max(shortest, poll_interval_ms / 1000))


async def _create_task(
    session: ClientSession, params: dict[str, Any], time_limit: float
) -> CreateTaskResult | CallToolResult:
    """The task-augmented ``tools/call``: the task the server created, or its result if it ran the tool directly."""
    data: dict[str, Any] = {"method": "tools/call", "params": params}
    options: CallOptions = {"timeout": time_limit}
    # What ClientSession.send_request does before sending, without its check of the answer
    # against the CallToolResult of 2025-11-25 (which has no task).
    session._stamp(data, options)
    raw = await session._dispatcher.send_raw_request("tools/call", data["params"], options)
    if "task" in raw:
        return CreateTaskResult.model_validate(raw, by_name=False)
    return CallToolResult.model_validate(raw, by_name=False)
