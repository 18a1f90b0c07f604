"""From a run request to a ``RunPlan``: limits checked, tools discovered and filtered.

Everything here happens before the response starts, so every problem is still a plain 4xx/5xx.
"""

from __future__ import annotations

import time
import uuid

import anyio

from agent_service.clients import CompletionClient, Deadline, ToolsClient, UpstreamError
from agent_service.loop import _DEADLINE_SLACK_SECONDS, RunPlan
from agent_service.settings import AgentSettings
from suite_common.errors import ApiError
from suite_common.wire import AgentRunRequest, NamedToolChoice, ToolChoice, ToolInfo

__all__ = ["ModelCheck", "ToolCatalog", "plan_run"]


class ToolCatalog:
    """mcp-client-service's tool list, reused for ``ttl`` seconds across runs."""

    def __init__(self, client: ToolsClient, ttl: float) -> None:
        self.client = client
        self.ttl = ttl
        self._tools: list[ToolInfo] = []
        self._fetched_at = float("-inf")
        self._lock = anyio.Lock()

    async def tools(self, deadline: Deadline) -> list[ToolInfo]:
        if time.monotonic() - self._fetched_at < self.ttl:
            return self._tools
        async with self._lock:  # one fetch for many runs starting at once
            if time.monotonic() - self._fetched_at >= self.ttl:
                self._tools = await self.client.list_tools(deadline)
                self._fetched_at = time.monotonic()
            return self._tools


_MAX_KNOWN_MODELS = 256


class ModelCheck:
    """Asks completion-service whether it can route a model, before a run's response starts.

    Without it, a streamed run with a misspelt model would answer 200 and then an error event.
    Names that route are remembered for ``ttl`` seconds; names that do not are asked again.
    """

    def __init__(self, client: CompletionClient, ttl: float) -> None:
        self.client = client
        self.ttl = ttl
        self._known: dict[str, float] = {}
        self._checking: dict[str, anyio.Lock] = {}

    def _fresh(self, model: str) -> bool:
        checked_at = self._known.get(model)
        return checked_at is not None and time.monotonic() - checked_at < self.ttl

    async def check(self, model: str, deadline: Deadline) -> None:
        if self._fresh(model):
            return
        # One request per model for many runs starting at once (when the memory of it expires under
        # load, every run would ask otherwise); other models are not held up.
        lock = self._checking.setdefault(model, anyio.Lock())
        try:
            async with lock:
                if self._fresh(model):
                    return
                await self.client.check_model(model, deadline)
                self._remember(model)
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._checking.pop(model, None)  # nobody waits: callers choose the names, keep none

    def _remember(self, model: str) -> None:
        now = time.monotonic()
        if len(self._known) >= _MAX_KNOWN_MODELS:
            # With an OpenAI-compatible endpoint configured every name routes, so callers choose
            # how many names there are: keep only the fresh ones, and never more than the cap.
            self._known = {name: at for name, at in self._known.items() if now - at < self.ttl}
            if len(self._known) >= _MAX_KNOWN_MODELS:
                self._known.clear()
        self._known[model] = now


def _check_limits(request: AgentRunRequest, settings: AgentSettings) -> tuple[int, float]:
    max_iterations = request.max_iterations or settings.max_iterations
    if max_iterations > settings.max_iterations:
        raise ApiError(
            400, "invalid_request", f"maxIterations may be at most {settings.max_iterations} (got {max_iterations})."
        )
    deadline = request.deadline_seconds or settings.run_deadline_seconds
    if deadline > settings.run_deadline_seconds:
        raise ApiError(
            400,
            "invalid_request",
            f"deadlineSeconds may be at most {settings.run_deadline_seconds:g} (got {deadline:g}).",
        )
    return max_iterations, deadline


def _select_tools(request: AgentRunRequest, available: list[ToolInfo]) -> list[ToolInfo]:
    if request.tools is None:
        return available
    by_name = {tool.name: tool for tool in available}
    unknown = [name for name in request.tools if name not in by_name]
    if unknown:
        names = ", ".join(sorted(by_name)) or "none"
        raise ApiError(400, "unknown_tools", f"Unknown tools: {', '.join(unknown)}. Available tools: {names}.")
    return [by_name[name] for name in dict.fromkeys(request.tools)]


def _check_tool_choice(choice: ToolChoice, tools: list[ToolInfo]) -> None:
    if isinstance(choice, NamedToolChoice) and choice.name not in {tool.name for tool in tools}:
        raise ApiError(400, "invalid_request", f"toolChoice names '{choice.name}', which is not among the run's tools.")
    if choice == "required" and not tools:
        raise ApiError(400, "invalid_request", "toolChoice is 'required' but no tool is available to this run.")


async def plan_run(
    request: AgentRunRequest, settings: AgentSettings, catalog: ToolCatalog, models: ModelCheck
) -> RunPlan:
    max_iterations, deadline_seconds = _check_limits(request, settings)
    # The run's clock starts now: discovery counts against its deadline.
    deadline = Deadline(deadline_seconds)
    tools: list[ToolInfo] = []
    out_of_time = False
    try:
        await models.check(request.model, deadline)
        # The plain path: no tool discovery when the caller wants no tools.
        if request.tool_choice != "none" and request.tools != []:
            tools = _select_tools(request, await catalog.tools(deadline))
    except UpstreamError as error:
        if deadline.remaining() > _DEADLINE_SLACK_SECONDS:
            raise ApiError(error.status, error.code, error.message, headers=error.headers) from None
        # The run's own deadline ran out, not the peer: the loop ends the run as "deadline", as it
        # does when the deadline passes in any round (a 504 here blamed the peer; found by fuzzing).
        out_of_time = True
    choice = request.tool_choice
    if not out_of_time:
        _check_tool_choice(choice, tools)
    return RunPlan(
        run_id=f"run_{uuid.uuid4().hex}",
        model=request.model,
        messages=request.messages,
        tools=tools,
        tool_choice=choice,
        max_iterations=max_iterations,
        deadline=deadline,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
    )
