"""Whose token: a principal of the gateway's OAuth vault."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Principal"]


@dataclass(frozen=True)
class Principal:
    """The owner of one OAuth token: ``(tenant, server, user)``.

    ``tenant`` is ``""`` for a server of the deployment's servers file; ``user`` is ``""`` for a *machine* server
    (one token for the tenant, or for the deployment), the end user's id (``caller.user``) for a *per-user* one.
    """

    tenant: str
    server: str
    user: str = ""

    def describe(self) -> str:
        """The principal in words, for log lines and messages (never holds a secret)."""
        whose = f"user {self.user}" if self.user else "machine"
        scope = f"tenant {self.tenant}" if self.tenant else "the deployment"
        return f"server {self.server} of {scope} ({whose})"
