"""The MCP servers to connect to, in the ``mcpServers`` JSON format of Claude Desktop, Cursor and VS Code.

::

    {"mcpServers": {
        "rag": {"command": "mcp-rag-tool", "args": ["--transport", "stdio"], "env": {"RAG_DOCS_PATHS": "..."}},
        "search": {"url": "http://search:8102/mcp", "headers": {"Authorization": "Bearer ..."}}
    }}

A server with ``command`` is spawned over stdio, one with ``url`` is reached over streamable
HTTP; ``"type": "stdio" | "http" | "streamable-http"`` may say so explicitly, and
``"enabled": false`` keeps a server in the file without connecting to it. The order of the
servers in the file is their priority: when two servers offer a tool of the same name, the
first one's wins. Other top-level keys of the file are ignored, so an existing client config
can be reused as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

__all__ = [
    "ConfigError",
    "HttpServerConfig",
    "ServerConfig",
    "ServersFile",
    "StdioServerConfig",
    "load_servers_config",
    "parse_servers_config",
]


class ConfigError(Exception):
    """The servers config file cannot be used; the message says which server and field, and why."""


class StdioServerConfig(BaseModel):
    """A server the gateway spawns as a child process and talks to over stdin/stdout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    """The executable, looked up on PATH as usual."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """The child's only environment besides the SDK's safe defaults (PATH, HOME, USER, ...).
    The gateway's own environment, its secret included, is never inherited."""
    cwd: Path | None = None
    """Working directory of the child; relative paths are relative to the gateway's."""
    enabled: bool = True

    @property
    def transport(self) -> str:
        return "stdio"


class HttpServerConfig(BaseModel):
    """A server reached over MCP streamable HTTP."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["http", "streamable-http"] = "http"
    url: str
    """The MCP endpoint, such as ``http://search:8102/mcp``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with every request to the server (an ``Authorization`` header, say)."""
    enabled: bool = True

    @property
    def transport(self) -> str:
        return "streamable-http"

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
            raise ValueError("must be an http:// or https:// URL")
        return url


def _transport_tag(value: Any) -> str | None:
    """Which model a raw server entry is: by its ``type``, else by ``command`` or ``url``."""
    if not isinstance(value, Mapping):
        return None
    declared = value.get("type")
    if declared == "stdio":
        return "stdio"
    if declared in ("http", "streamable-http"):
        return "http"
    if declared is not None:
        return None
    if "command" in value and "url" not in value:
        return "stdio"
    if "url" in value and "command" not in value:
        return "http"
    return None


ServerConfig = Annotated[
    Annotated[StdioServerConfig, Tag("stdio")] | Annotated[HttpServerConfig, Tag("http")],
    Discriminator(
        _transport_tag,
        custom_error_type="invalid_server",
        custom_error_message=(
            'a server is an object with either "command" (stdio) or "url" (streamable HTTP); '
            '"type", if given, is "stdio", "http" or "streamable-http"'
        ),
    ),
]


class ServersFile(BaseModel):
    """The whole file. Servers keep the file's order, which is their priority order."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    servers: dict[str, ServerConfig] = Field(alias="mcpServers")

    @field_validator("servers")
    @classmethod
    def _check_names(cls, servers: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
        for name in servers:
            if not name.strip():
                raise ValueError("a server name must not be empty")
        return servers


def _describe(error: ValidationError) -> str:
    """``server "rag": field "args": Input should be a valid list`` for each problem."""
    problems = []
    for item in error.errors(include_url=False, include_input=False)[:5]:
        location = [str(part) for part in item["loc"]]
        if not location:
            problems.append(item["msg"])
        elif location[0] != "mcpServers":
            problems.append(f"{'.'.join(location)}: {item['msg']}")
        elif len(location) == 1:
            problems.append(f'"mcpServers": {item["msg"]}')
        else:
            server, fields = location[1], location[2:]
            if fields and fields[0] in ("stdio", "http"):
                fields = fields[1:]  # the discriminator's tag is not a field of the file
            where = f'server "{server}"' + (f': field "{".".join(fields)}"' if fields else "")
            problems.append(f"{where}: {item['msg']}")
    return "; ".join(problems)


def parse_servers_config(text: str | bytes, *, source: str = "servers config") -> ServersFile:
    """Parse the file's content; every way it can be wrong is a ``ConfigError`` naming the problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{source} is not valid JSON: {error}") from None
    if not isinstance(data, dict) or "mcpServers" not in data:
        raise ConfigError(f'{source} must be a JSON object with an "mcpServers" object of servers by name')
    try:
        return ServersFile.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{source}: {_describe(error)}") from None


def load_servers_config(path: Path) -> ServersFile:
    try:
        text = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the servers config {path}: {error.strerror or error}") from None
    return parse_servers_config(text, source=str(path))
