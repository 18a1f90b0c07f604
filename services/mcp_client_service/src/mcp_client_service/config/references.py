"""Secrets by reference in the servers config: ``${env:NAME}`` and ``${file:/path}``.

A config file can then be checked in or shared while the secrets stay in the environment or in
mounted files (a Kubernetes Secret, say). References are resolved each time a server connects, so
a rotated secret is picked up by the next connection; their values are never logged and are masked
in every text that leaves the service.

``${input:...}`` (VS Code's prompt for a value) cannot be answered by a service and is refused
when the file is read. Any other ``${...}`` is left as written: an argument such as
``sh -c 'echo ${HOME}'`` is not a reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MAX_SECRET_FILE_BYTES",
    "ReferenceResolver",
    "UnresolvedReferenceError",
    "check_references",
    "has_references",
]

MAX_SECRET_FILE_BYTES = 64 * 1024
"""A ``${file:...}`` larger than this is refused: a secret is short, and a wrong path should not
make the gateway read a log file into a header."""

_REFERENCE = re.compile(r"\$\{(env|file):([^}]*)\}")
_PROMPT = re.compile(r"\$\{input:[^}]*\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_GATEWAY_PREFIX = "MCP_CLIENT_"
"""The gateway's own settings (its shared secret among them) are never handed to a server."""


class UnresolvedReferenceError(ValueError):
    """A reference cannot be resolved; the message names the reference, never a value."""


def has_references(text: str) -> bool:
    return _REFERENCE.search(text) is not None


def check_references(text: str) -> str:
    """``text`` if its references are well formed; otherwise ``ValueError`` saying what is wrong."""
    prompt = _PROMPT.search(text)
    if prompt:
        raise ValueError(
            f"{prompt.group(0)} asks a person for a value, which a service cannot do; "
            "use ${env:NAME} or ${file:/path/to/secret} instead"
        )
    for match in _REFERENCE.finditer(text):
        kind, target = match.groups()
        if kind == "env" and not _ENV_NAME.fullmatch(target):
            raise ValueError(f"{match.group(0)}: an environment variable name is letters, digits and _")
        if kind == "env" and target.upper().startswith(_GATEWAY_PREFIX):
            raise ValueError(f"{match.group(0)}: the gateway's own settings are never passed to MCP servers")
        if kind == "file" and not target.strip():
            raise ValueError(f"{match.group(0)}: the file path is missing")
    return text


@dataclass
class ReferenceResolver:
    """Resolves the references of one connection attempt and remembers the values it substituted.

    ``environ`` is the gateway's environment (``os.environ``), injected; relative file paths are
    relative to ``base_dir``, the folder of the config file.
    """

    environ: Mapping[str, str]
    base_dir: Path = field(default_factory=Path)
    values: list[str] = field(default_factory=list)
    """Every value substituted so far: secrets to mask in error texts."""

    def resolve(self, text: str) -> str:
        return _REFERENCE.sub(self._value_of, text)

    def _value_of(self, match: re.Match[str]) -> str:
        kind, target = match.groups()
        value = self._env(target) if kind == "env" else self._file(target)
        self.values.append(value)
        return value

    def _env(self, name: str) -> str:
        value = self.environ.get(name)
        if value is None:
            raise UnresolvedReferenceError(f"${{env:{name}}} is not set in the gateway's environment")
        return value

    def _file(self, target: str) -> str:
        path = self.base_dir / Path(target.strip()).expanduser()
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_SECRET_FILE_BYTES + 1)
        except OSError as error:
            raise UnresolvedReferenceError(
                f"${{file:{target}}}: cannot read {path}: {error.strerror or type(error).__name__}"
            ) from None
        if len(data) > MAX_SECRET_FILE_BYTES:
            raise UnresolvedReferenceError(f"${{file:{target}}}: {path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UnresolvedReferenceError(f"${{file:{target}}}: {path} is not UTF-8 text") from None
        # Files written by `echo` or an editor end with a newline that is not part of the secret.
        return text.rstrip("\r\n")
