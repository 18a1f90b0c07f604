"""Which tools of a run wait for a person's approval: the tenant's ``approval``, its persona's and the request's
``requireApproval`` patterns, resolved against the run's tools (``RunPlan.approval_tools``)."""

from __future__ import annotations

from collections.abc import Iterable

from agent_service.core.names import TOOL_PATTERN
from agent_service.core.tenancy import tool_matches
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.wire import APPROVAL_DESTRUCTIVE, ToolInfo

__all__ = ["approval_tools", "check_approval_patterns"]


def check_approval_patterns(patterns: list[str] | None) -> None:
    """The request's ``requireApproval``: each a tool's name, ``<server>:<tool>``, ``<server>:*`` or
    ``destructive`` (400 ``invalid_request`` otherwise)."""
    for pattern in patterns or []:
        if not TOOL_PATTERN.fullmatch(pattern):
            raise ApiError(
                400,
                "invalid_request",
                f"requireApproval: {clip(pattern)!r} is not a tool's name, '<server>:<tool>', '<server>:*' or "
                f"'{APPROVAL_DESTRUCTIVE}'.",
            )


def _destructive(tool: ToolInfo) -> bool:
    """MCP annotations that do not say ``readOnlyHint: true``: the tool may change something."""
    return (tool.annotations or {}).get("readOnlyHint") is not True


def _needs_approval(tool: ToolInfo, patterns: Iterable[str]) -> bool:
    return any(
        _destructive(tool)
        if pattern == APPROVAL_DESTRUCTIVE
        else tool_matches(pattern, tool.server, tool.name, tool.server_tool)
        for pattern in patterns
    )


def approval_tools(tools: list[ToolInfo], *pattern_lists: Iterable[str] | None) -> frozenset[str]:
    """The names (as offered) of the ``tools`` any pattern of ``pattern_lists`` matches."""
    patterns = [pattern for patterns in pattern_lists for pattern in patterns or ()]
    if not patterns:
        return frozenset()
    return frozenset(tool.name for tool in tools if _needs_approval(tool, patterns))
