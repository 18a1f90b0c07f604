"""Header values of tenant servers (and the OAuth vault's tokens), encrypted at rest with Fernet keys from a Secret.

A tenant server's headers carry its credentials (``Authorization: Bearer ...``): the store keeps them as one Fernet
token (AES-128-CBC with HMAC-SHA256, so a changed token is refused, never misread) of their JSON. Several keys may
be set at once (``MCP_CLIENT_SECRETS_KEY=new,old``): the first encrypts, every one decrypts, which is how a key is
rotated out (``python -m mcp_client_service.store rotate-key`` re-encrypts every row with the first).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, MultiFernet
from pydantic import SecretStr

__all__ = ["SecretsBox", "new_key"]


class SecretsBox:
    """Encrypts and decrypts header values with one or more Fernet keys (the first encrypts)."""

    def __init__(self, keys: Sequence[str]) -> None:
        """``ValueError`` (naming the key by position, never showing it) for a key that is not a Fernet key."""
        if not keys:
            raise ValueError("MCP_CLIENT_SECRETS_KEY holds no key.")
        fernets: list[Fernet] = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key.encode("ascii")))
            except (ValueError, UnicodeEncodeError):
                raise ValueError(
                    f"MCP_CLIENT_SECRETS_KEY: key {position} of {len(keys)} is not a Fernet key (32 bytes, url-safe "
                    "base64; make one with python -m mcp_client_service.store generate-key)."
                ) from None
        self._box = MultiFernet(fernets)
        self.key_count = len(fernets)

    @classmethod
    def configured(cls, key: SecretStr, key_file: Path | None) -> SecretsBox | None:
        """The box of ``MCP_CLIENT_SECRETS_KEY`` (``key``) or of the file ``MCP_CLIENT_SECRETS_KEY_FILE`` names
        (``key_file``); ``None`` without a key. ``ValueError`` for a key that is not one, or a file that cannot be
        read."""
        text = _read_key_file(key_file) if key_file is not None else key.get_secret_value()
        keys = [key.strip() for key in text.replace("\n", ",").split(",") if key.strip()]
        return cls(keys) if keys else None

    def seal(self, headers: Mapping[str, str]) -> str:
        """The token of ``headers`` (encrypted with the first key)."""
        return self.seal_json(dict(headers))

    def open(self, token: str) -> dict[str, str]:
        """The headers of ``token``; ``cryptography.fernet.InvalidToken`` when none of the keys encrypted it (or
        it was altered)."""
        headers: dict[str, str] = self.open_json(token)
        return headers

    def seal_json(self, value: Any) -> str:
        """The token of any JSON value (the OAuth vault's tokens, client registrations, pending consents)."""
        plain = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return self._box.encrypt(plain).decode("ascii")

    def open_json(self, token: str) -> Any:
        """The JSON value of ``token`` (``InvalidToken`` as ``open``)."""
        return json.loads(self._box.decrypt(token.encode("ascii")))

    def reseal(self, token: str) -> str:
        """``token`` encrypted again with the first key (``InvalidToken`` as ``open``)."""
        return self._box.rotate(token.encode("ascii")).decode("ascii")


def new_key() -> str:
    """A new random Fernet key."""
    return Fernet.generate_key().decode("ascii")


def _read_key_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"MCP_CLIENT_SECRETS_KEY_FILE {path} cannot be read: {type(error).__name__}.") from None
