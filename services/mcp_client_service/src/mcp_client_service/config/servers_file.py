"""The MCP servers to connect to: the ``mcpServers`` format of Claude Desktop, Cursor and VS Code.

JSON (the clients' own files work as they are)::

    {"mcpServers": {
        "rag": {"command": "mcp-rag-tool", "args": ["--transport", "stdio"], "env": {"RAG_DOCS_PATHS": "..."}},
        "search": {"url": "https://search.internal/mcp", "headers": {"Authorization": "Bearer ${env:SEARCH_TOKEN}"}}
    }}

VS Code's ``{"servers": {...}}`` is read the same way, and a ``.toml`` file holds the same
servers as ``[mcpServers.<name>]`` tables.

A server with ``command`` is spawned over stdio, one with ``url`` is reached over streamable
HTTP (``"type": "sse"`` for the older HTTP+SSE transport); ``"type": "stdio" | "http" |
"streamable-http" | "streamableHttp" | "sse"`` may say so explicitly. Per server, beyond the
clients' fields: ``enabled``, ``required`` (readiness waits for it), ``callTimeoutSeconds``,
``allowedTools`` / ``deniedTools`` (names, ``*`` globs allowed) and ``toolPrefix``. Values of
``env``, ``headers``, ``args`` and ``url`` may hold secrets by reference (``${env:NAME}``,
``${file:/path}``; see ``references``). An HTTP server may carry an ``auth`` block (OAuth; see ``auth``).

The order of the servers in the file is their priority. Other top-level keys of the file are
ignored, so an existing client config can be reused as it is; so are the keys of a server the
gateway does not know (VS Code's ``envFile``, Cline's ``autoApprove``), each logged as
``mcp_server_config_key_ignored``. Cline's ``disabled: true`` means ``enabled: false`` and its
``timeout`` (seconds) is ``callTimeoutSeconds``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from mcp_client_service.config.auth import OAuthConfig
from mcp_client_service.config.references import check_references, has_references
from suite_common.logging import get_logger

__all__ = [
    "ConfigError",
    "ConfigFormat",
    "HttpServerConfig",
    "ServerConfig",
    "ServersFile",
    "StdioServerConfig",
    "load_servers_config",
    "parse_servers_config",
    "unknown_keys",
]

_log = get_logger("mcp_client_service.config.servers_file")

ConfigFormat = Literal["json", "toml"]

_CLIENT_ALIASES = frozenset({"disabled", "timeout"})
"""Other clients' names for the gateway's own fields (Cline), read as those."""

_WHY_IGNORED = {
    "envFile": "the gateway reads no env file: put the variables in env (secrets as ${env:NAME} or ${file:...})",
    "autoApprove": "the gateway asks nobody before a call: allowedTools / deniedTools choose what is offered",
    "alwaysAllow": "the gateway asks nobody before a call: allowedTools / deniedTools choose what is offered",
}

_TOOL_PREFIX_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"


class ConfigError(Exception):
    """The servers config file cannot be used; the message says which server and field, and why."""


_Referencing = Annotated[str, AfterValidator(check_references)]
"""A string that may hold ``${env:...}`` / ``${file:...}`` references."""


class _ServerOptions(BaseModel):
    """What every server has, whatever its transport."""

    # Unknown keys are ignored (and logged by ``parse_servers_config``), so that the files of
    # Claude Desktop, Cursor, VS Code and Cline work as they are.
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    enabled: bool = True
    """``false`` keeps the server in the file without connecting to it (Cline: ``disabled: true``)."""
    required: bool = False
    """``true``: the gateway is not ready (``/readyz``) while this server is not serving."""
    call_timeout_seconds: float | None = Field(default=None, gt=0, alias="callTimeoutSeconds")
    """This server's limit for one ``tools/call``; unset: the gateway's ``call_timeout_seconds``.
    Cline's ``timeout`` (seconds) is read as this."""
    allowed_tools: tuple[str, ...] | None = Field(default=None, alias="allowedTools")
    """Only these of the server's tools are offered (names or ``*`` globs); unset: all of them."""
    denied_tools: tuple[str, ...] = Field(default=(), alias="deniedTools")
    """These of the server's tools are never offered, even when ``allowedTools`` names them."""
    tool_prefix: str = Field(default="", alias="toolPrefix")
    """Prepended to each of the server's tool names in the catalog (``gh_`` + ``search``)."""

    @model_validator(mode="before")
    @classmethod
    def _read_client_aliases(cls, data: Any) -> Any:
        """Cline's ``disabled`` and ``timeout``, as ``enabled`` and ``callTimeoutSeconds``."""
        if not isinstance(data, Mapping) or not _CLIENT_ALIASES & data.keys():
            return data
        entry = dict(data)
        disabled = entry.pop("disabled", None)
        if disabled is not None:
            if not isinstance(disabled, bool):
                raise ValueError('"disabled" must be true or false')
            if disabled and entry.get("enabled") is True:
                raise ValueError('"enabled": true and "disabled": true contradict each other; keep one')
            if disabled:
                entry["enabled"] = False
        timeout = entry.pop("timeout", None)
        if timeout is not None and "callTimeoutSeconds" not in entry and "call_timeout_seconds" not in entry:
            entry["callTimeoutSeconds"] = timeout
        return entry

    @field_validator("tool_prefix")
    @classmethod
    def _check_prefix(cls, prefix: str) -> str:
        if any(char not in _TOOL_PREFIX_CHARS for char in prefix):
            raise ValueError("a tool prefix is letters, digits, _ and - (the characters LLM APIs accept in tool names)")
        return prefix

    def offers(self, tool_name: str) -> bool:
        """Whether the allow and deny lists let the server's tool ``tool_name`` through."""
        if any(fnmatchcase(tool_name, pattern) for pattern in self.denied_tools):
            return False
        return self.allowed_tools is None or any(fnmatchcase(tool_name, pattern) for pattern in self.allowed_tools)


class StdioServerConfig(_ServerOptions):
    """A server the gateway spawns as a child process and talks to over stdin/stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    """The executable, looked up on PATH as usual."""
    args: list[_Referencing] = Field(default_factory=list)
    env: dict[str, _Referencing] = Field(default_factory=dict)
    """The child's environment besides the few variables the gateway lets through
    (``MCP_CLIENT_STDIO_INHERIT_ENV``). The gateway's own environment, its secret included,
    is never inherited."""
    cwd: Path | None = None
    """Working directory of the child; relative paths are relative to the gateway's."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_auth(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "auth" in data:
            raise ValueError('"auth" (OAuth) is for HTTP servers: a stdio server gets its credentials from its env')
        return data

    @property
    def transport(self) -> str:
        return "stdio"


def _check_url(url: str) -> str:
    if has_references(url):
        return url  # checked once resolved, when the server connects
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        raise ValueError("must be an http:// or https:// URL")
    return url


class HttpServerConfig(_ServerOptions):
    """A server reached over MCP streamable HTTP, or over the older HTTP+SSE transport (``sse``)."""

    type: Literal["http", "streamable-http", "streamableHttp", "sse"] = "http"
    url: Annotated[_Referencing, AfterValidator(_check_url)]
    """The MCP endpoint, such as ``http://search:8102/mcp`` (for ``sse``, the SSE endpoint)."""
    headers: dict[str, _Referencing] = Field(default_factory=dict)
    """Sent with every request to the server (an ``Authorization`` header, say)."""
    auth: OAuthConfig | None = None
    """OAuth to a protected server (``config.auth``): the gateway finds the authorization server, registers,
    asks for consent or uses client credentials, and keeps the tokens in its vault."""

    @property
    def transport(self) -> str:
        return "sse" if self.type == "sse" else "streamable-http"


def _transport_tag(value: Any) -> str | None:
    """Which model a raw server entry is: by its ``type``, else by ``command`` or ``url``."""
    if not isinstance(value, Mapping):
        return None
    declared = value.get("type")
    if declared == "stdio":
        return "stdio"
    if declared in ("http", "streamable-http", "streamableHttp", "sse"):
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
            'a server is an object with either "command" (stdio) or "url" (HTTP); '
            '"type", if given, is "stdio", "http", "streamable-http" (or "streamableHttp") or "sse"'
        ),
    ),
]


class ServersFile(BaseModel):
    """The whole file. Servers keep the file's order, which is their priority order."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    servers: dict[str, ServerConfig] = Field(alias="mcpServers")
    base_dir: Path = Field(default_factory=Path, exclude=True)
    """Where the file is: ``${file:...}`` references with a relative path start there."""

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


def _decode(text: str | bytes, source: str, file_format: ConfigFormat) -> Any:
    if file_format == "toml":
        try:
            return tomllib.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"{source} is not valid TOML: {error}") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{source} is not valid JSON: {error}") from None


def parse_servers_config(
    text: str | bytes,
    *,
    source: str = "servers config",
    file_format: ConfigFormat = "json",
    base_dir: Path | None = None,
) -> ServersFile:
    """Parse the file's content; every way it can be wrong is a ``ConfigError`` naming the problem."""
    data = _decode(text, source, file_format)
    if isinstance(data, dict) and "mcpServers" not in data and "servers" in data:
        data = {**data, "mcpServers": data["servers"]}  # VS Code's .vscode/mcp.json
    elif isinstance(data, dict) and "mcpServers" in data and "servers" in data:
        raise ConfigError(f'{source} has both "mcpServers" and "servers": keep one list of servers')
    if not isinstance(data, dict) or "mcpServers" not in data:
        expected = (
            "must have [mcpServers.<name>] tables"
            if file_format == "toml"
            else 'must be a JSON object with an "mcpServers" object of servers by name ("servers" in VS Code)'
        )
        raise ConfigError(f"{source} {expected}")
    try:
        servers = ServersFile.model_validate({"mcpServers": data["mcpServers"]})
    except ValidationError as error:
        raise ConfigError(f"{source}: {_describe(error)}") from None
    if base_dir is not None:
        servers.base_dir = base_dir
    _log_ignored_keys(data["mcpServers"], source)
    return servers


def _known_keys(model: type[BaseModel]) -> set[str]:
    known = set(_CLIENT_ALIASES)
    for name, info in model.model_fields.items():
        known.update({name, info.alias or name})
    return known


def unknown_keys(entry: Mapping[str, Any]) -> list[str]:
    """The keys of one server entry the gateway does not read (ignored, and logged)."""
    model: type[BaseModel] = StdioServerConfig if _transport_tag(entry) == "stdio" else HttpServerConfig
    known = _known_keys(model)
    return [key for key in entry if key not in known]


def _log_ignored_keys(raw_servers: Mapping[str, Any], source: str) -> None:
    for name, entry in raw_servers.items():
        for key in unknown_keys(entry):
            why = _WHY_IGNORED.get(key, "the gateway does not know this key (a typo?)")
            _log.warning("mcp_server_config_key_ignored", source=source, server=name, key=key, detail=why)


def load_servers_config(path: Path) -> ServersFile:
    """The file at ``path``: TOML when its name ends in ``.toml``, JSON otherwise."""
    try:
        text = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the servers config {path}: {error.strerror or error}") from None
    file_format: ConfigFormat = "toml" if path.suffix.lower() == ".toml" else "json"
    return parse_servers_config(text, source=str(path), file_format=file_format, base_dir=path.parent)
