"""The strict check of a server's tools, and the filter that drops the bad ones from a listing.

A tool is offered only if its ``inputSchema`` is a JSON object, a valid JSON Schema of the
dialect it declares (``$schema``; 2020-12, MCP's default, when it declares none) and an object
schema at the root (``"type": "object"``, which MCP requires). A model handed a broken schema
would produce calls nobody can validate, and a provider may refuse the whole request over it.

The SDK validates a ``tools/list`` result as a whole, so one bad tool would fail the listing of
the whole server. ``ToolListingFilter`` sits between the transport and the session: it removes
the bad tools from each ``tools/list`` response before the SDK sees it and remembers why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.validators import validator_for
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse, RequestId
from mcp_types.methods import validate_server_result
from pydantic import ValidationError
from referencing.jsonschema import UnknownDialect, specification_with

__all__ = ["DroppedTool", "ToolListingFilter", "input_schema_problem", "tool_problem"]

_DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True)
class DroppedTool:
    name: str
    reason: str


def input_schema_problem(tool: Mapping[str, Any]) -> str | None:
    """Why the tool's ``inputSchema`` is unusable, or ``None`` when it is fine."""
    if "inputSchema" not in tool:
        return "it has no inputSchema"
    schema = tool["inputSchema"]
    if not isinstance(schema, dict):
        return f"its inputSchema is a JSON {_json_type(schema)}, not an object"
    dialect = schema.get("$schema", _DEFAULT_DIALECT)
    if not isinstance(dialect, str):
        return "its inputSchema's $schema is not a string"
    try:
        specification = specification_with(dialect)
    except UnknownDialect:
        return f"its inputSchema declares an unknown JSON Schema dialect ({dialect})"
    validator = validator_for(schema, default=Draft202012Validator)
    try:
        validator.check_schema(schema)
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


def _json_type(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "null" if value is None else type(value).__name__


class ToolListingFilter:
    """Removes unusable tools from the ``tools/list`` responses of one session.

    ``note_sent`` sees every outgoing message (to know which request ids are ``tools/list``),
    ``filter_received`` every incoming one. ``dropped`` collects what was removed since
    ``take_dropped`` was last called, one listing's pages together.
    """

    def __init__(self) -> None:
        self.protocol_version: str | None = None
        """Set once the session has negotiated it; the per-tool check then matches the SDK's."""
        self._pending: set[RequestId] = set()
        self._dropped: list[DroppedTool] = []

    def note_sent(self, message: SessionMessage) -> None:
        request = message.message
        if isinstance(request, JSONRPCRequest) and request.method == "tools/list":
            self._pending.add(request.id)

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
        kept = []
        for tool in tools:
            problem = tool_problem(tool, result, self.protocol_version)
            if problem is None:
                kept.append(tool)
            else:
                name = tool.get("name") if isinstance(tool, dict) else None
                self._dropped.append(DroppedTool(name=str(name) if name else "(unnamed)", reason=problem))
        if len(kept) == len(tools):
            return message
        response = JSONRPCResponse(jsonrpc="2.0", id=received.id, result={**result, "tools": kept})
        return SessionMessage(response, metadata=message.metadata)

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
