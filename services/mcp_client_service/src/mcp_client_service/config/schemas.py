"""The strict check of a server's tools, and the filter that drops the bad ones from a listing.

A tool is offered only if its ``inputSchema`` is a JSON object, a valid JSON Schema of the
dialect it declares (``$schema``; 2020-12, MCP's default, when it declares none) and an object
schema at the root (``"type": "object"``, which MCP requires). A model handed a broken schema
would produce calls nobody can validate, and a provider may refuse the whole request over it.

The SDK validates a ``tools/list`` result as a whole, so one bad tool would fail the listing of
the whole server. ``ToolListingFilter`` sits between the transport and the session: it removes
the bad tools from each ``tools/list`` response before the SDK sees it and remembers why. It also
keeps a server's listing bounded: beyond ``max_tools`` the rest are left out (counted, not
checked), and a schema nested deeper than ``MAX_SCHEMA_DEPTH`` is dropped before anything
recursive (the SDK's parser, a JSON Schema check) can overflow on it.

Checking a schema against its metaschema is slow (about a millisecond or more per tool with
jsonschema, most of it resolving the 2020-12 metaschema's references), so: one metaschema
validator per dialect, a verdict remembered per distinct tool (a listing again after
``list_changed`` re-checks nothing that did not change), and the caller runs the filter on a
worker thread (``filter_received`` is synchronous and touches nothing but its own state).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse, RequestId
from mcp_types.methods import validate_server_result
from pydantic import ValidationError
from referencing.jsonschema import UnknownDialect, specification_with

from suite_common.json_types import json_type

__all__ = [
    "DEFAULT_MAX_TOOLS",
    "MAX_SCHEMA_DEPTH",
    "DropKind",
    "DroppedTool",
    "ToolListingFilter",
    "input_schema_problem",
    "tool_problem",
]

_DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"

DEFAULT_MAX_TOOLS = 1000

MAX_SCHEMA_DEPTH = 100
"""JSON nesting (objects and arrays) a tool's schema may have. Real schemas stay far below; the
SDK's JSON parser gives up on a message nested about 200 deep, and a metaschema check recurses
several Python frames per level."""

_MAX_REMEMBERED_VERDICTS = 10_000


DropKind = Literal["invalid_schema", "duplicate_name", "task_required"]


@dataclass(frozen=True)
class DroppedTool:
    name: str
    reason: str
    kind: DropKind = "invalid_schema"


_TASK_REQUIRED = (
    'it can only run as a task (execution.taskSupport is "required"), and the server does not offer tools/call '
    "as a task (capabilities.tasks.requests.tools.call at protocol 2025-11-25)"
)
_DUPLICATE_NAME = "another tool of this server has the same name; the first one is listed"


def _task_required(tool: Mapping[str, Any]) -> bool:
    execution = tool.get("execution")
    return isinstance(execution, dict) and execution.get("taskSupport") == "required"


@lru_cache(maxsize=16)
def _metaschema_validator(cls: type[Validator]) -> Validator:
    """What ``cls.check_schema`` builds on every call, built once per dialect (it is immutable)."""
    meta_cls = validator_for(cls.META_SCHEMA, default=cls)
    return meta_cls(cls.META_SCHEMA, format_checker=meta_cls.FORMAT_CHECKER)


def _nesting_beyond(value: Any, limit: int) -> int | None:
    """The depth of ``value``'s objects and arrays if it is more than ``limit``, else ``None`` (no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest if deepest > limit else None


def input_schema_problem(tool: Mapping[str, Any]) -> str | None:
    """Why the tool's ``inputSchema`` is unusable, or ``None`` when it is fine."""
    if "inputSchema" not in tool:
        return "it has no inputSchema"
    schema = tool["inputSchema"]
    if not isinstance(schema, dict):
        return f"its inputSchema is a JSON {json_type(schema, integers=False)}, not an object"
    for key in ("inputSchema", "outputSchema"):
        depth = _nesting_beyond(tool.get(key), MAX_SCHEMA_DEPTH)
        if depth is not None:
            return f"its {key} is nested {depth} levels deep, more than the {MAX_SCHEMA_DEPTH} the gateway accepts"
    dialect = schema.get("$schema", _DEFAULT_DIALECT)
    if not isinstance(dialect, str):
        return "its inputSchema's $schema is not a string"
    try:
        specification = specification_with(dialect)
    except UnknownDialect:
        return f"its inputSchema declares an unknown JSON Schema dialect ({dialect})"
    validator_class = validator_for(schema, default=Draft202012Validator)
    try:
        for first in _metaschema_validator(validator_class).iter_errors(schema):
            raise SchemaError.create_from(first)
    except RecursionError:
        return "its inputSchema is nested too deeply to be checked"
    except SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path)
        at = f" at {where}" if where else ""
        return f"its inputSchema is not a valid JSON Schema ({specification.name}){at}: {error.message}"
    if schema.get("type") != "object":
        return 'its inputSchema is not an object schema (MCP requires "type": "object" at the root)'
    return None


def tool_problem(tool: Any, result: Mapping[str, Any], protocol_version: str | None) -> str | None:
    """Why one entry of a ``tools/list`` result cannot be offered, or ``None``."""
    if not isinstance(tool, dict):
        return "the entry is not a JSON object"
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        return "it has no name"
    problem = input_schema_problem(tool)
    if problem is not None or protocol_version is None:
        return problem
    # The rest of the entry must be what the SDK accepts at the negotiated version.
    try:
        validate_server_result("tools/list", protocol_version, {**result, "tools": [tool]})
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"][2:]) or "the entry"
        return f"it is not a valid MCP tool: {field}: {first['msg']}"
    except (KeyError, ValueError):
        return None  # a version the SDK has no schema for: nothing more to check
    return None


class ToolListingFilter:
    """Removes unusable tools from the ``tools/list`` responses of one session, and keeps listings bounded.

    ``note_sent`` sees every outgoing message (to know which request ids are ``tools/list``, and
    when a new listing starts: a request without a cursor), ``filter_received`` every incoming
    one (``wants`` says which ones it would change, so that only those go to a worker thread).
    ``take_dropped`` returns what was removed since it was last called, one listing's pages
    together; ``take_left_out`` how many tools were beyond ``max_tools``.

    ``verdicts`` remembers the verdict on each distinct tool (pass the same mapping to the filter
    of every session of a server, so that reconnecting re-checks nothing either).
    """

    def __init__(
        self,
        *,
        max_tools: int = DEFAULT_MAX_TOOLS,
        verdicts: MutableMapping[tuple[str | None, str], str | None] | None = None,
    ) -> None:
        self.protocol_version: str | None = None
        """Set once the session has negotiated it; the per-tool check then matches the SDK's."""
        self.runs_tasks = False
        """Set once the session has opened, when the gateway can call this server's tools as tasks
        (``connection.tasks.runs_tools_as_tasks``): its task-only tools are then kept."""
        self.max_tools = max_tools
        self._pending: set[RequestId] = set()
        self._dropped: list[DroppedTool] = []
        self._kept_in_listing = 0
        self._names_in_listing: set[str] = set()
        self._left_out = 0
        self._verdicts: MutableMapping[tuple[str | None, str], str | None] = {} if verdicts is None else verdicts

    def note_sent(self, message: SessionMessage) -> None:
        request = message.message
        if isinstance(request, JSONRPCRequest) and request.method == "tools/list":
            self._pending.add(request.id)
            if not (request.params or {}).get("cursor"):
                self._kept_in_listing = 0  # a listing from its first page
                self._names_in_listing = set()

    def wants(self, message: SessionMessage) -> bool:
        """Whether ``message`` answers a ``tools/list`` (the messages ``filter_received`` may change)."""
        received = message.message
        return isinstance(received, JSONRPCResponse | JSONRPCError) and received.id in self._pending

    def filter_received(self, message: SessionMessage) -> SessionMessage:
        received = message.message
        if isinstance(received, JSONRPCError) and received.id is not None:
            self._pending.discard(received.id)
            return message
        if not isinstance(received, JSONRPCResponse) or received.id not in self._pending:
            return message
        self._pending.discard(received.id)
        result = received.result
        tools = result.get("tools")
        if not isinstance(tools, list) or self._envelope_is_invalid(result):
            return message  # a malformed result as a whole: the SDK reports it
        room = max(0, self.max_tools - self._kept_in_listing)
        # Beyond the cap the rest is left out unchecked, and no further page is asked for.
        within, beyond = tools[:room], len(tools) - min(len(tools), room)
        kept = []
        for tool in within:
            problem = self._verdict(tool, result)
            kind: DropKind = "invalid_schema"
            if problem is None and not self.runs_tasks and _task_required(tool):
                problem, kind = _TASK_REQUIRED, "task_required"
            elif problem is None and tool["name"] in self._names_in_listing:
                # Across the pages of one listing: the catalog would otherwise keep one of them silently.
                problem, kind = _DUPLICATE_NAME, "duplicate_name"
            if problem is None:
                kept.append(tool)
                self._names_in_listing.add(tool["name"])
            else:
                name = tool.get("name") if isinstance(tool, dict) else None
                self._dropped.append(DroppedTool(name=str(name) if name else "(unnamed)", reason=problem, kind=kind))
        self._kept_in_listing += len(kept)
        self._left_out += beyond
        capped = beyond > 0 or (self._kept_in_listing >= self.max_tools and result.get("nextCursor") is not None)
        if len(kept) == len(tools) and not capped:
            return message
        trimmed = {**result, "tools": kept}
        if capped:
            trimmed.pop("nextCursor", None)
        response = JSONRPCResponse(jsonrpc="2.0", id=received.id, result=trimmed)
        return SessionMessage(response, metadata=message.metadata)

    def _verdict(self, tool: Any, result: Mapping[str, Any]) -> str | None:
        try:
            canonical = json.dumps(tool, sort_keys=True, separators=(",", ":"))
            key = (self.protocol_version, hashlib.sha256(canonical.encode()).hexdigest())
        except (TypeError, ValueError, RecursionError):
            return tool_problem(tool, result, self.protocol_version)
        if key in self._verdicts:
            return self._verdicts[key]
        problem = tool_problem(tool, result, self.protocol_version)
        if len(self._verdicts) >= _MAX_REMEMBERED_VERDICTS:
            self._verdicts.clear()
        self._verdicts[key] = problem
        return problem

    def _envelope_is_invalid(self, result: Mapping[str, Any]) -> bool:
        if self.protocol_version is None:
            return False
        try:
            validate_server_result("tools/list", self.protocol_version, {**result, "tools": []})
        except ValidationError:
            return True
        except (KeyError, ValueError):
            return False
        return False

    def take_dropped(self) -> list[DroppedTool]:
        dropped, self._dropped = self._dropped, []
        return dropped

    def take_left_out(self) -> int:
        """How many tools were beyond ``max_tools`` since the last call."""
        left_out, self._left_out = self._left_out, 0
        return left_out
